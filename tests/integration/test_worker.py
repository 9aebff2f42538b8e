"""A run through a real Celery worker process on Redis stores its evidence in PostgreSQL."""

import time

import pytest
from django.db import connection

from swarm.goals.lifecycle import default_goal
from swarm.models import Evidence, Run
from swarm.runs import orchestrator
from swarm.runs.dispatch import dispatch


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
    assert run.end_kind == "budget" and run.end_reason == "budget spent: 6 of 6 evaluations"
    evidence = Evidence.objects.filter(candidate__run=run)
    assert evidence.count() == 6
    assert evidence.filter(status="ok").exists(), [e.log[-500:] for e in evidence]
    ok = evidence.filter(status="ok").first()
    assert ok.metrics["latency_ms"] > 0 and ok.samples_ms and ok.cases
    # the worker's host fingerprint came back with the evidence
    assert ok.fingerprint


SLOW_CORRECT = r"""
#include <math.h>
#include <unistd.h>
void rmsnorm(const float *x, const float *w, float *y, int rows, int hidden, float eps) {
    usleep(150000);  /* slow enough to be killed mid-evaluation */
    for (int r = 0; r < rows; r++) {
        double ss = 0.0;
        for (int i = 0; i < hidden; i++) ss += (double)x[(long)r * hidden + i] * x[(long)r * hidden + i];
        float inv = (float)(1.0 / sqrt(ss / hidden + eps));
        for (int i = 0; i < hidden; i++) y[(long)r * hidden + i] = x[(long)r * hidden + i] * inv * w[i];
    }
}
"""


@pytest.mark.services
@pytest.mark.timeout(240)
def test_a_worker_killed_mid_task_loses_nothing_and_evaluates_once(stack, transactional_db):
    import os
    import signal

    from swarm.goals.lifecycle import default_goal
    from swarm.models import Candidate

    goal = default_goal("rmsnorm", "cpu-x86_64", "test-small", name="slow kernel")
    goal.source = SLOW_CORRECT
    goal.space = {"parameters": [{"name": "UNUSED", "values": [1]}], "restrictions": []}
    goal.save()
    run, first = orchestrator.start_run(goal, budget=1, seed=1, batch_size=1)
    dispatch(first)
    candidate = first[0]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # wait until the worker is evaluating it
        candidate.refresh_from_db()
        if candidate.status == "running":
            break
        time.sleep(0.1)
    assert candidate.status == "running"
    holder_pid = int(candidate.claimed_by.split(":")[1])
    time.sleep(1.0)
    os.kill(holder_pid, signal.SIGKILL)  # the pool process dies mid-task; the broker keeps the message
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline:
        run.refresh_from_db()
        if run.state == Run.State.FINISHED:
            break
        time.sleep(0.5)
    candidate = Candidate.objects.get(pk=candidate.pk)
    assert run.state == Run.State.FINISHED, orchestrator.run_state(run)
    assert candidate.status == "ok", candidate.evidence.log
    assert Evidence.objects.filter(candidate=candidate).count() == 1
    assert candidate.attempts == 2
    assert candidate.retry_history and candidate.retry_history[0]["taken_from"].split(":")[1] == str(holder_pid)
