"""Celery tasks of the engines app (``app.autodiscover_tasks()`` imports this module)."""

from swarm.engine_registry.bench_requests import run_benchmark
from swarm.engine_registry.tuning import tune_plan

__all__ = ["run_benchmark", "tune_plan"]
