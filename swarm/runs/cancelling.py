"""Cancelling one candidate of a running run (the run page's cancel button, the API).

A queued candidate is cancelled at once (its task, when it arrives, finds nothing to claim)
and gets evidence saying so. A running one is marked ``cancelled`` (a conditional UPDATE, as
claims are); the worker that evaluates it reads that status while the sandbox child runs
(:class:`swarm.runs.pruning.CancelCheck`), kills the child and stores what it got (the worker
owns the child, in embedded mode a thread of the server, in production a Celery worker
process: both read the same row). Either way the run's freed slot is proposed again at once.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from swarm.models import AuditEvent, Candidate, CandidateStatus, Evidence, Run
from swarm.runs import events, orchestrator
from swarm.runs.dispatch import dispatch


class CancelError(ValueError):
    """The candidate cannot be cancelled; the message says why."""


def cancel(candidate: Candidate, user=None, *, via: str = "") -> Candidate:
    """Cancel ``candidate`` (queued or running, of a running run) and refill the run's slot.

    Returns:
        The candidate, re-read (``status`` ``cancelled``).

    Raises:
        CancelError: it is already evaluated (or cancelled), or its run is not running.
    """
    who = user.get_username() if user is not None and user.is_authenticated else "an unknown user"
    how = f" through {via}" if via else ""
    now = timezone.now()
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=candidate.run_id)
        if run.state != Run.State.RUNNING:
            raise CancelError(f"run {run.pk} is {run.state}: only candidates of a running run can be cancelled")
        if Candidate.objects.filter(pk=candidate.pk, status=CandidateStatus.QUEUED).update(
                status=CandidateStatus.CANCELLED, evaluated_at=now):
            Evidence.objects.create(candidate_id=candidate.pk, status=CandidateStatus.CANCELLED,
                                    log=f"cancelled by {who}{how} before it ran")
        elif not Candidate.objects.filter(pk=candidate.pk, status=CandidateStatus.RUNNING).update(
                status=CandidateStatus.CANCELLED, evaluated_at=now):
            status = Candidate.objects.filter(pk=candidate.pk).values_list("status", flat=True).first()
            raise CancelError(f"candidate {candidate.pk} is {status}: only queued or running candidates can be cancelled")
        AuditEvent.objects.create(actor=user if user is not None and user.is_authenticated else None,
                                  verb="candidate.cancel", subject=f"candidate {candidate.pk}",
                                  data={"run": run.pk, "via": via})
    dispatch(orchestrator.advance(run.pk))  # the freed slot (agents propose outside the run's lock)
    fresh = Candidate.objects.select_related("evidence").get(pk=candidate.pk)
    if events.listening():
        events.publish(run.pk, "candidate", fresh.to_dict())
    return fresh
