"""Pending work survives the loss of its broker messages (a restarted broker without
persistence, or a web process that died before dispatching): the sweeper re-dispatches it."""

import time

import pytest

from swarm.goals.lifecycle import default_goal
from swarm.models import Run
from swarm.runs import orchestrator


@pytest.mark.timeout(180)
def test_a_run_whose_tasks_were_never_delivered_still_finishes(stack, transactional_db):
    goal = default_goal("rmsnorm", "cpu-x86_64", "test-small", name="lost messages")
    run, first = orchestrator.start_run(goal, budget=4, seed=3, batch_size=2)
    # No dispatch(first): as if the broker lost the messages. The worker's sweeper (every 2 s
    # in this stack) finds the queued candidates with an empty queue and sends them again.
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline:
        run.refresh_from_db()
        if run.state == Run.State.FINISHED:
            break
        time.sleep(0.5)
    assert run.state == Run.State.FINISHED, orchestrator.run_state(run)
    assert run.candidates.filter(status="ok").count() >= 1
    assert all(c.attempts == 1 for c in run.candidates.all())
