"""Celery tasks of the engines app (``app.autodiscover_tasks()`` imports this module)."""

from engines.web.tuning import tune_plan

__all__ = ["tune_plan"]
