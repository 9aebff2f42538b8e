"""A run through a real Celery worker process on Redis stores its evidence in PostgreSQL."""

import time

import pytest
from django.db import connection

from swarm import orchestrator
from swarm.dispatch import dispatch
from swarm.goals import default_goal
from swarm.models import Evidence, Run


@pytest.mark.services
@pytest.mark.timeout(180)
def test_a_run_through_the_worker_process_stores_evidence_in_postgres(stack, transactional_db):
    assert connection.vendor == "postgresql"
    goal = default_goal("rmsnorm", "cpu-x86_64", "test-small")
    run, first = orchestrator.start_run(goal, budget=6, seed=21, batch_size=3)
    dispatch(first)
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline:
        run.refresh_from_db()
        if run.state == Run.State.FINISHED:
            break
        time.sleep(0.5)
    assert run.state == Run.State.FINISHED, orchestrator.run_state(run)
    evidence = Evidence.objects.filter(candidate__run=run)
    assert evidence.count() == 6
    assert evidence.filter(status="ok").exists(), [e.log[-500:] for e in evidence]
    ok = evidence.filter(status="ok").first()
    assert ok.metrics["latency_ms"] > 0 and ok.samples_ms and ok.cases
    # the worker's host fingerprint came back with the evidence
    assert ok.fingerprint
