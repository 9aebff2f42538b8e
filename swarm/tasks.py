"""Celery tasks: thin wrappers that load ids and call the orchestrator.

Their names are :mod:`swarm.runs.dispatch`'s constants; the rest of the swarm sends them by name
(:func:`swarm.runs.dispatch.send`) and never imports this module.
"""

from __future__ import annotations

from celery import shared_task
from celery.signals import worker_init, worker_ready

from swarm.learning import insights
from swarm.production import paired_runs, promotion
from swarm.runs import baselines, orchestrator, sweeper
from swarm.runs.dispatch import (
    EVALUATE,
    EVALUATE_BATCH,
    MEASURE_BASELINE,
    MEASURE_PAIRED,
    VALIDATE_PROMOTION,
    dispatch,
)


@shared_task(name=EVALUATE, acks_late=True, reject_on_worker_lost=True)
def evaluate(candidate_id: int) -> None:
    """Evaluate one candidate, store its evidence, then advance its run if the generation is done."""
    candidate = orchestrator.evaluate_candidate(candidate_id)
    if candidate is None:
        return
    dispatch(orchestrator.advance(candidate.run_id))


@shared_task(name=VALIDATE_PROMOTION, acks_late=True, reject_on_worker_lost=True)
def validate_promotion(request_id: int) -> None:
    """Run a promotion request's extended validation on the target's worker and decide it."""
    promotion.validate_request(request_id)


@shared_task(name=MEASURE_PAIRED, acks_late=True, reject_on_worker_lost=True)
def measure_paired(run_id: int) -> None:
    """Measure a paired comparison of two candidates on the target's worker and store it."""
    paired_runs.measure(run_id)


@shared_task(name=MEASURE_BASELINE, acks_late=True, reject_on_worker_lost=True)
def measure_baseline(baseline_id: int) -> None:
    """Time a (workload, target, shape set)'s plain baseline once on the target's worker."""
    baselines.measure(baseline_id)


@shared_task(name=EVALUATE_BATCH, acks_late=True, reject_on_worker_lost=True)
def evaluate_batch(candidate_ids: list[int]) -> None:
    """Evaluate several cheap candidates (replay) with batched writes, then advance their runs."""
    done = orchestrator.evaluate_batch(candidate_ids)
    for run_id in sorted({c.run_id for c in done}):
        dispatch(orchestrator.advance(run_id))


@worker_init.connect
def _import_learning_stack(**kwargs) -> None:
    """Import what learning needs (Optuna's importance evaluators, scikit-learn: ~1.5 s) when a
    worker starts, before its pool forks, rather than at the first generation boundary of the
    first run, where it would stall every candidate waiting behind it."""
    insights.import_dependencies()


@worker_ready.connect
def _start_sweeper(**kwargs) -> None:
    """Each worker process recovers lost work periodically (see :mod:`swarm.runs.sweeper`)."""
    sweeper.start()


def _profile_worker_process() -> None:
    """With ``INT21_PROFILE_WORKER=<file>``, cProfile each worker process (benchmarks)."""
    import os

    path = os.environ.get("INT21_PROFILE_WORKER")
    if not path:
        return
    import cProfile

    from celery.signals import worker_process_init, worker_process_shutdown

    profiler = cProfile.Profile()

    @worker_process_init.connect(weak=False)
    def _start(**kwargs) -> None:
        profiler.enable()

    @worker_process_shutdown.connect(weak=False)
    def _stop(**kwargs) -> None:
        profiler.disable()
        profiler.dump_stats(path)


_profile_worker_process()
