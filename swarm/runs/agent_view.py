"""What agents see: the frozen :class:`~swarm.agents.RunView` of a run (:func:`run_view`), with the
goal's history built incrementally per run (:func:`observe`).

Every generation :func:`run_view` needs the point key of every candidate of
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
from dataclasses import replace
from typing import Any, NamedTuple

import kernels
from kernels.space import format_defines
from swarm.agents import AGENTS, Observation, RelatedEvidence, RunView
from swarm.learning import store as insight_store
from swarm.models import PENDING_STATUSES, UNJUDGED_STATUSES, Candidate, Evidence, Goal, Run
from swarm.runs import roofline
from swarm.runs.history import Row
from swarm.runs.history import goal_rows as history_rows

MAX_RUNS = 16  # runs whose observations a process keeps


class _Kept(NamedTuple):
    stamp: tuple
    upto: int  # rows[:upto] are finished and folded in
    last_id: int  # id of rows[upto - 1] (0 when upto == 0): detects a changed prefix
    seen: frozenset[str]
    history: tuple[Observation, ...]


_kept: OrderedDict[str, _Kept] = OrderedDict()
_related_kept: OrderedDict[str, tuple[RelatedEvidence, ...]] = OrderedDict()
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
    """Drop the kept observations and related evidence of one run, or of every run."""
    with _lock:
        if run_identity is None:
            _kept.clear()
            _related_kept.clear()
        else:
            _kept.pop(run_identity, None)
            _related_kept.pop(run_identity, None)


def reads_context(kind: str) -> bool:
    """Whether agents of ``kind`` read sources, logs and insights (an unknown kind: assume so)."""
    return getattr(AGENTS.get(kind), "reads_context", True)


def climbs(kind: str) -> bool:
    """Whether agents of ``kind`` climb from the best evaluations, and so take a run's endgame
    (an unknown kind: no)."""
    return getattr(AGENTS.get(kind), "climbs", False)


def reads_related(kind: str) -> bool:
    """Whether agents of ``kind`` read other goals' evaluations (an unknown kind: assume so)."""
    return getattr(AGENTS.get(kind), "reads_related", True)


def run_view(run: Run, generation: int | None = None, *, rows: list | None = None, context: bool = True,
             related: bool = True) -> RunView:
    """Frozen snapshot of what agents may know about ``run`` and its goal's evidence.

    Args:
        run: the run.
        generation: number of the generation being proposed (default: the next one).
        rows: the goal's rows (:func:`swarm.runs.history.goal_rows`) when the caller has them.
        context: fill what only coding agents read (sources and logs of the best and the
            recently failed candidates, insights); parameter agents need none of it.
        related: fill ``RunView.related`` (other goals' evaluations, read once per run and
            process); only transferring agents read it.
    """
    goal = run.goal
    space = run.design_space()
    seen, history = observe(run.identity, run.constraints, space.names,
                                         history_rows(goal) if rows is None else rows,
                                         space.point_key, run.is_feasible)
    partial = RunView(
        workload=goal.workload, target=goal.target, space=space, objectives=tuple(goal.objectives),
        constraints=tuple(run.constraints), generation=generation or run.generation + 1,
        seen=seen, history=history, related=_related(run) if related else (),
    )
    if not context:
        return replace(partial, warm_start=tuple(run.warm_start.get("configs", [])), run=run.identity)
    # Sources and logs only for what an LLM prompt shows: the best few and recent failures.
    recent_failures = [o.candidate for o in history if o.status != "ok"][-3:]
    # The best kernels of any parameters too (coding agents' own sources), overall and per agent.
    best_kernels = {o.candidate for o in partial.best_kernels(3)} | {
        o.candidate for a in {o.agent for o in history} for o in partial.best_kernels(3, agent=a)}
    detail_ids = {o.candidate for o in partial.ranked()[:3]} | set(recent_failures) | best_kernels
    details = {
        c.pk: c for c in Candidate.objects.filter(pk__in=detail_ids).select_related("evidence").only(
            "id", "source", "params", "evidence__log")
    }
    if details:
        history = [
            Observation(o.candidate, o.params, o.status, o.metrics, o.feasible, o.agent,
                        source=format_defines(o.params) + details[o.candidate].source,
                        log=getattr(getattr(details[o.candidate], "evidence", None), "log", "")[-3000:])
            if o.candidate in details else o
            for o in history
        ]
    return replace(
        partial,
        history=tuple(history),
        warm_start=tuple(run.warm_start.get("configs", [])),
        insights=tuple(insight_store.latest_insights(goal.workload, goal.target)),
        contract=_contract(goal.workload),
        template=goal.source,
        run=run.identity,
        incumbent=_incumbent(goal, partial),
        directions=tuple(_direction_line(d) for d in run.directions.filter(state="applied").order_by("applied_at")[:20]),
        context_tokens=goal.llm_context_tokens,
    )


def _related(run: Run) -> tuple[RelatedEvidence, ...]:
    """The other goals' evidence a transferring model reads (:func:`swarm.learning.store.
    related_evidence`): what they had evaluated when the run started, read once per run and
    process (the same in every process)."""
    with _lock:
        if run.identity in _related_kept:
            _related_kept.move_to_end(run.identity)
            return _related_kept[run.identity]
    related = tuple(RelatedEvidence(r["source"], tuple(r["points"]), tuple(r["scores"]))
                    for r in insight_store.related_evidence(run.goal, before=run.started_at))
    with _lock:
        _related_kept[run.identity] = related
        while len(_related_kept) > MAX_RUNS:
            _related_kept.popitem(last=False)
    return related


def _incumbent(goal: Goal, view: RunView) -> dict[str, Any]:
    """The best feasible candidate's roofline position and static resources (RunView.incumbent)."""
    top = view.best_kernels(1)
    if not top:
        return {}
    ev = Evidence.objects.filter(candidate_id=top[0].candidate).first()
    if ev is None:
        return {}
    return {"candidate": top[0].candidate, "roofline": roofline.points(goal, ev),
            "ceilings": {k: v for k, v in roofline.ceilings(goal, ev).items() if k in ("gbps", "gflops")},
            "static": ev.static or {}}


def _direction_line(d) -> str:
    return f"{d.kind} {json.dumps(d.payload, sort_keys=True)} (generation {d.applied_generation})"


def _contract(workload: str) -> str:
    try:
        w = kernels.get_workload(workload)
    except KeyError:
        return f"Recorded workload '{workload}' (replay): only parameters can be proposed."
    return f"Entry point: {w.c_signature}\nCorrectness: {w.error_definition or 'max relative error within tolerance'} (tolerance {w.tolerance:g})."
