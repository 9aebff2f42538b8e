"""System check of the broker's redelivery: Celery's visibility timeout against the longest task.

With a Redis (or SQS) broker and late acknowledgement (``CELERY_TASK_ACKS_LATE``), a task not
acknowledged within ``broker_transport_options["visibility_timeout"]`` seconds is delivered
again to another worker while the first still runs it. The claim makes the duplicate harmless,
but it holds a second worker for as long; this check (id ``swarm.W003``) says so at start-up.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from django.conf import settings
from django.core import checks

from swarm import tasks
from swarm.production import promotion

#: Brokers that redeliver unacknowledged messages after the visibility timeout (Kombu).
REDELIVERING_SCHEMES = ("redis", "rediss", "sentinel", "sqs")
#: Kombu's visibility timeout when ``broker_transport_options`` sets none (seconds).
KOMBU_DEFAULT_VISIBILITY_S = 3600.0
SWARM_TASKS = (tasks.evaluate, tasks.evaluate_batch, tasks.validate_promotion, tasks.measure_baseline)


def task_bounds() -> list[tuple[str, float]]:
    """``(what, seconds)`` of the longest a task can run: one evaluation (``EVAL_TIMEOUT_S``),
    an extended validation of a promotion, and each swarm task's Celery time limit (its own
    ``time_limit``, else ``CELERY_TASK_TIME_LIMIT``) where one is set."""
    bounds = [
        (f"one evaluation (EVAL_TIMEOUT_S = {settings.EVAL_TIMEOUT_S:g} s)", float(settings.EVAL_TIMEOUT_S)),
        ("the swarm.validate_promotion task (the candidate's and the incumbent's evaluations, each up to "
         "2 x EVAL_TIMEOUT_S, and the paired comparison)", promotion.longest_validation_s()),
    ]
    default_limit = getattr(settings, "CELERY_TASK_TIME_LIMIT", None)
    for task in SWARM_TASKS:
        limit = task.time_limit if task.time_limit is not None else default_limit
        if limit is not None:
            bounds.append((f"the {task.name} task's time limit", float(limit)))
    return bounds


def check_broker_visibility(app_configs, **kwargs) -> list[checks.CheckMessage]:
    """Warn (``swarm.W003``) when the broker's visibility timeout is not longer than the longest task."""
    scheme = urlsplit(str(getattr(settings, "CELERY_BROKER_URL", "") or "")).scheme.split("+")[0]
    if scheme not in REDELIVERING_SCHEMES:
        return []
    options = getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", None) or {}
    visibility = float(options.get("visibility_timeout", KOMBU_DEFAULT_VISIBILITY_S))
    what, longest = max(task_bounds(), key=lambda b: b[1])
    if visibility > longest:
        return []
    return [checks.Warning(
        f"Celery's broker visibility_timeout ({visibility:g} s) is not longer than {what}: {longest:g} s. "
        "The broker redelivers a task still running after that long, so a second worker runs it again "
        "(the claim keeps the duplicate harmless, but it holds that worker as long).",
        hint=f"Set CELERY_VISIBILITY_TIMEOUT_S above {longest:g} s (e.g. {2 * longest:g}), or lower "
             "EVAL_TIMEOUT_S or the task time limit.",
        id="swarm.W003",
    )]
