"""Promotion of a candidate to production for (workload, target, shape set)."""

from __future__ import annotations

from django.db import transaction

from swarm.models import AuditEvent, Candidate, CandidateStatus, Promotion


class PromotionRefused(Exception):
    """The candidate cannot be promoted; the message says exactly why."""


def promote(candidate: Candidate, user, note: str = "") -> Promotion:
    """Make ``candidate`` the production kernel of its goal's (workload, target, shape set).

    The previous production kernel for that key, if any, is deactivated (kept in history).

    Raises:
        PromotionRefused: the user lacks ``swarm.approve_promotion``, the candidate is not
            ``ok``, or it breaks one of its goal's constraints.
    """
    goal = candidate.goal
    if not user.has_perm("swarm.approve_promotion"):
        raise PromotionRefused(f"{user.get_username()} lacks the approve_promotion permission")
    if candidate.status != CandidateStatus.OK:
        raise PromotionRefused(f"candidate {candidate.pk} is {candidate.status}, only ok candidates can be promoted")
    if not goal.is_feasible(candidate.evidence.metrics):
        raise PromotionRefused(f"candidate {candidate.pk} breaks a constraint of its goal: {goal.constraints}")
    with transaction.atomic():
        Promotion.objects.filter(
            workload=goal.workload, target=goal.target, shape_set=goal.shape_set, active=True
        ).update(active=False)
        promotion = Promotion.objects.create(
            candidate=candidate,
            workload=goal.workload,
            target=goal.target,
            shape_set=goal.shape_set,
            note=note,
            promoted_by=user,
        )
        AuditEvent.objects.create(
            actor=user,
            verb="promotion.create",
            subject=f"{goal.workload}/{goal.target}/{goal.shape_set}",
            data={"candidate": candidate.pk, "hash": candidate.content_hash, "note": note},
        )
    return promotion
