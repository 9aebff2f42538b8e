"""Celery tasks of the engines app (``app.autodiscover_tasks()`` imports this module)."""

from swarm.engine_registry.tuning import tune_plan

__all__ = ["tune_plan"]
