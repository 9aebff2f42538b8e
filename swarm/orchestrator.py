"""The generation loop: propose, deduplicate, evaluate, store, publish, advance.

The same functions serve the Celery tasks (``swarm.tasks``) and the headless command
(``manage.py factory run``), so a run behaves the same whichever way it is driven.

Work is claimed with a conditional UPDATE (``queued -> running``) so a redelivered task never
evaluates a candidate twice; a ``running`` claim older than :func:`stale_after` is treated as
left behind by a dead worker and may be claimed again.
"""

from __future__ import annotations

import functools
import logging
import secrets
from datetime import timedelta
from typing import Any, Callable

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Q
from django.utils import timezone

import kernels
from kernels.backends import get_backend
from swarm import events
from swarm.agents import Observation, RunView, make_agent
from swarm.models import PENDING_STATUSES, Candidate, CandidateStatus, Evidence, Goal, Run
from swarm.pareto import pareto_front

log = logging.getLogger(__name__)

EvaluateFn = Callable[..., Any]


@functools.cache
def backend_fingerprint(backend: str) -> dict[str, Any]:
    """Environment fingerprint of a backend on this host (compiler, flags, CPU)."""
    return get_backend(backend).fingerprint()


def stale_after() -> timedelta:
    """Age after which a ``running`` claim is presumed dead: twice the evaluation timeout + 60 s."""
    return timedelta(seconds=2 * settings.EVAL_TIMEOUT_S + 60)


# --- starting and advancing runs --------------------------------------------------------------


def start_run(goal: Goal, *, budget: int, seed: int | None = None, batch_size: int = 4, user=None) -> tuple[Run, list[Candidate]]:
    """Create a run and propose its first generation.

    Args:
        goal: the goal to search.
        budget: maximum number of evaluations (>= 1).
        seed: seed of the agents' RNGs; random when None (recorded on the run).
        batch_size: candidates per generation (>= 1).

    Returns:
        The run and the candidates of generation 1, to hand to :func:`swarm.dispatch.dispatch`
        (or evaluate in-process).

    Raises:
        ValueError: budget or batch size below 1.
    """
    if budget < 1:
        raise ValueError(f"budget must be at least 1 evaluation, got {budget}")
    if batch_size < 1:
        raise ValueError(f"batch size must be at least 1, got {batch_size}")
    with transaction.atomic():
        run = Run.objects.create(
            goal=goal,
            budget=budget,
            batch_size=batch_size,
            seed=secrets.randbits(31) if seed is None else seed,
            created_by=user,
        )
        first = propose_generation(run)
        if not first:
            _finish(run, Run.State.FINISHED)
    events.publish(run.pk, "run", run_state(run))
    return run, first


def run_view(run: Run) -> RunView:
    """Frozen snapshot of what agents may know about ``run``'s goal."""
    goal = run.goal
    rows = Candidate.objects.filter(goal=goal).select_related("evidence").order_by("id")
    space = goal.design_space()
    seen, history = set(), []
    for c in rows:
        seen.add(space.point_key(c.params))
        if not c.is_pending:
            ev = getattr(c, "evidence", None)
            history.append(Observation(c.params, c.status, ev.metrics if ev else {}))
    return RunView(
        workload=goal.workload,
        target=goal.target,
        space=space,
        objectives=tuple(goal.objectives),
        generation=run.generation + 1,
        seen=frozenset(seen),
        history=tuple(history),
    )


def propose_generation(run: Run) -> list[Candidate]:
    """Ask the agents for the next generation and store the new candidates as ``queued``.

    Proposals whose content hash the goal already has are dropped: an identical kernel is
    never benchmarked twice. Returns the new candidates (empty when the budget is spent or the
    space is exhausted).
    """
    remaining = run.budget - run.candidates.count()
    n = min(run.batch_size, remaining)
    if n <= 0:
        return []
    goal = run.goal
    view = run_view(run)
    agent = make_agent("random", seed=run.seed * 1_000_003 + view.generation)
    fingerprint = backend_fingerprint(goal.backend)
    created = []
    with transaction.atomic():
        run.generation = view.generation
        run.save(update_fields=["generation"])
        for proposal in agent.propose(view, n):
            source = proposal.source or goal.source
            digest = kernels.candidate_hash(source, proposal.params, fingerprint)
            candidate, new = Candidate.objects.get_or_create(
                goal=goal,
                content_hash=digest,
                defaults=dict(
                    run=run,
                    generation=view.generation,
                    agent=agent.name,
                    params=proposal.params,
                    source=source,
                ),
            )
            if new:
                created.append(candidate)
    for c in created:
        events.publish(run.pk, "candidate", c.to_dict())
    return created


def advance(run_id: int) -> list[Candidate]:
    """After an evaluation: start the next generation once the current one is done.

    Returns the candidates to dispatch (empty while the generation is still running, or when
    the run finished because its budget is spent or its space exhausted).
    """
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        if run.state != Run.State.RUNNING:
            return []
        if run.candidates.filter(status__in=PENDING_STATUSES).exists():
            return []
        new = propose_generation(run)
        if not new:
            _finish(run, Run.State.FINISHED)
    if not new:
        events.publish(run.pk, "run", run_state(run))
    return new


def stop_run(run: Run, user=None) -> None:
    """Stop a run: queued candidates are cancelled; a running evaluation finishes and is kept."""
    from swarm.models import AuditEvent

    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run.pk)
        if run.state != Run.State.RUNNING:
            return
        run.candidates.filter(status=CandidateStatus.QUEUED).delete()
        _finish(run, Run.State.STOPPED)
        AuditEvent.objects.create(actor=user, verb="run.stop", subject=f"run {run.pk}")
    events.publish(run.pk, "run", run_state(run))


def _finish(run: Run, state: str) -> None:
    run.state = state
    run.finished_at = timezone.now()
    run.save(update_fields=["state", "finished_at"])


# --- evaluating one candidate -----------------------------------------------------------------


def claim(candidate_id: int) -> bool:
    """Atomically take a candidate for evaluation; False if another worker has it or it is done."""
    now = timezone.now()
    fresh = Q(status=CandidateStatus.QUEUED)
    abandoned = Q(status=CandidateStatus.RUNNING, claimed_at__lt=now - stale_after())
    updated = Candidate.objects.filter(fresh | abandoned, pk=candidate_id).update(
        status=CandidateStatus.RUNNING, claimed_at=now
    )
    return updated == 1


def evaluate_candidate(candidate_id: int, *, evaluate: EvaluateFn | None = None) -> Candidate | None:
    """Claim, evaluate in the sandbox, store evidence in one transaction and publish it.

    Args:
        candidate_id: primary key of a ``queued`` candidate.
        evaluate: the evaluator (default ``kernels.evaluate``), injectable for tests.

    Returns:
        The evaluated candidate, or None if it was not claimable (already evaluated, being
        evaluated by another worker, or deleted by a stop).
    """
    if not claim(candidate_id):
        return None
    candidate = Candidate.objects.select_related("goal", "run").get(pk=candidate_id)
    Candidate.objects.filter(pk=candidate_id).update(attempts=candidate.attempts + 1)
    goal = candidate.goal
    evaluate = evaluate or kernels.evaluate
    try:
        evidence = evaluate(
            goal.workload,
            candidate.source,
            candidate.params,
            shape_set=goal.shape_set,
            backend=goal.backend,
            timeout_s=settings.EVAL_TIMEOUT_S,
        )
        record = evidence.to_dict()
    except Exception as exc:  # noqa: BLE001 - the evaluator's own failure must not lose the candidate
        log.exception("evaluator failed on candidate %s", candidate_id)
        record = {
            "status": CandidateStatus.RUNTIME_ERROR,
            "metrics": {},
            "log": f"evaluator error: {type(exc).__name__}: {exc}",
        }
    with transaction.atomic():
        Evidence.objects.create(
            candidate=candidate,
            status=str(record["status"]),
            metrics=record.get("metrics") or {},
            samples_ms=record.get("samples_ms") or {},
            cases=record.get("cases") or [],
            log=record.get("log") or "",
            fingerprint=record.get("fingerprint") or {},
            duration_s=record.get("duration_s") or 0.0,
        )
        Candidate.objects.filter(pk=candidate_id).update(status=str(record["status"]), evaluated_at=timezone.now())
    candidate.refresh_from_db()
    events.publish(candidate.run_id, "candidate", candidate.to_dict())
    return candidate


# --- summaries ----------------------------------------------------------------------------------


def run_state(run: Run) -> dict[str, Any]:
    """Progress of a run: state, generation, budget, evaluated and status counts."""
    counts = dict(run.candidates.values_list("status").annotate(n=Count("id")).values_list("status", "n"))
    evaluated = sum(n for s, n in counts.items() if s not in PENDING_STATUSES)
    return {
        "id": run.pk,
        "state": run.state,
        "generation": run.generation,
        "budget": run.budget,
        "evaluated": evaluated,
        "status_counts": counts,
    }


def frontier(goal: Goal, candidates: list[Candidate]) -> list[Candidate]:
    """Pareto frontier over the goal's objectives among ``ok`` candidates meeting its constraints."""
    feasible = [
        c
        for c in candidates
        if c.status == CandidateStatus.OK
        and goal.is_feasible(c.evidence.metrics)
        and all(o["metric"] in c.evidence.metrics for o in goal.objectives)
    ]
    points = [
        [c.evidence.metrics[o["metric"]] * (1 if o["direction"] == "minimize" else -1) for o in goal.objectives]
        for c in feasible
    ]
    return [feasible[i] for i in pareto_front(points)]


def best(goal: Goal, candidates: list[Candidate]) -> Candidate | None:
    """Feasible ``ok`` candidate with the best primary objective, or None."""
    front = frontier(goal, candidates)
    if not front:
        return None
    metric, sign = goal.primary["metric"], (1 if goal.primary["direction"] == "minimize" else -1)
    return min(front, key=lambda c: sign * c.evidence.metrics[metric])


def run_summary(run: Run) -> dict[str, Any]:
    """Result of a run: progress, best candidate and Pareto frontier (the ``factory run`` JSON)."""
    cands = list(run.candidates.select_related("evidence").exclude(status__in=PENDING_STATUSES))
    top = best(run.goal, cands)
    summary = run_state(run)
    summary.update(
        goal=run.goal_id,
        workload=run.goal.workload,
        target=run.goal.target,
        shape_set=run.goal.shape_set,
        seed=run.seed,
        best=top.to_dict() if top else None,
        frontier=[c.to_dict() for c in frontier(run.goal, cands)],
    )
    return summary
