"""What the swarm learns from evidence and keeps per (workload, target).

After each generation:
- parameter importance: Optuna's PED-ANOVA evaluator (Watanabe et al., IJCAI 2023) over the
  feasible ``ok`` evaluations of the primary objective;
- failure rules: a shallow decision tree (scikit-learn CART) over the parameters and their
  pairwise products, predicting failure; each leaf that is almost only failures becomes a
  readable rule (``block_size_x*block_size_y > 1024 -> runtime_error``) and the restriction
  that would exclude it;
- best configuration per shape: the fastest feasible parameters for every timed shape.
"""

from __future__ import annotations

import itertools
import logging
import math
import re
from collections import Counter
from typing import Any

import numpy as np

from kernels import DesignSpace, Outcome, SpaceError

log = logging.getLogger(__name__)

MIN_OK_FOR_IMPORTANCE = 8
MIN_FAILED_FOR_RULES = 4
RULE_PRECISION = 0.9
_PER_SHAPE = re.compile(r"^latency_ms\[(.+)\]$")
UNJUDGED = frozenset(str(o) for o in Outcome if not o.judged)  # statuses that say nothing about a candidate


def import_dependencies() -> None:
    """Import the libraries the computations below load lazily (done once per worker)."""
    import optuna.importance  # noqa: F401
    import sklearn.tree  # noqa: F401


def parameter_importance(space: DesignSpace, rows: list[tuple[dict, float]]) -> dict[str, float] | None:
    """Importance of each parameter for the (minimised) objective, summing to 1.

    Args:
        rows: ``(params, objective value)`` of feasible ok evaluations (minimised).

    Returns:
        ``{param: importance}`` sorted descending, or None with too few rows.
    """
    if len(rows) < MIN_OK_FOR_IMPORTANCE:
        return None
    import optuna
    from optuna.distributions import CategoricalDistribution
    from optuna.trial import create_trial

    tunable = [p for p in space.parameters if len(p.values) > 1]
    if not tunable:
        return None
    dists = {p.name: CategoricalDistribution(list(p.values)) for p in tunable}
    study = optuna.create_study(direction="minimize")
    study.add_trials([
        create_trial(params={k: params[k] for k in dists}, distributions=dists, value=value)
        for params, value in rows
        if all(params.get(k) in dists[k].choices for k in dists)
    ])
    try:
        imp = optuna.importance.get_param_importances(study)
    except Exception:  # noqa: BLE001 - degenerate data (e.g. one distinct value) has no importance
        log.debug("importance failed", exc_info=True)
        return None
    return {k: float(v) for k, v in imp.items()}


def failure_rules(space: DesignSpace, rows: list[tuple[dict, str]], max_depth: int = 3) -> list[dict[str, Any]]:
    """Readable rules that predict failure, each with the restriction that excludes it.

    Args:
        rows: ``(params, status)`` of every evaluation in ``space``; those the candidate
            could not be judged on (``invalid_input``: the workload's inputs failed) are
            left out, so no rule blames parameters for them.

    Returns:
        A list of ``{"rule", "status", "support", "precision", "restriction"}`` where ``rule``
        reads like ``"A*B > 1024 -> runtime_error"`` and ``restriction`` is a valid
        restriction expression (``"not (A*B > 1024)"``) for the design space.
    """
    rows = [r for r in rows if r[1] not in UNJUDGED]
    failed = [r for r in rows if r[1] != "ok"]
    if len(failed) < MIN_FAILED_FOR_RULES or len(failed) == len(rows):
        return []
    from sklearn.tree import DecisionTreeClassifier

    names = [p.name for p in space.parameters if all(isinstance(v, (int, float)) for v in p.values)]
    features = list(names) + [f"{a}*{b}" for a, b in itertools.combinations(names, 2)]
    X = np.array([[_feature(params, f) for f in features] for params, _ in rows], dtype=float)
    y = np.array([status != "ok" for _, status in rows])
    tree = DecisionTreeClassifier(max_depth=max_depth, min_samples_leaf=3, random_state=0).fit(X, y)
    t = tree.tree_
    leaves = tree.apply(X)
    rules = []

    def walk(node: int, conds: list[str]) -> None:
        if t.children_left[node] == -1:
            members = np.flatnonzero(leaves == node)
            n_fail = int(y[members].sum())
            if not members.size or n_fail < 2 or n_fail / members.size < RULE_PRECISION or not conds:
                return
            status = Counter(rows[i][1] for i in members if rows[i][1] != "ok").most_common(1)[0][0]
            cond = " and ".join(conds)
            restriction = f"not ({cond})"
            try:
                DesignSpace.from_dict({**space.to_dict(), "restrictions": [*space.restrictions, restriction]})
            except SpaceError:
                return
            rules.append({
                "rule": f"{cond} -> {status}",
                "status": status,
                "support": int(members.size),
                "precision": round(n_fail / members.size, 3),
                "restriction": restriction,
            })
            return
        f, thr = features[t.feature[node]], t.threshold[node]
        walk(t.children_left[node], conds + [f"{f} <= {_num(thr)}"])
        walk(t.children_right[node], conds + [f"{f} > {_num(thr)}"])

    walk(0, [])
    return sorted(rules, key=lambda r: -r["support"])


def best_per_shape(rows: list[tuple[dict, dict[str, float]]]) -> dict[str, dict[str, Any]]:
    """Fastest feasible parameters per timed shape, from ``latency_ms[<shape>]`` metrics.

    Args:
        rows: ``(params, metrics)`` of feasible ok evaluations.

    Returns:
        shape label -> ``{"params", "latency_ms"}``; a single ``"all"`` entry from
        ``latency_ms`` when no per-shape metric exists (replay data).
    """
    best: dict[str, dict[str, Any]] = {}
    for params, metrics in rows:
        per_shape = {m.group(1): v for k, v in metrics.items() if (m := _PER_SHAPE.match(k))}
        if not per_shape and "latency_ms" in metrics:
            per_shape = {"all": metrics["latency_ms"]}
        for shape, v in per_shape.items():
            if isinstance(v, (int, float)) and math.isfinite(v) and (shape not in best or v < best[shape]["latency_ms"]):
                best[shape] = {"params": params, "latency_ms": float(v)}
    return best


def _feature(params: dict, name: str) -> float:
    if "*" in name:
        a, b = name.split("*")
        return float(params.get(a, 0)) * float(params.get(b, 0))
    return float(params.get(name, 0))


def _num(x: float) -> str:
    # CART thresholds are midpoints between observed values: keep them readable.
    return str(int(x)) if float(x).is_integer() else f"{x:.6g}"
