"""A goal's candidates as plain rows, read incrementally.

Every generation the orchestrator needs the whole history of a goal (what agents may know, the
frontier before the generation). Re-reading and re-decoding every row each time makes a run
quadratic in its length. A finished candidate never changes (its status and evidence are
final), so each process keeps the rows of a goal up to the first candidate that is still
pending and afterwards reads only newer rows; one COUNT checks that no kept row was deleted.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from datetime import datetime
from typing import Any, NamedTuple

from swarm.models import PENDING_STATUSES, Candidate, Goal

MAX_GOALS = 8  # goals whose rows a process keeps (a worker serves a handful of runs at once)


class Row(NamedTuple):
    """One candidate. ``metrics`` is its evidence's (None without evidence); treat as read-only."""

    id: int
    run_id: int
    generation: int
    agent: str
    status: str
    params: dict[str, Any]
    metrics: dict[str, Any] | None
    evaluated_at: datetime | None


_FIELDS = ("id", "run_id", "generation", "agent", "status", "params", "evidence__metrics", "evaluated_at")


class _Kept(NamedTuple):
    stamp: tuple[int, datetime]  # goal id and creation time: ids can be reused (SQLite rollbacks)
    watermark: int  # every candidate of the goal with id <= watermark is finished and in rows
    rows: list[Row]


_kept: OrderedDict[int, _Kept] = OrderedDict()
_lock = threading.Lock()


def goal_rows(goal: Goal) -> list[Row]:
    """Every candidate of ``goal`` ordered by id, as :class:`Row` (finished ones from memory)."""
    stamp = (goal.pk, goal.created_at)
    with _lock:
        kept = _kept.get(goal.pk)
    if kept is not None and (kept.stamp != stamp or
                             Candidate.objects.filter(goal=goal, id__lte=kept.watermark).count() != len(kept.rows)):
        kept = None
    start, rows = (kept.watermark, kept.rows) if kept is not None else (0, [])
    fresh = [Row(*r) for r in Candidate.objects.filter(goal=goal, id__gt=start).order_by("id").values_list(*_FIELDS)]
    done = 0
    while done < len(fresh) and fresh[done].status not in PENDING_STATUSES:
        done += 1
    if done or kept is None:
        with _lock:
            _kept[goal.pk] = _Kept(stamp, fresh[done - 1].id if done else start, rows + fresh[:done])
            _kept.move_to_end(goal.pk)
            while len(_kept) > MAX_GOALS:
                _kept.popitem(last=False)
    return rows + fresh


def forget(goal_id: int | None = None) -> None:
    """Drop the kept rows of one goal, or of every goal."""
    with _lock:
        if goal_id is None:
            _kept.clear()
        else:
            _kept.pop(goal_id, None)
