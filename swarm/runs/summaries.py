"""A run's summary: its progress, best candidate and Pareto frontier with their ties within the
noise floor, agents and the baseline speedup (the ``factory run --json`` object and the API's
``/api/runs/<id>/summary/``)."""

from __future__ import annotations

from typing import Any

from kernels.space import labelled_params
from swarm.models import Candidate, CandidateStatus, Run
from swarm.pareto import pareto_front
from swarm.runs import baselines
from swarm.runs.noise_floors import tied_with_best
from swarm.runs.progress import run_state
from swarm.runs.results import results


def frontier(run: Run, candidates: list[Candidate]) -> list[Candidate]:
    """Pareto frontier over the goal's objectives among ``ok`` candidates meeting the run's constraints."""
    objectives = run.goal.objectives
    feasible = [
        c
        for c in candidates
        if c.status == CandidateStatus.OK
        and run.is_feasible(c.evidence.metrics)
        and all(o["metric"] in c.evidence.metrics for o in objectives)
    ]
    points = [
        [c.evidence.metrics[o["metric"]] * (1 if o["direction"] == "minimize" else -1) for o in objectives]
        for c in feasible
    ]
    return [feasible[i] for i in pareto_front(points)]


def best(run: Run, candidates: list[Candidate]) -> Candidate | None:
    """Feasible ``ok`` candidate with the best primary objective, or None."""
    front = frontier(run, candidates)
    if not front:
        return None
    primary = run.goal.primary
    sign = 1 if primary["direction"] == "minimize" else -1
    return min(front, key=lambda c: sign * c.evidence.metrics[primary["metric"]])


def _annotated(res: dict[str, Any], tied: set[int], space: dict[str, Any] | None) -> dict[str, Any]:
    """``res`` of :func:`swarm.runs.results.results` with ``tied_with_best`` and
    ``labelled_params`` (:func:`kernels.space.labelled_params` in ``space``, the labels of the
    goal's and the run's spaces) on its best and frontier."""
    def shown(c: dict[str, Any]) -> dict[str, Any]:
        return {**c, "tied_with_best": c["id"] in tied, "labelled_params": labelled_params(space, c.get("params") or {})}

    if res.get("best"):
        res["best"] = shown(res["best"])
    res["frontier"] = [shown(c) for c in res.get("frontier") or []]
    return res


def run_summary(run: Run) -> dict[str, Any]:
    """Result of a run: progress, best candidate, Pareto frontier (each with ``tied_with_best``:
    its latency within the noise floor of the best's; and ``labelled_params``: its ``params``
    with a labelled parameter's value replaced by its label, e.g. a recorded name),
    ``noise_floor``, ``tied_with_best``
    (candidate ids), the goal's ``objectives``, agents, ``baseline`` (the ``factory run`` JSON).

    The frontier and best come from stored columns (:func:`swarm.runs.results.results`); when no
    candidate meets the constraints, ``note`` says so and ``closest`` ranks the ``ok``
    candidates by total violation. ``started_at`` and ``finished_at`` are ISO 8601
    (``finished_at`` None while it runs); ``wall_s`` is the run's own time in seconds, from its
    creation to its end (None while it runs). ``baseline`` is the stored baseline of the goal's
    key (:func:`swarm.runs.baselines.describe`) with, once measured, the best's ``speedup`` over it
    (:func:`swarm.runs.baselines.speedup`: ``speedup``, ``baseline_ms``, ``measured_at``, ``host``);
    None when none was asked for.
    """
    run.refresh_from_db()
    ties = tied_with_best(run)
    tied = set(ties["tied_with_best"])
    summary = run_state(run)
    summary.update(
        goal=run.goal_id,
        workload=run.goal.workload,
        target=run.goal.target,
        shape_set=run.goal.shape_set,
        objectives=run.goal.objectives,
        seed=run.seed,
        **_annotated(results(run, ok=summary["status_counts"].get(CandidateStatus.OK, 0)), tied, run.label_space()),
        noise_floor=ties["noise_floor"],
        tied_with_best=ties["tied_with_best"],
        agents=[a.to_dict() for a in run.agents.all()],
        started_at=run.started_at.isoformat(),
        finished_at=run.finished_at.isoformat() if run.finished_at else None,
        wall_s=(run.finished_at - run.started_at).total_seconds() if run.finished_at else None,
    )
    summary["baseline"] = _baseline(run, summary["best"])
    return summary


def _baseline(run: Run, best: dict | None) -> dict | None:
    key = baselines.key_of(run.goal)
    rows = baselines.lookup([run.goal], schedule=False)
    described = baselines.describe(rows.get(key))
    if described is None:
        return None
    figure = baselines.speedup(run, (best or {}).get("metrics", {}).get("latency_ms"), rows=rows)
    if figure is not None:
        described.update(figure, measured_at=figure["measured_at"].isoformat() if figure["measured_at"] else None)
    return described
