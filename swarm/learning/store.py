"""Persisting insights per (workload, target) and reading them back for warm starts.

The computations live in :mod:`swarm.learning.insights`; this module chooses the evidence, stores the
results and serves them to agents and pages.
"""

from __future__ import annotations

import math
from datetime import datetime
from itertools import zip_longest
from typing import Any

import numpy as np

from swarm.learning import insights
from swarm.models import PENDING_STATUSES, Candidate, Goal, Insight, Run

MAX_ROWS = 5000  # newest evaluations used per update: keeps an update in milliseconds
WARM_START_CONFIGS = 8
WARM_START_PER_GOAL = 3  # best configurations taken from each other goal of the workload
WARM_START_GOALS = 20  # other goals of the workload read for a warm start, newest first
TRANSFER_GOALS = 4  # other goals whose evaluations a transferring model reads (related_evidence)
TRANSFER_ROWS = 300  # points per such goal, spread over its ranking
IMPORTANCE_ROWS = 200
LEARN_GROWTH = 1.5  # learn again once a run has half as many generations again
_learned_at: dict[str, int] = {}  # run identity -> generation last learned from (per process)


def due(run: Run, generation: int, final: bool = False) -> bool:
    """Whether to learn after ``generation``: on a geometric schedule (1, 2, 3, 4, 6, 9, 13,
    ...), so a run of G generations learns O(log G) times, and always after a ``final`` one
    (the run has proposed its whole budget), so that what a run found last is learned. A
    restarted process learns at its first boundary."""
    key = run.identity
    last = _learned_at.get(key)
    if not final and last is not None and generation < max(last + 1, LEARN_GROWTH * last):
        return False
    _learned_at[key] = generation
    return True


def update_insights(run: Run, generation: int) -> list[Insight]:
    """Recompute importance, failure rules and best configurations from the goal's evidence.

    Evidence comes from every goal with the same workload and target whose design space has the
    same parameter names. Returns the insights created or changed.
    """
    goal = run.goal
    space = run.design_space()
    names = set(space.names)
    primary = goal.primary
    sign = 1.0 if primary["direction"] == "minimize" else -1.0
    rows = list(
        Candidate.objects.filter(goal__workload=goal.workload, goal__target=goal.target)
        .exclude(status__in=PENDING_STATUSES)
        .order_by("-id")
        .values_list("params", "status", "evidence__metrics")[:MAX_ROWS]
    )
    rows = [(p, s, m or {}) for p, s, m in rows if set(p) == names]
    ok = [(p, m) for p, s, m in rows if s == "ok" and run.is_feasible(m)]
    changed: list[Insight] = []
    common = dict(workload=goal.workload, target=goal.target, run=run, generation=generation)

    values = [(p, sign * m[primary["metric"]]) for p, m in ok if _finite(m.get(primary["metric"]))]
    last = Insight.objects.filter(kind=Insight.Kind.IMPORTANCE, workload=goal.workload, target=goal.target).first()
    # Importance is the costly part: recompute when the evidence grew by a quarter.
    stale = last is None or len(values) >= 1.25 * last.data.get("n", 0)
    # PED-ANOVA on the newest evaluations is enough to rank parameters and bounds the cost.
    imp = insights.parameter_importance(space, values[:IMPORTANCE_ROWS]) if stale else None
    if imp:
        changed.append(Insight.objects.create(
            kind=Insight.Kind.IMPORTANCE, shape_set=goal.shape_set,
            data={"importances": imp, "method": "optuna PED-ANOVA", "objective": primary["metric"], "n": len(values)},
            **common,
        ))

    known = set(Insight.objects.filter(kind=Insight.Kind.FAILURE_RULE, workload=goal.workload, target=goal.target)
                .values_list("data__rule", flat=True))
    for rule in insights.failure_rules(space, [(p, s) for p, s, _ in rows]):
        if rule["rule"] not in known:
            changed.append(Insight.objects.create(kind=Insight.Kind.FAILURE_RULE, shape_set="", data=rule, **common))

    for shape, best in insights.best_per_shape(ok).items():
        current = Insight.objects.filter(
            kind=Insight.Kind.BEST_CONFIG, workload=goal.workload, target=goal.target,
            shape_set=goal.shape_set, data__shape=shape,
        ).first()
        if current is None or best["latency_ms"] < current.data["latency_ms"]:
            data = {"shape": shape, **best}
            if current is None:
                changed.append(Insight.objects.create(kind=Insight.Kind.BEST_CONFIG, shape_set=goal.shape_set, data=data, **common))
            else:
                current.data, current.run, current.generation = data, run, generation
                current.save(update_fields=["data", "run", "generation"])
                changed.append(current)
    return changed


def latest_insights(workload: str, target: str, limit: int = 20) -> list[dict[str, Any]]:
    """Latest importance, every failure rule and every best configuration for (workload, target)."""
    qs = Insight.objects.filter(workload=workload, target=target)
    out = [i.to_dict() for i in qs.filter(kind=Insight.Kind.IMPORTANCE)[:1]]
    out += [i.to_dict() for i in qs.filter(kind=Insight.Kind.FAILURE_RULE)[:limit]]
    out += [i.to_dict() for i in qs.filter(kind=Insight.Kind.BEST_CONFIG)[:limit]]
    return out


def warm_start(goal: Goal) -> dict[str, Any]:
    """The first proposals of a new run: what earlier runs on this workload learned, as
    configurations that fit the goal's space (at most :data:`WARM_START_CONFIGS`).

    First the best configurations of the insights (this target first, then any other target or
    shape set; at most half the configurations); then, from the evaluated candidates of the
    other goals of the workload with the goal's parameter names (the same kernel tuned on another
    device or shape set; the :data:`WARM_START_GOALS` newest, this target first), each goal's
    best, second best ... up to :data:`WARM_START_PER_GOAL`, taken in turns across goals. A
    device's optimum is often a few steps from another's, but not always its own best
    (``docs/runs.md``). Values are the space's own (a stored ``128.0`` is proposed as ``128``).

    Returns:
        ``{"configs": [params, ...], "from": [{"insight"|"candidate": pk, "target",
        "shape_set", ...}, ...]}``, or ``{}`` when nothing fits.
    """
    space = goal.design_space()
    configs: list[dict[str, Any]] = []
    sources: list[dict[str, Any]] = []
    keys: set[str] = set()

    def take(params: Any, source: dict[str, Any], limit: int = WARM_START_CONFIGS) -> None:
        point = _point(space, params)
        if point is None or len(configs) >= limit:
            return
        key = space.point_key(point)
        if key not in keys:
            keys.add(key)
            configs.append(point)
            sources.append(source)

    found = Insight.objects.filter(kind=Insight.Kind.BEST_CONFIG, workload=goal.workload)
    ranked = sorted(found, key=lambda i: (i.target != goal.target, i.shape_set != goal.shape_set, i.data.get("latency_ms", math.inf)))
    for i in ranked:
        take(i.data.get("params"), {"insight": i.pk, "target": i.target, "shape_set": i.shape_set,
                                    "shape": i.data.get("shape")}, WARM_START_CONFIGS // 2)
    for turn in zip_longest(*_best_of_other_goals(goal, space)):
        for row in turn:
            if row is not None:
                take(*row)
    return {"configs": configs, "from": sources} if configs else {}


def _point(space, params: Any) -> dict[str, Any] | None:
    """``params`` as a point of ``space`` with the space's own values (``128.0`` -> ``128``), or
    None when it is not one."""
    if not isinstance(params, dict) or not space.contains(params):
        return None
    return {p.name: p.values[list(p.values).index(params[p.name])] for p in space.parameters}


def related_evidence(goal: Goal, before: datetime | None = None) -> list[dict[str, Any]]:
    """What a transferring model learns from (:class:`swarm.agents.RelatedEvidence`): the
    evaluations of the first :data:`TRANSFER_GOALS` other goals of ``goal``'s workload with the
    same parameter names (the order of :func:`_scored_other_goals`), each as at most
    :data:`TRANSFER_ROWS` distinct points spread evenly over its ranking (its best included);
    with ``before``, only evaluations finished before then (a run reads what was known when it
    started, the same in every process).

    Returns:
        ``[{"source": "goal 7 (a100, default)", "points": [params, ...], "scores": [float, ...]}]``,
        scores as ``goal``'s primary objective is minimised (negated when maximised).
    """
    space = goal.design_space()
    out = []
    for other, scored in _scored_other_goals(goal, space, TRANSFER_GOALS, before):
        unique, keys = [], set()
        for value, _pk, point in scored:
            key = space.point_key(point)
            if key not in keys:
                keys.add(key)
                unique.append((value, point))
        if len(unique) > TRANSFER_ROWS:  # every k-th of the ranking: the best, the worst and between
            unique = [unique[int(i)] for i in np.linspace(0, len(unique) - 1, TRANSFER_ROWS).round()]
        if unique:
            out.append({"source": f"goal {other.pk} ({other.target}, {other.shape_set})",
                        "points": [p for _, p in unique], "scores": [v for v, _ in unique]})
    return out


def _scored_other_goals(goal: Goal, space, limit: int = WARM_START_GOALS, before: datetime | None = None,
                        ) -> list[tuple[Goal, list[tuple[float, int, dict[str, Any]]]]]:
    """The other goals of ``goal``'s workload with the same parameter names (the
    :data:`WARM_START_GOALS` newest; this target first, then this shape set), each with its
    feasible ``ok`` points of ``space`` among its :data:`MAX_ROWS` newest evaluations as
    ``(score, candidate pk, params)``, best first by ``goal``'s primary objective (the score is
    that objective, negated when it is maximised). Rows whose params, metrics or constraint
    values are malformed are skipped; goals without a point are left out, and the reading stops
    at ``limit`` goals with points. With ``before``, only evaluations finished before then."""
    metric, direction = goal.primary["metric"], goal.primary["direction"]
    sign = 1.0 if direction == "minimize" else -1.0
    names = set(space.names)
    others = [g for g in Goal.objects.filter(workload=goal.workload).exclude(pk=goal.pk).order_by("-id")
              .only("id", "target", "shape_set", "space") if _parameter_names(g.space) == names][:WARM_START_GOALS]
    others.sort(key=lambda g: (g.target != goal.target, g.shape_set != goal.shape_set))  # stable: newest first
    out = []
    for other in others:
        found = Candidate.objects.filter(goal=other, status="ok")
        if before is not None:
            found = found.filter(evaluated_at__lt=before)
        rows = found.order_by("-id").values_list("pk", "params", "evidence__metrics")[:MAX_ROWS]
        scored = []
        for pk, params, metrics in rows:
            value = metrics.get(metric) if isinstance(metrics, dict) else None
            if _finite(value) and _feasible(goal, metrics) and (point := _point(space, params)) is not None:
                scored.append((sign * value, pk, point))
        scored.sort(key=lambda r: (r[0], r[1]))
        if scored:
            out.append((other, scored))
            if len(out) >= limit:
                break
    return out


def _best_of_other_goals(goal: Goal, space) -> list[list[tuple[dict[str, Any], dict[str, Any]]]]:
    """Per other goal of :func:`_scored_other_goals`, its best :data:`WARM_START_PER_GOAL`
    distinct points, best first, as ``(params, source)``."""
    out = []
    for other, scored in _scored_other_goals(goal, space):
        best, seen = [], set()
        for _value, pk, params in scored:
            key = space.point_key(params)
            if key not in seen:
                seen.add(key)
                best.append((params, {"candidate": pk, "goal": other.pk, "target": other.target,
                                      "shape_set": other.shape_set}))
            if len(best) >= WARM_START_PER_GOAL:
                break
        if best:
            out.append(best)
    return out


def _parameter_names(space: Any) -> set[str] | None:
    """The parameter names of a stored design space (``DesignSpace.to_dict``), None when malformed."""
    try:
        return {p["name"] for p in space["parameters"]}
    except (TypeError, KeyError):
        return None


def _feasible(goal: Goal, metrics: dict[str, Any]) -> bool:
    """``goal``'s constraints hold for stored ``metrics``; False where a value is not a number."""
    try:
        return goal.is_feasible(metrics)
    except (TypeError, ValueError):
        return False


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
