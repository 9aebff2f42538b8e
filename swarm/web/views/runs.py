"""The run page (live over the websocket) and the engineer's steering: directions, accepted
insights, stop, cancelling a candidate."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.db.models import Count
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from swarm.models import PENDING_STATUSES, Candidate, Direction, Insight, Run
from swarm.runs import baselines, cancelling, directions, orchestrator, results
from swarm.web import display
from swarm.web.forms import DirectionForm
from swarm.web.snapshot import MAXIMIZE
from swarm.web.views._common import json_refusal, wants_json


def _page(request: HttpRequest, run: Run, *, form: DirectionForm | None = None, error: str = "",
          status: int = 200) -> HttpResponse:
    goal = run.goal
    page_config = {
        "run": run.pk,
        "objectives": goal.objectives,
        "constraints": run.constraints,
        "maximize": sorted(MAXIMIZE),
        "candidateUrl": reverse("candidate-detail", args=[0]),
        "compareUrl": reverse("compare"),
        "directionUrl": reverse("run-direction", args=[run.pk]),
        "acceptUrl": reverse("run-insight-accept", args=[run.pk, 0]),
        "cancelUrl": reverse("run-candidate-cancel", args=[run.pk, 0]),
        "eventsUrl": reverse("api-run-events", args=[run.pk]),
        "canSteer": request.user.has_perm("swarm.change_run"),
        "throughput": display.throughput(goal.workload),
        "units": display.unit_rules(),
        "tableUrl": reverse("run-candidates", args=[run.pk]),
    }
    top = results.best(run)
    # What the live status bar shows, as of this request: right before (or without) the socket.
    counts = dict(run.candidates.values_list("status").annotate(n=Count("id")).order_by("status"))
    evaluated = sum(n for status, n in counts.items() if status not in PENDING_STATUSES)
    return render(request, "swarm/run_detail.html", {
        "run": run, "goal": goal, "page_config": page_config, "form": form or DirectionForm(),
        "evaluated": evaluated, "status_counts": " · ".join(f"{k}: {n}" for k, n in counts.items()),
        "speedup": baselines.speedup(run, top.evidence.metrics.get("latency_ms") if top else None),
        "direction_error": error, "direction_kinds": Direction.Kind.choices,
        "can_steer": page_config["canSteer"], "llm_lanes": _lanes(run),
    }, status=status)


def _lanes(run: Run) -> list[dict]:
    """The run's LLM lanes: ``{name, calls, prompt_tokens, completion_tokens, cost_usd,
    max_run_tokens, max_run_cost_usd (0: no limit), state, reason}``."""
    lanes = (run.llm_usage or {}).get("lanes") or {}
    out = []
    for a in run.agents.all():
        if a.kind != "llm":
            continue
        lane = lanes.get(a.name) or {}
        out.append({"name": a.name, **{k: lane.get(k, 0) for k in ("calls", "prompt_tokens", "completion_tokens")},
                    "cost_usd": round(float(lane.get("cost_usd", 0)), 6),
                    "max_run_tokens": (a.settings or {}).get("max_run_tokens", 0),
                    "max_run_cost_usd": (a.settings or {}).get("max_run_cost_usd", 0),
                    "state": lane.get("state", "open"), "reason": lane.get("reason", "")})
    return out


@login_required
def run_detail(request: HttpRequest, pk: int) -> HttpResponse:
    run = get_object_or_404(Run.objects.select_related("goal"), pk=pk)
    return _page(request, run)


@require_POST
def run_stop(request: HttpRequest, pk: int) -> HttpResponse:
    """Stop the run; back to its page, or to a JSON request (the page's fetch, which keeps the
    page as it is) ``{"ok": true, "stopped": bool, "run": run_state}`` (``stopped`` false and a
    ``note`` when the run had already ended), or ``{"ok": false, "error"}`` with 401, 403 or 404."""
    refused = json_refusal(request, "swarm.change_run")
    if refused is not None:
        return refused
    if wants_json(request):
        run = Run.objects.filter(pk=pk).first()
        if run is None:
            return JsonResponse({"ok": False, "error": f"no run {pk}"}, status=404)
        was = run.state
        orchestrator.stop_run(run, request.user, via="the run page")
        run.refresh_from_db()
        out = {"ok": True, "stopped": was == Run.State.RUNNING, "run": orchestrator.run_state(run)}
        if was != Run.State.RUNNING:
            out["note"] = f"run {run.pk} had already ended ({run.state}): nothing to stop"
        return JsonResponse(out)
    return _stop_page(request, pk)


@require_POST
def run_candidate_cancel(request: HttpRequest, pk: int, candidate_id: int) -> HttpResponse:
    """Cancel a queued or running candidate of the run (:func:`swarm.runs.cancelling.cancel`): to a
    JSON request (the page's fetch) ``{"ok": true, "candidate": to_dict}``, or ``{"ok": false,
    "error"}`` with 401, 403, 404 or 409 (already evaluated, or the run ended); a page request
    goes back to the run page (the message says what happened)."""
    refused = json_refusal(request, "swarm.change_run")
    if refused is not None:
        return refused
    if not wants_json(request):
        return _cancel_page(request, pk, candidate_id)
    candidate = Candidate.objects.filter(pk=candidate_id, run_id=pk).first()
    if candidate is None:
        return JsonResponse({"ok": False, "error": f"run {pk} has no candidate {candidate_id}"}, status=404)
    try:
        done = cancelling.cancel(candidate, request.user, via="the run page")
    except cancelling.CancelError as exc:
        return JsonResponse({"ok": False, "error": str(exc)}, status=409)
    return JsonResponse({"ok": True, "candidate": done.to_dict()})


@login_required
@permission_required("swarm.change_run", raise_exception=True)
def _cancel_page(request: HttpRequest, pk: int, candidate_id: int) -> HttpResponse:
    candidate = get_object_or_404(Candidate, pk=candidate_id, run_id=pk)
    try:
        cancelling.cancel(candidate, request.user, via="the run page")
        messages.success(request, f"Candidate {candidate_id} cancelled.")
    except cancelling.CancelError as exc:
        messages.error(request, str(exc))
    return redirect("run-detail", pk)


@login_required
@permission_required("swarm.change_run", raise_exception=True)
def _stop_page(request: HttpRequest, pk: int) -> HttpResponse:
    run = get_object_or_404(Run, pk=pk)
    orchestrator.stop_run(run, request.user, via="the run page")
    return redirect("run-detail", run.pk)


def _submitted(request: HttpRequest, run: Run, kind: str, payload: dict, form: DirectionForm | None = None) -> HttpResponse:
    try:
        d = directions.submit(run, kind, payload, author=request.user)
    except directions.DirectionError as exc:
        if wants_json(request):
            return JsonResponse({"ok": False, "error": str(exc)}, status=400)
        return _page(request, run, form=form, error=str(exc), status=400)
    if wants_json(request):
        return JsonResponse({"ok": True, "direction": d.to_dict()}, status=201)
    messages.success(request, f"Direction {d.kind} recorded; it applies when the run next proposes candidates.")
    return redirect("run-detail", run.pk)


@login_required
@require_POST
@permission_required("swarm.change_run", raise_exception=True)
def run_direction(request: HttpRequest, pk: int) -> HttpResponse:
    """Submit a direction (narrow/exclude values, add a restriction, change a constraint,
    boost/pause/resume an agent, stop); a ``DirectionError`` message comes back in place."""
    run = get_object_or_404(Run.objects.select_related("goal"), pk=pk)
    form = DirectionForm(request.POST)
    if not form.is_valid():
        error = "; ".join(f"{k}: {' '.join(v)}" for k, v in form.errors.items())
        if wants_json(request):
            return JsonResponse({"ok": False, "error": error}, status=400)
        return _page(request, run, form=form, error=error, status=400)
    try:
        payload = form.payload()
    except Exception as exc:  # noqa: BLE001 - a ValidationError from parsing the values
        error = getattr(exc, "messages", [str(exc)])[0]
        if wants_json(request):
            return JsonResponse({"ok": False, "error": error}, status=400)
        return _page(request, run, form=form, error=error, status=400)
    return _submitted(request, run, form.cleaned_data["kind"], payload, form)


@login_required
@require_POST
@permission_required("swarm.change_run", raise_exception=True)
def run_insight_accept(request: HttpRequest, pk: int, insight_id: int) -> HttpResponse:
    """Accept a suggested restriction (an insight of kind ``failure_rule``) as a direction."""
    run = get_object_or_404(Run.objects.select_related("goal"), pk=pk)
    insight = get_object_or_404(Insight, pk=insight_id, workload=run.goal.workload, target=run.goal.target)
    restriction = (insight.data or {}).get("restriction")
    if insight.kind != Insight.Kind.FAILURE_RULE or not restriction:
        error = f"insight {insight.pk} ({insight.kind}) suggests no restriction"
        if wants_json(request):
            return JsonResponse({"ok": False, "error": error}, status=400)
        return _page(request, run, error=error, status=400)
    return _submitted(request, run, Direction.Kind.ADD_RESTRICTION, {"expression": restriction})
