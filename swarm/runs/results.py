"""A run's results read from stored columns: the feasible Pareto frontier, the best candidate,
and, when no candidate meets the constraints, the candidates closest to meeting them.

The database does the per-candidate work (metric values come from the evidence's stored metric
columns, or its ``metrics`` JSON for other metrics; constraints filter rows; the frontier of one
or two objectives is a window query), so Python builds objects only for the candidates it
returns: a summary of a 50,000-candidate run costs a few queries, not 50,000 model instances.

Total violation (how far an ``ok`` candidate is from feasible) sums, over the run's
constraints, the excess relative to the bound: ``max(0, m - v) / s`` for ``m <= v`` and
``max(0, v - m) / s`` for ``m >= v``, with ``s = |v|`` (``1`` when ``v == 0``). Ranking
infeasible solutions by total constraint violation follows Deb, "An efficient constraint
handling method for genetic algorithms", CMAME 186 (2000); dividing by the bound makes
constraints in different units (errors of 1e-4, latencies in ms) comparable.
"""

from __future__ import annotations

import math
from typing import Any

from django.db import connection
from django.db.models import Count, F, FloatField, Min, QuerySet, Value
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast, Greatest

from swarm.models import STORED_METRICS, Candidate, CandidateStatus, Run
from swarm.pareto import pareto_front

CLOSEST_SHOWN = 10  # infeasible candidates listed when none is feasible


def constraint_text(c: dict) -> str:
    """``{"metric", "op", "value"}`` as the engineer writes it, e.g. ``max_rel_error <= 0.0001``."""
    return f"{c['metric']} {c['op']} {c['value']:g}"


def violations(constraints: list[dict], metrics: dict[str, float]) -> list[dict[str, Any]]:
    """Relative excess of ``metrics`` over each constraint (see the module docstring).

    Returns:
        One ``{"constraint": text, "value": metric value or None, "excess": float}`` per
        constraint; ``excess`` is 0.0 when met and ``inf`` when the metric is missing or
        not finite.
    """
    out = []
    for c in constraints:
        v = metrics.get(c["metric"])
        if v is None or isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            excess = math.inf
            v = None
        else:
            scale = abs(c["value"]) or 1.0
            gap = v - c["value"] if c["op"] == "<=" else c["value"] - v
            excess = max(0.0, gap) / scale
        out.append({"constraint": constraint_text(c), "value": v, "excess": excess})
    return out


def total_violation(constraints: list[dict], metrics: dict[str, float]) -> float:
    """Sum of :func:`violations` excesses: 0.0 for a feasible candidate, ``inf`` if a metric is missing."""
    return sum(v["excess"] for v in violations(constraints, metrics))


def metric_expr(name: str):
    """The metric ``name`` of a candidate's evidence as a float expression (NULL when missing):
    its column for :data:`swarm.models.STORED_METRICS`, else read from the ``metrics`` JSON."""
    if name in STORED_METRICS:
        return F(f"evidence__{name}")
    return Cast(KeyTextTransform(name, "evidence__metrics"), FloatField())


def _signed(run: Run) -> dict[str, Any]:
    """Annotations ``o0..`` : each objective oriented to minimisation."""
    return {
        f"o{i}": metric_expr(o["metric"]) * Value(1.0 if o["direction"] == "minimize" else -1.0)
        for i, o in enumerate(run.goal.objectives)
    }


def ok_with_objectives(run: Run) -> QuerySet:
    """The run's ``ok`` candidates whose evidence has every objective, annotated ``o0..``."""
    ann = _signed(run)
    return (run.candidates.filter(status=CandidateStatus.OK).annotate(**ann)
            .filter(**{f"{k}__isnull": False for k in ann}).order_by())


def meeting_constraints(run: Run, qs: QuerySet) -> QuerySet:
    """The candidates of ``qs`` meeting every constraint of ``run`` (a missing metric fails),
    annotated ``c0..`` with the constraint metrics."""
    for i, c in enumerate(run.constraints or []):
        qs = qs.annotate(**{f"c{i}": metric_expr(c["metric"])})
        qs = qs.filter(**{f"c{i}__lte" if c["op"] == "<=" else f"c{i}__gte": float(c["value"])})
    return qs


def feasible(run: Run) -> QuerySet:
    """:func:`ok_with_objectives` meeting every constraint of the run (a missing metric fails)."""
    return meeting_constraints(run, ok_with_objectives(run))


def frontier_ids(run: Run) -> tuple[list[int], int]:
    """Ids of the Pareto frontier of the feasible candidates over the goal's objectives, and
    the number of feasible candidates.

    The ids come in ascending order of the first objective (then the second, then id); exact
    duplicates of a frontier point are all kept, as :func:`swarm.pareto.pareto_front`. One
    objective: the rows at the minimum. Two: a window query over the feasible rows sorted by
    (x, y), where a row is on the frontier when its y is below that of every distinct point
    before it (the sort-and-sweep of :mod:`swarm.pareto`, run by the database in one pass).
    More: the objective values only (no model instances) go through
    :func:`swarm.pareto.pareto_front`.
    """
    qs = feasible(run)
    d = len(run.goal.objectives)
    if d == 1:
        agg = qs.aggregate(m=Min("o0"), n=Count("id"))
        if agg["m"] is None:
            return [], 0
        return list(qs.filter(o0=agg["m"]).order_by("id").values_list("id", flat=True)), agg["n"]
    if d == 2:
        sql, params = qs.values_list("id", "o0", "o1").query.sql_with_params()
        with connection.cursor() as cur:
            cur.execute(
                # GROUPS: the frame's peers are rows of equal (x, y), so m is the lowest y of the
                # distinct points before this one and duplicates of a frontier point stay on it.
                "SELECT id, n FROM (SELECT id, o0, o1, COUNT(*) OVER () AS n, MIN(o1) OVER (ORDER BY o0, o1 "
                f"GROUPS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS m FROM ({sql}) f) w "
                "WHERE m IS NULL OR o1 < m ORDER BY o0, o1, id",
                params,
            )
            rows = cur.fetchall()
        return [r[0] for r in rows], rows[0][1] if rows else 0
    rows = list(qs.order_by("id").values_list("id", *[f"o{i}" for i in range(d)]))
    return [rows[i][0] for i in pareto_front([r[1:] for r in rows])], len(rows)


def best(run: Run) -> Candidate | None:
    """The run's best feasible candidate (the frontier's first, in the primary objective's
    order) with its evidence, or None: :func:`results`'s ``best`` without building the rest.

    The frontier's first is the feasible row least in (o0, o1, ..., id), which is on the
    frontier (nothing is below it in o0, and nothing at its o0 below it in the others), so one
    ORDER BY ... LIMIT 1 finds it without the frontier's window query (a sort of every
    feasible row: 0.4 s of the run page's 0.5 s with 50,000 candidates on SQLite).
    """
    order = [f"o{i}" for i in range(len(run.goal.objectives))] + ["id"]
    return feasible(run).select_related("evidence").order_by(*order).first()


def _ordered(ids: list[int]) -> list[Candidate]:
    by_id = Candidate.objects.select_related("evidence").in_bulk(ids)
    return [by_id[i] for i in ids if i in by_id]


def closest(run: Run, k: int = CLOSEST_SHOWN) -> list[dict[str, Any]]:
    """The ``k`` ``ok`` candidates (with every objective and constraint metric) of least total
    violation, then best primary objective: each as ``Candidate.to_dict()`` plus
    ``"violation"`` (the total) and ``"violations"`` (per constraint, :func:`violations`)."""
    if not run.constraints:
        return []
    qs = ok_with_objectives(run)
    terms = []
    for i, c in enumerate(run.constraints):
        qs = qs.annotate(**{f"c{i}": metric_expr(c["metric"])}).filter(**{f"c{i}__isnull": False})
        v, scale = float(c["value"]), abs(float(c["value"])) or 1.0
        gap = F(f"c{i}") - Value(v) if c["op"] == "<=" else Value(v) - F(f"c{i}")
        terms.append(Greatest(Value(0.0), gap / Value(scale), output_field=FloatField()))
    total = terms[0]
    for t in terms[1:]:
        total = total + t
    ids = list(qs.annotate(violation=total).order_by("violation", "o0", "id").values_list("id", flat=True)[:k])
    out = []
    for c in _ordered(ids):
        detail = violations(run.constraints, c.evidence.metrics)
        out.append({**c.to_dict(), "violation": sum(v["excess"] for v in detail), "violations": detail})
    return out


def results(run: Run, ok: int | None = None) -> dict[str, Any]:
    """The result part of a run summary; ``ok``: the run's count of ``ok`` candidates if known.

    Returns:
        ``{"best": candidate dict or None, "frontier": [candidate dicts], "feasible": count of
        feasible ok candidates, "ok": count of ok candidates, "note": why there is no best (or
        ""), "closest": the least-violating candidates when none is feasible (else [])}``.
    """
    if ok is None:
        ok = run.candidates.filter(status=CandidateStatus.OK).count()
    ids, n_feasible = frontier_ids(run)
    front = _ordered(ids)
    best = front[0] if front else None  # the frontier comes in ascending order of the primary objective
    note, near = "", []
    if not front and ok:
        near = closest(run)
        wanted = "; ".join(constraint_text(c) for c in run.constraints)
        if run.constraints:
            note = f"no feasible candidate: none of the {ok} ok candidates meets the constraints ({wanted})"
            note += "; 'closest' ranks them by total violation" if near else ""
        else:
            note = f"no feasible candidate: none of the {ok} ok candidates has every objective metric"
    return {"best": best.to_dict() if best else None, "frontier": [c.to_dict() for c in front],
            "feasible": n_feasible, "ok": ok, "note": note, "closest": near}

