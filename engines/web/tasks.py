"""Celery tasks of the engines app (found by ``app.autodiscover_tasks()``)."""

from __future__ import annotations

from celery import shared_task


@shared_task(name="engines.tune_plan", acks_late=True, reject_on_worker_lost=True)
def tune_plan(tuning_id: int, step: int | None = None) -> None:
    """One measurement (number ``step``) of a production engine's plan tuning, then the next
    is queued."""
    from engines.web.tuning import run_step  # noqa: PLC0415

    run_step(tuning_id, step)
