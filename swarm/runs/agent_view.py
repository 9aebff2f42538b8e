"""What agents see of a goal's history, built incrementally per run.

Every generation :func:`swarm.runs.orchestrator.run_view` needs the point key of every candidate of
the goal (what was already proposed) and an :class:`~swarm.agents.Observation` of every finished
one. Building both from scratch each generation costs O(history) Python work per generation
(a JSON key and an object per row), i.e. a run quadratic in its length. A finished candidate
never changes, so each process keeps, per run, the keys and observations of the leading
finished rows and afterwards only processes newer rows. What an observation depends on besides
the row is part of the stamp: the run's constraints (feasibility) and its space's parameter
names (rows of another space are seen by id only); a change of either starts again.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import NamedTuple

from swarm.agents import Observation
from swarm.models import PENDING_STATUSES, UNJUDGED_STATUSES
from swarm.runs.history import Row

MAX_RUNS = 16  # runs whose observations a process keeps


class _Kept(NamedTuple):
    stamp: tuple
    upto: int  # rows[:upto] are finished and folded in
    last_id: int  # id of rows[upto - 1] (0 when upto == 0): detects a changed prefix
    seen: frozenset[str]
    history: tuple[Observation, ...]


_kept: OrderedDict[str, _Kept] = OrderedDict()
_lock = threading.Lock()


def _fold(rows: Sequence[Row], names: set[str], key: Callable[[dict], str], feasible: Callable[[dict], bool],
          seen: set[str], history: list[Observation]) -> None:
    for r in rows:
        seen.add(key(r.params) if r.params.keys() == names else f"#{r.id}")
        # An unjudged candidate (invalid_input) is seen, never observed: agents learn nothing from it.
        if r.status not in PENDING_STATUSES and r.status not in UNJUDGED_STATUSES:
            metrics = r.metrics or {}
            ok = r.status == "ok" and feasible(metrics)
            history.append(Observation(r.id, r.params, r.status, metrics, ok, r.agent))


def observe(run_identity: str, constraints: list[dict], names: Sequence[str], rows: Sequence[Row],
            key: Callable[[dict], str], feasible: Callable[[dict], bool],
            ) -> tuple[frozenset[str], tuple[Observation, ...]]:
    """``(seen, history)`` of ``rows`` (a goal's candidates in id order, :func:`swarm.runs.history.goal_rows`).

    Args:
        run_identity: :attr:`swarm.models.Run.identity` (the cache key).
        constraints: the run's constraints now (part of the stamp).
        names: parameter names of the run's space (part of the stamp).
        key: point key of a parameter dict (``DesignSpace.point_key``).
        feasible: whether an ``ok`` candidate's metrics meet the constraints.

    Returns:
        ``seen``: point keys of every row (``"#<id>"`` for a row of another space);
        ``history``: an observation of every finished row judged (not ``invalid_input``),
        oldest first.
    """
    name_set = set(names)
    stamp = (json.dumps(constraints, sort_keys=True, default=str), tuple(sorted(name_set)))
    with _lock:
        kept = _kept.get(run_identity)
    if kept is not None and (kept.stamp != stamp or kept.upto > len(rows)
                             or (kept.upto and rows[kept.upto - 1].id != kept.last_id)):
        kept = None
    start = kept.upto if kept is not None else 0
    seen = set(kept.seen) if kept is not None else set()
    history = list(kept.history) if kept is not None else []
    done = start
    while done < len(rows) and rows[done].status not in PENDING_STATUSES:
        done += 1
    _fold(rows[start:done], name_set, key, feasible, seen, history)
    if done > start or kept is None:
        with _lock:
            _kept[run_identity] = _Kept(stamp, done, rows[done - 1].id if done else 0, frozenset(seen), tuple(history))
            _kept.move_to_end(run_identity)
            while len(_kept) > MAX_RUNS:
                _kept.popitem(last=False)
    _fold(rows[done:], name_set, key, feasible, seen, history)  # the tail: pending rows and after
    return frozenset(seen), tuple(history)


def forget(run_identity: str | None = None) -> None:
    """Drop the kept observations of one run, or of every run."""
    with _lock:
        if run_identity is None:
            _kept.clear()
        else:
            _kept.pop(run_identity, None)
