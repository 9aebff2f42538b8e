"""Claims: which worker evaluates a candidate. A claim is a conditional UPDATE (``queued`` ->
``running``), so two workers never evaluate one candidate; a claim held by a dead process of
this host, or older than :func:`stale_after`, is taken over and the take-over recorded in the
candidate's ``retry_history``."""

from __future__ import annotations

import os
import socket
from datetime import timedelta

from django.conf import settings
from django.db.models import F
from django.utils import timezone

from swarm.models import Candidate, CandidateStatus


def stale_after() -> timedelta:
    """Age after which a ``running`` claim is presumed dead: twice the evaluation timeout + 60 s."""
    return timedelta(seconds=2 * settings.EVAL_TIMEOUT_S + 60)


def worker_identity() -> str:
    """``host:pid:start`` of this process; the start time guards against pid reuse."""
    return f"{socket.gethostname()}:{os.getpid()}:{_start_time(os.getpid())}"


def _start_time(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return "?"


def holder_is_dead(holder: str) -> bool:
    """True when ``holder`` ran on this host and that process no longer exists."""
    try:
        host, pid, start = holder.rsplit(":", 2)
    except ValueError:
        return False
    if host != socket.gethostname():
        return False
    return _start_time(int(pid)) != start


def claim(candidate_id: int) -> bool:
    """Atomically take a candidate for evaluation; False if another live worker has it or it is done."""
    now = timezone.now()
    me = worker_identity()
    if Candidate.objects.filter(pk=candidate_id, status=CandidateStatus.QUEUED).update(
        status=CandidateStatus.RUNNING, claimed_at=now, claimed_by=me, attempts=F("attempts") + 1
    ):
        return True
    row = Candidate.objects.filter(pk=candidate_id, status=CandidateStatus.RUNNING).values(
        "claimed_by", "claimed_at", "retry_history").first()
    if row is None or row["claimed_by"] == me:
        return False
    if not (holder_is_dead(row["claimed_by"]) or (row["claimed_at"] and row["claimed_at"] < now - stale_after())):
        return False
    history = [*row["retry_history"], {"taken_from": row["claimed_by"], "claimed_at": row["claimed_at"].isoformat() if row["claimed_at"] else None, "taken_at": now.isoformat()}]
    return bool(
        Candidate.objects.filter(pk=candidate_id, status=CandidateStatus.RUNNING, claimed_by=row["claimed_by"]).update(
            claimed_at=now, claimed_by=me, attempts=F("attempts") + 1, retry_history=history
        )
    )


def claim_many(candidate_ids: list[int]) -> list[int]:
    """:func:`claim` for several candidates: one UPDATE for the queued ones, then the
    take-over check only for those another worker holds. Returns the claimed ids in order."""
    now, me = timezone.now(), worker_identity()
    claimed = Candidate.objects.filter(pk__in=candidate_ids, status=CandidateStatus.QUEUED).update(
        status=CandidateStatus.RUNNING, claimed_at=now, claimed_by=me, attempts=F("attempts") + 1
    )
    if claimed == len(set(candidate_ids)):  # every one was queued: all are ours
        return list(candidate_ids)
    mine = set(Candidate.objects.filter(pk__in=candidate_ids, status=CandidateStatus.RUNNING, claimed_by=me,
                                        claimed_at=now).values_list("pk", flat=True))
    mine |= {pk for pk in candidate_ids if pk not in mine and claim(pk)}
    return [pk for pk in candidate_ids if pk in mine]
