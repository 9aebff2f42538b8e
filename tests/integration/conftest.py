from pathlib import Path

import pytest

from tests.integration.stack import database_url, factory_stack

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


@pytest.fixture(scope="session")
def stack(django_db_setup, django_db_blocker):
    """Base URL of the factory's real processes (server, and a worker in production mode)."""
    from django.conf import settings
    from django.db import connection

    if settings.REDIS_URL:
        import redis

        # Work left in the test Redis by an earlier, interrupted session must not be consumed.
        redis.Redis.from_url(settings.REDIS_URL).flushdb()
    with django_db_blocker.unblock():
        url = database_url(connection.settings_dict)
    with factory_stack(url, ARTIFACTS / "logs") as base:
        yield base


@pytest.fixture
def demo_user(transactional_db):
    from django.core.management import call_command

    call_command("setup_demo", "--username", "engineer", "--password", "pw-engineer")
    return "engineer", "pw-engineer"
