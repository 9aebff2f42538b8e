from pathlib import Path

import pytest

from tests.integration.stack import database_url, factory_stack

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


@pytest.fixture(scope="package")
def stack(django_db_setup, django_db_blocker):
    """Base URL of the factory's real processes (server, and a worker in production mode).

    Package-scoped: the processes stop once this package's tests are done, so that their
    sweeper and worker never act on the runs of later tests, which share the database."""
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

    call_command("setup_demo", "--username", "engineer", "--password", "pw-engineer", "--no-engines")
    return "engineer", "pw-engineer"


@pytest.fixture(autouse=True)
def settled_database(transactional_db):
    """After each test, stop its runs and wait until the factory's processes are quiet.

    The server and worker keep working on a run after a test has seen what it asserts (closing
    the generation, learning insights). pytest-django then truncates every table; a TRUNCATE
    racing a multi-table transaction in another process is a PostgreSQL deadlock, so the
    teardown waits for the other sessions on the test database to go idle first.
    """
    yield
    from swarm.models import Run

    Run.objects.filter(state=Run.State.RUNNING).update(state=Run.State.STOPPED)
    _wait_until_quiet()


def _wait_until_quiet(timeout_s: float = 60.0, quiet_s: float = 1.0) -> None:
    import time

    from django.db import connection

    if connection.vendor != "postgresql":
        time.sleep(quiet_s)  # SQLite: writers serialise on the file lock; let in-flight work land
        return
    deadline = time.monotonic() + timeout_s
    quiet_since = None
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid() AND state IS NOT NULL AND state <> 'idle'"
            )
            busy = cursor.fetchone()[0]
        now = time.monotonic()
        if busy:
            quiet_since = None
        elif quiet_since is None:
            quiet_since = now
        elif now - quiet_since >= quiet_s:
            return
        time.sleep(0.1)
