"""Candidate page (source, PTX and static resources, lineage, validation, timing, roofline),
promotion requests, and the compare page."""

from __future__ import annotations

import json
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from kernels.evaluation.first_call import first_call_note, is_set_up_cost
from kernels.space import shown_params
from swarm.launch import launch_plan
from swarm.models import Candidate, PairedComparisonRun, PromotionRequest
from swarm.production import paired_runs
from swarm.production.promotion import PromotionRefused, active_promotion, can_approve, earlier_refusals, refusal_lines, request_promotion
from swarm.runs import roofline
from swarm.runs.dispatch import dispatch_paired
from swarm.web import comparison, display
from swarm.web.forms import PromoteForm
from swarm.web.snapshot import MAXIMIZE
from swarm.web.views._common import highlighted, source_css


@login_required
def candidate_detail(request: HttpRequest, pk: int) -> HttpResponse:
    candidate = get_object_or_404(
        Candidate.objects.select_related("goal", "run", "evidence", "reused_from"), pk=pk)
    goal = candidate.goal
    evidence = getattr(candidate, "evidence", None)
    static = None
    if evidence is not None:
        static = getattr(evidence, "static", None) or (evidence.fingerprint or {}).get("static")
    children = list(candidate.children.order_by("id").values("id", "agent", "generation", "status")[:50])
    charts = {
        "samples": evidence.samples_ms if evidence else {},
        "roofline": {"ceilings": roofline.ceilings(goal, evidence), "points": roofline.points(goal, evidence)}
        if evidence and candidate.status == "ok" else None,
    }
    return render(request, "swarm/candidate_detail.html", {
        "candidate": candidate,
        "params": shown_params(candidate.run.label_space(), candidate.params),
        "goal": goal,
        "evidence": evidence,
        "source_html": highlighted(comparison.full_source(candidate), goal.backend),
        "source_css": source_css(),
        "promote_form": PromoteForm(),
        "can_promote": can_approve(request.user),
        "parents": candidate.parents.order_by("id").values("id", "agent", "generation", "status"),
        "children": children,
        "reused_by": candidate.reused_by.count(),
        "launch_plan": json.dumps(launch_plan(candidate), indent=2),
        "static": static,
        "is_cuda": goal.capabilities.static_report,
        "requests": PromotionRequest.objects.filter(candidate=candidate).select_related("requested_by")[:5],
        "incumbent": active_promotion(goal.workload, goal.target, goal.shape_set),
        "charts": charts,
        "throughput": _throughput(goal.workload, evidence.metrics if evidence else {}),
        "fingerprint": display.fingerprint_groups(evidence.fingerprint if evidence else None),
        "metrics": [(k, display.with_unit(k, v)) for k, v in (evidence.metrics.items() if evidence else [])],
        "first_calls": _first_calls(evidence.metrics if evidence else {}),
        "first_call_note": first_call_note(evidence.metrics) if evidence else "",
        "transcript": candidate.transcript or None,
        "transcript_calls": (candidate.transcript or {}).get("calls") or [],
    })


def _first_calls(metrics: dict) -> list[dict]:
    """Per timed shape with a recorded first call: ``{label, steady_ms, first_ms, ratio,
    flagged}`` (ms; ``steady_ms`` is ``latency_ms[<label>]``, the ranked steady state), in the
    evidence's order."""
    rows = []
    for key, first in metrics.items():
        if not (key.startswith("first_call_ms[") and key.endswith("]") and isinstance(first, (int, float))):
            continue
        label = key[len("first_call_ms["):-1]
        steady = metrics.get(f"latency_ms[{label}]")
        steady = steady if isinstance(steady, (int, float)) else None
        cpu = metrics.get(f"first_call_cpu_ms[{label}]")
        cpu = cpu if isinstance(cpu, (int, float)) else None
        rows.append({"label": label, "steady_ms": steady, "first_ms": first,
                     "ratio": first / steady if steady else None,
                     "flagged": steady is not None and is_set_up_cost(first, steady, cpu)})
    return rows


def _throughput(workload: str, metrics: dict) -> dict | None:
    """The candidate's throughput in the workload's unit (:func:`swarm.web.display.throughput`):
    ``{"text": "12.34 GFLOP/s", "bound", "other": "0.5 GB/s"}``, or None without the metric."""
    tp = display.throughput(workload)
    value = metrics.get(tp["metric"])
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    other = "gbps" if tp["metric"] == "gflops" else "gflops"
    return {"text": display.with_unit(tp["metric"], float(value)), "bound": tp["bound"],
            "other": display.with_unit(other, float(metrics[other])) if isinstance(metrics.get(other), (int, float)) else ""}


@login_required
@require_POST
def candidate_promote(request: HttpRequest, pk: int) -> HttpResponse:
    """Ask for a promotion: the extended validation runs on the target's worker; the
    production page shows its progress and, when refused, exactly why."""
    candidate = get_object_or_404(Candidate.objects.select_related("goal", "evidence"), pk=pk)
    form = PromoteForm(request.POST)
    note = form.cleaned_data["note"] if form.is_valid() else ""
    try:
        req = request_promotion(candidate, request.user, note)
    except PromotionRefused as exc:
        messages.error(request, f"Not promoted: {exc}")
        return redirect("candidate-detail", candidate.pk)
    if req.state == req.State.AWAITING:
        messages.success(request, f"Promotion request {req.pk}: candidate {candidate.pk} awaits another approver "
                                  "(four eyes); once approved it is re-validated on "
                                  f"{candidate.goal.target}.")
    else:
        messages.success(request, f"Promotion request {req.pk}: candidate {candidate.pk} is being re-validated on "
                                  f"{candidate.goal.target}; it becomes production if it passes and a paired comparison "
                                  "finds it faster than the incumbent beyond the noise floor.")
    refused = earlier_refusals(candidate, before=req)
    if refused:
        messages.warning(request, f"Candidate {candidate.pk} was refused before: {refusal_lines(refused)}")
    return redirect("production")


def _parse_ids(raw: str) -> tuple[list[int], str]:
    try:
        ids = [int(x) for x in raw.replace(" ", "").split(",") if x]
        if (raw.strip() and not ids) or any(not 0 < i < 2**63 for i in ids):
            raise ValueError  # only commas, or beyond any primary key (the database cannot bind it)
    except ValueError:
        return [], f"ids must be candidate numbers separated by commas, got {raw!r}"
    return list(dict.fromkeys(ids))[: comparison.MAX_COMPARED], ""


def _paired_rows(candidates: list[Candidate]) -> tuple[list[dict], list[dict]]:
    """Per other candidate, whether it can be measured paired against the first; and the
    paired comparisons already recorded among the candidates (newest first)."""
    ref = candidates[0]
    pairs = []
    for c in candidates[1:]:
        try:
            paired_runs.check_pair(ref, c)
            why_not = ""
        except paired_runs.PairedRefused as exc:
            why_not = str(exc)
        pairs.append({"a": ref, "b": c, "why_not": why_not})
    runs = [{"run": r, "summary": paired_runs.summary(r.result) if r.state == PairedComparisonRun.State.DONE else None}
            for r in paired_runs.history([c.pk for c in candidates])]
    return pairs, runs


@login_required
def compare(request: HttpRequest) -> HttpResponse:
    """``?ids=1,2,3``: candidates side by side against the first: source diff, parameter diff,
    metric deltas, each one's stored medians (separate-process measurements, no verdict), and
    paired comparisons against the first ("Measure paired" and the recorded ones). Without ids
    (the navigation link) the empty form (200); unknown, malformed or too few ids are a 400."""
    raw = request.GET.get("ids", "")
    ids, error = _parse_ids(raw)
    found = {c.pk: c for c in Candidate.objects.filter(pk__in=ids).select_related("goal", "run", "evidence")}
    missing = [i for i in ids if i not in found]
    candidates = [found[i] for i in ids if i in found]
    if not error and missing:
        error = f"no candidate {', '.join(map(str, missing))}"
    if not error and ids and len(candidates) < 2:
        error = "pick at least two candidates to compare (e.g. ?ids=12,40)"
    ctx = {"ids": raw, "error": error, "candidates": candidates}
    if len(candidates) >= 2:
        ref = candidates[0]
        pairs, runs = _paired_rows(candidates)
        ctx.update(
            diffs=[{"other": c, "html": comparison.source_diff_html(ref, c)} for c in candidates[1:]],
            params=comparison.parameter_rows(candidates),
            metrics=display.metric_cells(comparison.metric_rows(candidates), ref.goal.objectives, MAXIMIZE),
            stored_medians=comparison.stored_median_rows(candidates),
            pairs=pairs,
            paired_runs=runs,
            samples={f"#{c.pk}": (c.evidence.samples_ms if getattr(c, "evidence", None) else {}) for c in candidates},
            different_goals=len({c.goal_id for c in candidates}) > 1,
        )
    return render(request, "swarm/compare.html", ctx, status=200 if not error else 400)


@login_required
@require_POST
def compare_measure_paired(request: HttpRequest) -> HttpResponse:
    """``POST a, b[, ids]``: record a paired comparison of candidates ``a`` (A) and ``b`` (B)
    and send it to their target's worker; back to the compare page of ``ids`` (default
    ``a,b``), which shows it queued, then its verdict. A pair that cannot be measured (a replay
    record, different goals' keys) is refused with the reason."""
    ids = request.POST.get("ids") or f"{request.POST.get('a', '')},{request.POST.get('b', '')}"
    back = f"{reverse('compare')}?{urlencode({'ids': ids})}"
    try:
        a_pk, b_pk = int(request.POST.get("a", "")), int(request.POST.get("b", ""))
        if not (0 < a_pk < 2**63 and 0 < b_pk < 2**63):
            raise ValueError
    except ValueError:
        messages.error(request, "Measure paired needs two candidate numbers a and b")
        return redirect(back)
    a = get_object_or_404(Candidate.objects.select_related("goal"), pk=a_pk)
    b = get_object_or_404(Candidate.objects.select_related("goal"), pk=b_pk)
    try:
        with transaction.atomic():
            run = paired_runs.request_paired(a, b, request.user)
            dispatch_paired(run)
    except paired_runs.PairedRefused as exc:
        messages.error(request, f"Not measured: {exc}")
        return redirect(back)
    messages.success(request, f"Paired comparison {run.pk}: #{a.pk} (A) against #{b.pk} (B) is queued on "
                              f"{a.goal.target}; the verdict appears below when it is measured.")
    return redirect(back)
