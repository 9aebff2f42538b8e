"""Persisting insights per (workload, target) and reading them back for warm starts.

The computations live in :mod:`swarm.learning.insights`; this module chooses the evidence, stores the
results and serves them to agents and pages.
"""

from __future__ import annotations

import math
from itertools import zip_longest
from typing import Any

from swarm.learning import insights
from swarm.models import PENDING_STATUSES, Candidate, Goal, Insight, Run

MAX_ROWS = 5000  # newest evaluations used per update: keeps an update in milliseconds
WARM_START_CONFIGS = 8
WARM_START_PER_GOAL = 3  # best configurations taken from each other goal of the workload
IMPORTANCE_ROWS = 200
LEARN_GROWTH = 1.5  # learn again once a run has half as many generations again
_learned_at: dict[str, int] = {}  # run identity -> generation last learned from (per process)


def due(run: Run, generation: int) -> bool:
    """Whether to learn after ``generation``: on a geometric schedule (1, 2, 3, 4, 6, 9, 13,
    ...), so a run of G generations learns O(log G) times. A restarted process learns at
    its first boundary."""
    key = run.identity
    last = _learned_at.get(key)
    if last is not None and generation < max(last + 1, LEARN_GROWTH * last):
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
    shape set); then, from the evaluated candidates of every other goal of the workload (the
    same kernel tuned on another device or shape set), each goal's best, second best ... up to
    :data:`WARM_START_PER_GOAL`, taken in turns across goals. A device's optimum is often a few
    steps from another's, but not always its own best (``docs/runs.md``).

    Returns:
        ``{"configs": [params, ...], "from": [{"insight"|"candidate": pk, "target",
        "shape_set", ...}, ...]}``, or ``{}`` when nothing fits.
    """
    space = goal.design_space()
    configs: list[dict[str, Any]] = []
    sources: list[dict[str, Any]] = []
    keys: set[str] = set()

    def take(params: dict[str, Any], source: dict[str, Any]) -> None:
        if len(configs) >= WARM_START_CONFIGS or not space.contains(params):
            return
        key = space.point_key(params)
        if key not in keys:
            keys.add(key)
            configs.append(params)
            sources.append(source)

    found = Insight.objects.filter(kind=Insight.Kind.BEST_CONFIG, workload=goal.workload)
    ranked = sorted(found, key=lambda i: (i.target != goal.target, i.shape_set != goal.shape_set, i.data.get("latency_ms", math.inf)))
    for i in ranked:
        take(i.data.get("params") or {}, {"insight": i.pk, "target": i.target, "shape_set": i.shape_set,
                                          "shape": i.data.get("shape")})
    for turn in zip_longest(*_best_of_other_goals(goal, space)):
        for row in turn:
            if row is not None:
                take(row[0], row[1])
    return {"configs": configs, "from": sources} if configs else {}


def _best_of_other_goals(goal: Goal, space) -> list[list[tuple[dict[str, Any], dict[str, Any]]]]:
    """Per other goal of ``goal``'s workload (its own target first), its best
    :data:`WARM_START_PER_GOAL` feasible ``ok`` points of ``space`` by ``goal``'s primary
    objective, best first, as ``(params, source)``; goals in order of their best's objective."""
    metric, direction = goal.primary["metric"], goal.primary["direction"]
    sign = 1.0 if direction == "minimize" else -1.0
    rows = (Candidate.objects.filter(goal__workload=goal.workload, status="ok").exclude(goal=goal)
            .order_by("-id").values_list("pk", "goal_id", "goal__target", "goal__shape_set", "params",
                                         "evidence__metrics")[:MAX_ROWS])
    names = set(space.names)
    per_goal: dict[int, list[tuple[float, int, dict, str, str]]] = {}
    for pk, goal_id, target, shape_set, params, metrics in rows:
        value = (metrics or {}).get(metric)
        if set(params) != names or not _finite(value) or not goal.is_feasible(metrics) or not space.contains(params):
            continue
        per_goal.setdefault(goal_id, []).append((sign * value, pk, params, target, shape_set))
    out = []
    for goal_id, found in per_goal.items():
        found.sort(key=lambda r: (r[0], r[1]))
        best, seen = [], set()
        for _value, pk, params, target, shape_set in found:
            key = space.point_key(params)
            if key in seen:
                continue
            seen.add(key)
            best.append((params, {"candidate": pk, "goal": goal_id, "target": target, "shape_set": shape_set}))
            if len(best) >= WARM_START_PER_GOAL:
                break
        out.append(((found[0][3] != goal.target, found[0][0]), best))
    return [best for _, best in sorted(out, key=lambda o: o[0])]


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)
