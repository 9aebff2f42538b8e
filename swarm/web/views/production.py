"""Production: per (workload, target, shape set) the current kernel, its history, promotion
requests with their verdicts, roll-back, and the audit log."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from swarm.models import AuditEvent, Promotion, PromotionRequest
from swarm.production.promotion import PromotionRefused, approve_request, can_approve, earlier_refusals, reject_request, rollback

AUDIT_ROWS = 200


@login_required
def production(request: HttpRequest) -> HttpResponse:
    promotions = list(Promotion.objects.select_related("candidate__evidence", "promoted_by", "ended_by", "replaced"))
    requests = list(PromotionRequest.objects.select_related("requested_by", "candidate__evidence")[:500])
    keys: dict[tuple[str, str, str], dict] = {}

    def entry(workload: str, target: str, shape_set: str) -> dict:
        return keys.setdefault((workload, target, shape_set), {
            "workload": workload, "target": target, "shape_set": shape_set,
            "current": None, "history": [], "requests": []})

    for p in promotions:
        e = entry(p.workload, p.target, p.shape_set)
        if p.active:
            e["current"] = p
        e["history"].append(p)
    for r in requests:
        if r.state == PromotionRequest.State.AWAITING:
            r.earlier = earlier_refusals(r.candidate, before=r)
        entry(r.workload, r.target, r.shape_set)["requests"].append(r)
    groups = sorted(keys.values(), key=lambda e: (e["current"] is None, e["workload"], e["target"], e["shape_set"]))
    audit = AuditEvent.objects.filter(verb__startswith="promotion.").select_related("actor")[:AUDIT_ROWS]
    return render(request, "swarm/production.html", {
        "groups": groups,
        "active": [p for p in promotions if p.active],
        "history": [p for p in promotions if not p.active],
        "audit": audit,
        "can_approve": can_approve(request.user),
        "four_eyes": settings.PROMOTION_FOUR_EYES,
        "validating": [r.pk for r in requests if r.state == PromotionRequest.State.VALIDATING],
    })


@login_required
@require_POST
def production_rollback(request: HttpRequest, workload: str, target: str, shape_set: str) -> HttpResponse:
    """Roll the key back to the kernel the current one replaced, or to ``to`` (a promotion id)."""
    to = None
    if request.POST.get("to"):
        to = get_object_or_404(Promotion, pk=request.POST["to"])
    try:
        p = rollback(workload, target, shape_set, request.user, to=to, note=request.POST.get("note", "")[:2000])
    except PromotionRefused as exc:
        messages.error(request, f"Not rolled back: {exc}")
    else:
        messages.success(request, f"{p.key} rolled back: candidate {p.candidate_id} is the production kernel again.")
    return redirect("production")


@login_required
@require_POST
def promotion_request_approve(request: HttpRequest, pk: int) -> HttpResponse:
    """A second approver approves an awaiting request: its extended validation starts."""
    req = get_object_or_404(PromotionRequest, pk=pk)
    try:
        approve_request(req, request.user)
    except PromotionRefused as exc:
        messages.error(request, f"Not approved: {exc}")
    else:
        messages.success(request, f"Promotion request {req.pk} approved: candidate {req.candidate_id} is being re-validated.")
    return redirect("production")


@login_required
@require_POST
def promotion_request_reject(request: HttpRequest, pk: int) -> HttpResponse:
    """An approver rejects an awaiting request, with a reason."""
    req = get_object_or_404(PromotionRequest, pk=pk)
    try:
        reject_request(req, request.user, request.POST.get("reason", "")[:2000])
    except PromotionRefused as exc:
        messages.error(request, f"Not rejected: {exc}")
    else:
        messages.success(request, f"Promotion request {req.pk} rejected.")
    return redirect("production")
