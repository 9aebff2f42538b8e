"""The system check of Celery's visibility timeout against EVAL_TIMEOUT_S and the longest task."""

from django.core import checks
from django.test import override_settings

from swarm.checks import check_broker_visibility
from swarm.production import promotion
from swarm.tasks import evaluate

REDIS = "redis://127.0.0.1:6379/0"


def w003(**settings) -> list:
    with override_settings(**settings):
        return [m for m in check_broker_visibility(None) if m.id == "swarm.W003"]


def test_a_visibility_timeout_shorter_than_an_evaluation_warns():
    found = w003(CELERY_BROKER_URL=REDIS, CELERY_BROKER_TRANSPORT_OPTIONS={"visibility_timeout": 30}, EVAL_TIMEOUT_S=60.0)
    assert len(found) == 1 and found[0].level == checks.WARNING
    # The longest bound is named: 3 evaluations of a promotion's validation at 2 x 60 s.
    longest = f"{promotion.longest_validation_s():.0f} s"
    assert "visibility_timeout (30 s)" in found[0].msg and longest in found[0].msg
    assert f"CELERY_VISIBILITY_TIMEOUT_S above {longest}" in found[0].hint


def test_one_longer_than_the_longest_task_is_quiet_and_the_task_time_limit_counts():
    assert w003(CELERY_BROKER_URL=REDIS, CELERY_BROKER_TRANSPORT_OPTIONS={"visibility_timeout": 3600}, EVAL_TIMEOUT_S=60.0) == []
    found = w003(CELERY_BROKER_URL=REDIS, CELERY_BROKER_TRANSPORT_OPTIONS={"visibility_timeout": 3600},
                 EVAL_TIMEOUT_S=60.0, CELERY_TASK_TIME_LIMIT=7200)
    assert len(found) == 1 and "time limit: 7200 s" in found[0].msg


def test_a_tasks_own_time_limit_counts(monkeypatch):
    monkeypatch.setattr(evaluate, "time_limit", 5000)
    found = w003(CELERY_BROKER_URL=REDIS, CELERY_BROKER_TRANSPORT_OPTIONS={"visibility_timeout": 3600}, EVAL_TIMEOUT_S=60.0)
    assert len(found) == 1 and "swarm.evaluate task's time limit: 5000 s" in found[0].msg


def test_kombus_default_applies_without_options_and_memory_brokers_are_not_checked():
    found = w003(CELERY_BROKER_URL=REDIS, CELERY_BROKER_TRANSPORT_OPTIONS={}, EVAL_TIMEOUT_S=1000.0)
    assert len(found) == 1 and "visibility_timeout (3600 s)" in found[0].msg
    assert w003(CELERY_BROKER_URL="memory://", CELERY_BROKER_TRANSPORT_OPTIONS={"visibility_timeout": 1}) == []


def test_the_check_is_registered():
    assert check_broker_visibility in checks.registry.registry.get_checks()
