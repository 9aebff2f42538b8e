"""Persisting insights per (workload, target) and reading them back for warm starts.

The computations live in :mod:`swarm.learning.insights`; this module chooses the evidence, stores the
results and serves them to agents and pages.
"""

from __future__ import annotations

import math
from typing import Any

from swarm.learning import insights
from swarm.models import PENDING_STATUSES, Candidate, Goal, Insight, Run

MAX_ROWS = 5000  # newest evaluations used per update: keeps an update in milliseconds
WARM_START_CONFIGS = 8
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
    """Best configurations learned on this workload (this target first, then any other target
    or shape set) that fit the goal's space: the first proposals of a new run."""
    space = goal.design_space()
    found = Insight.objects.filter(kind=Insight.Kind.BEST_CONFIG, workload=goal.workload)
    ranked = sorted(found, key=lambda i: (i.target != goal.target, i.shape_set != goal.shape_set, i.data.get("latency_ms", math.inf)))
    configs, sources, keys = [], [], set()
    for i in ranked:
        params = i.data.get("params") or {}
        if not space.contains(params):
            continue
        key = space.point_key(params)
        if key in keys:
            continue
        keys.add(key)
        configs.append(params)
        sources.append({"insight": i.pk, "target": i.target, "shape_set": i.shape_set, "shape": i.data.get("shape")})
        if len(configs) >= WARM_START_CONFIGS:
            break
    return {"configs": configs, "from": sources} if configs else {}


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)
