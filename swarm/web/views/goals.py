"""Goals: list (state, best result, speedup over the baseline), create and edit with a live
design-space check and template preview, detail, starting a run."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

import kernels
from kernels.space import label_text
from swarm.goals import lifecycle
from swarm.goals.validation import space_size
from swarm.models import AuditEvent, Goal, Run
from swarm.runs import baselines, orchestrator
from swarm.runs.dispatch import dispatch
from swarm.web import goal_editor
from swarm.web.forms import GoalForm, RunForm
from swarm.web.views._common import best_candidate, source_css


def goal_state(goal: Goal, runs: list[Run]) -> str:
    if any(r.state == Run.State.RUNNING for r in runs):
        return "running"
    return runs[0].state if runs else "no runs"


@login_required
def goal_list(request: HttpRequest) -> HttpResponse:
    """The active goals; ``?archived=1`` the archived ones (the "Archived" tab)."""
    show_archived = request.GET.get("archived") == "1"
    goals = list(Goal.objects.filter(archived_at__isnull=not show_archived).prefetch_related("runs"))
    stored = baselines.lookup(goals)
    rows = []
    for g in goals:
        runs = list(g.runs.all())
        best = best_candidate(g)
        baseline = stored.get(baselines.key_of(g))
        latency = best.evidence.metrics.get("latency_ms") if best else None
        speedup = baselines.speedup(g, latency, rows=stored)
        rows.append({"goal": g, "state": goal_state(g, runs), "runs": runs, "latest": runs[0] if runs else None,
                     "best": best, "best_value": best.evidence.metrics.get(g.primary["metric"]) if best else None,
                     "latency": latency, "baseline": baseline, "speedup": speedup})
    return render(request, "swarm/goal_list.html", {
        "rows": rows, "show_archived": show_archived,
        "n_archived": Goal.objects.filter(archived_at__isnull=False).count(),
        "n_active": Goal.objects.filter(archived_at__isnull=True).count()})


def _form_page(request: HttpRequest, form: GoalForm, goal: Goal | None, status: int = 200) -> HttpResponse:
    return render(request, "swarm/goal_form.html",
                  {"form": form, "goal": goal, "source_css": source_css(),
                   "workloads": sorted(kernels.WORKLOADS)}, status=status)


@login_required
@permission_required("swarm.add_goal", raise_exception=True)
def goal_create(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        form = GoalForm(request.POST)
        if form.is_valid():
            with transaction.atomic():
                goal = form.save(request.user)
                AuditEvent.objects.create(actor=request.user, verb="goal.create", subject=f"goal {goal.pk}",
                                          data={"name": goal.name})
                baselines.ensure(goal)
            messages.success(request, f"Goal {goal.name!r} created.")
            return redirect("goal-detail", goal.pk)
        return _form_page(request, form, None)
    initial = {"workload": "rmsnorm", "target": "cpu-x86_64", **goal_editor.defaults("rmsnorm", "cpu-x86_64", "llama3-8b")}
    return _form_page(request, GoalForm(initial=initial), None)


@login_required
@permission_required("swarm.change_goal", raise_exception=True)
def goal_edit(request: HttpRequest, pk: int) -> HttpResponse:
    goal = get_object_or_404(Goal, pk=pk)
    if request.method == "POST":
        form = GoalForm(request.POST, instance=goal)
        if form.is_valid():
            before = GoalForm.initial_for(Goal.objects.get(pk=pk))
            with transaction.atomic():
                goal = form.save(request.user)
                after = GoalForm.initial_for(goal)
                changed = sorted(k for k in after if after[k] != before.get(k))
                AuditEvent.objects.create(actor=request.user, verb="goal.change", subject=f"goal {goal.pk}",
                                          data={"changed": changed})
            messages.success(request, f"Goal {goal.name!r} saved; runs started from now on use it.")
            return redirect("goal-detail", goal.pk)
        return _form_page(request, form, goal)
    return _form_page(request, GoalForm(instance=goal), goal)


@login_required
def goal_detail(request: HttpRequest, pk: int) -> HttpResponse:
    goal = get_object_or_404(Goal, pk=pk)
    return _detail(request, goal, RunForm())


def _detail(request: HttpRequest, goal: Goal, form: RunForm, status: int = 200) -> HttpResponse:
    best = best_candidate(goal)
    stored = baselines.lookup([goal], schedule=False).get(baselines.key_of(goal))
    size = space_size(goal.design_space())
    return render(request, "swarm/goal_detail.html", {
        "goal": goal, "runs": goal.runs.all(), "form": form, "space_size": size["cartesian"], "size": size,
        "space_rows": [{"name": p["name"], "values": p["values"], "labels": [label_text(v) for v in p.get("labels") or ()]}
                       for p in goal.space.get("parameters", [])],
        "best": best, "baseline": stored,
        "speedup": baselines.speedup(goal, best.evidence.metrics.get("latency_ms") if best else None,
                                     rows={baselines.key_of(goal): stored} if stored else {}),
        "can_edit": request.user.has_perm("swarm.change_goal"), "can_run": request.user.has_perm("swarm.add_run"),
        "can_add": request.user.has_perm("swarm.add_goal"),
    }, status=status)


@login_required
@require_POST
@permission_required("swarm.add_run", raise_exception=True)
def run_start(request: HttpRequest, pk: int) -> HttpResponse:
    goal = get_object_or_404(Goal, pk=pk)
    form = RunForm(request.POST)
    if not form.is_valid():
        return _detail(request, goal, form, status=400)
    d = form.cleaned_data
    try:
        run, first = orchestrator.start_run(goal, budget=d["budget"], seed=d["seed"], batch_size=d["batch_size"],
                                            user=request.user)
    except ValueError as exc:
        form.add_error(None, str(exc))
        return _detail(request, goal, form, status=400)
    AuditEvent.objects.create(actor=request.user, verb="run.start", subject=f"run {run.pk}",
                              data={"goal": goal.pk, "budget": d["budget"], "batch_size": d["batch_size"]})
    dispatch(first)
    return redirect("run-detail", run.pk)


@login_required
@require_POST
@permission_required("swarm.change_goal", raise_exception=True)
def goal_archive(request: HttpRequest, pk: int) -> HttpResponse:
    """``POST [archived=0]``: archive the goal (``archived=0``: unarchive it); back to its page."""
    goal = get_object_or_404(Goal, pk=pk)
    archive = request.POST.get("archived", "1") != "0"
    lifecycle.set_archived(goal, archive, request.user)
    messages.success(request, f"Goal {goal.name!r} archived: hidden from the goal list, its runs kept; "
                              "unarchive it to start runs." if archive else f"Goal {goal.name!r} unarchived.")
    return redirect("goal-detail", goal.pk)


@login_required
@require_POST
@permission_required("swarm.add_goal", raise_exception=True)
def goal_duplicate(request: HttpRequest, pk: int) -> HttpResponse:
    """``POST``: a copy of the goal named ``"<name> (copy)"``, opened in the editor."""
    goal = get_object_or_404(Goal, pk=pk)
    copy = lifecycle.duplicate(goal, request.user)
    messages.success(request, f"Goal {copy.name!r} created as a copy of goal {goal.pk}; edit it below.")
    return redirect("goal-edit", copy.pk)
