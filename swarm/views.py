"""Server-rendered pages and the JSON endpoints of the production registry."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import CLexer

import kernels
from kernels.space import format_defines
from swarm import orchestrator
from swarm.dispatch import dispatch
from swarm.forms import GoalForm, PromoteForm, RunForm, format_parameters
from swarm.models import Candidate, Goal, Promotion, Run
from swarm.promotion import PromotionRefused, promote


@login_required
def goal_list(request: HttpRequest) -> HttpResponse:
    goals = Goal.objects.prefetch_related("runs")
    return render(request, "swarm/goal_list.html", {"goals": goals})


@login_required
@permission_required("swarm.add_goal", raise_exception=True)
def goal_create(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        form = GoalForm(request.POST)
        if form.is_valid():
            goal = form.save(request.user)
            messages.success(request, f"Goal {goal.name!r} created.")
            return redirect("goal-detail", goal.pk)
    else:
        space = kernels.default_space("rmsnorm").to_dict()
        form = GoalForm(
            initial={
                "name": "RMSNorm, hidden 4096 (Llama-3-8B), cpu-x86_64: minimise latency",
                "workload": "rmsnorm",
                "shape_set": "llama3-8b",
                "parameters": format_parameters(space),
                "restrictions": "\n".join(space["restrictions"]),
            }
        )
    return render(request, "swarm/goal_form.html", {"form": form})


@login_required
def goal_detail(request: HttpRequest, pk: int) -> HttpResponse:
    goal = get_object_or_404(Goal, pk=pk)
    return render(
        request,
        "swarm/goal_detail.html",
        {"goal": goal, "runs": goal.runs.all(), "form": RunForm(), "space_size": goal.space_size()},
    )


@login_required
@require_POST
@permission_required("swarm.add_run", raise_exception=True)
def run_start(request: HttpRequest, pk: int) -> HttpResponse:
    goal = get_object_or_404(Goal, pk=pk)
    form = RunForm(request.POST)
    if not form.is_valid():
        return render(
            request,
            "swarm/goal_detail.html",
            {"goal": goal, "runs": goal.runs.all(), "form": form, "space_size": goal.space_size()},
            status=400,
        )
    d = form.cleaned_data
    run, first = orchestrator.start_run(
        goal, budget=d["budget"], seed=d["seed"], batch_size=d["batch_size"], user=request.user
    )
    dispatch(first)
    return redirect("run-detail", run.pk)


@login_required
def run_detail(request: HttpRequest, pk: int) -> HttpResponse:
    run = get_object_or_404(Run.objects.select_related("goal"), pk=pk)
    page_config = {
        "run": run.pk,
        "objectives": run.goal.objectives,
        "constraints": run.goal.constraints,
        "candidateUrl": reverse("candidate-detail", args=[0]),
    }
    return render(request, "swarm/run_detail.html", {"run": run, "goal": run.goal, "page_config": page_config})


@login_required
@require_POST
@permission_required("swarm.change_run", raise_exception=True)
def run_stop(request: HttpRequest, pk: int) -> HttpResponse:
    run = get_object_or_404(Run, pk=pk)
    orchestrator.stop_run(run, request.user)
    return redirect("run-detail", run.pk)


@login_required
def candidate_detail(request: HttpRequest, pk: int) -> HttpResponse:
    candidate = get_object_or_404(Candidate.objects.select_related("goal", "run"), pk=pk)
    evidence = getattr(candidate, "evidence", None)
    full_source = format_defines(candidate.params) + candidate.source
    formatter = HtmlFormatter(linenos="table", cssclass="source")
    return render(
        request,
        "swarm/candidate_detail.html",
        {
            "candidate": candidate,
            "goal": candidate.goal,
            "evidence": evidence,
            "source_html": highlight(full_source, CLexer(), formatter),
            "source_css": formatter.get_style_defs(".source"),
            "promote_form": PromoteForm(),
            "can_promote": request.user.has_perm("swarm.approve_promotion"),
        },
    )


@login_required
@require_POST
def candidate_promote(request: HttpRequest, pk: int) -> HttpResponse:
    candidate = get_object_or_404(Candidate.objects.select_related("goal", "evidence"), pk=pk)
    form = PromoteForm(request.POST)
    note = form.cleaned_data["note"] if form.is_valid() else ""
    try:
        promote(candidate, request.user, note)
    except PromotionRefused as exc:
        messages.error(request, f"Not promoted: {exc}")
        return redirect("candidate-detail", candidate.pk)
    messages.success(request, f"Candidate {candidate.pk} is now the production kernel.")
    return redirect("production")


@login_required
def production(request: HttpRequest) -> HttpResponse:
    promotions = Promotion.objects.select_related("candidate__evidence", "promoted_by")
    return render(
        request,
        "swarm/production.html",
        {"active": [p for p in promotions if p.active], "history": [p for p in promotions if not p.active]},
    )


@login_required
def api_production(request: HttpRequest) -> JsonResponse:
    """``GET /api/production/``: every active production kernel with its evidence."""
    active = Promotion.objects.filter(active=True).select_related("candidate__evidence", "promoted_by")
    return JsonResponse({"kernels": [p.to_dict() for p in active]})


@login_required
def api_production_kernel(request: HttpRequest, workload: str, target: str, shape_set: str) -> JsonResponse:
    """``GET /api/production/<workload>/<target>/<shape_set>/``: the production kernel, or 404."""
    p = (
        Promotion.objects.filter(active=True, workload=workload, target=target, shape_set=shape_set)
        .select_related("candidate__evidence", "promoted_by")
        .first()
    )
    if p is None:
        raise Http404(f"no production kernel for {workload}/{target}/{shape_set}")
    return JsonResponse(p.to_dict())
