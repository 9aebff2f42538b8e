"""An invalid_input candidate (the workload's inputs failed) says nothing about its agent or parameters."""

import numpy as np
import pytest

from kernels import Outcome
from swarm.learning.insights import failure_rules
from swarm.models import Candidate, Insight
from swarm.runs import agent_view, orchestrator
from swarm.runs.history import Row
from tests.contracts.agent_contract import SPACE, landscape
from tests.swarm.synthetic import FakeEvidence, drive, synthetic_goal


def unjudged_landscape(params):
    """The contract's landscape with its failing region (BX*BY > 512) reported as invalid_input."""
    status, metrics = landscape(params)
    return ("invalid_input", {}) if status != "ok" else (status, metrics)


def test_invalid_input_is_a_failure_of_the_inputs_not_a_judged_outcome():
    assert Outcome.invalid_input.is_failure and not Outcome.invalid_input.judged
    # A cancelled evaluation says nothing about its candidate either; a pruned one does (it is slow).
    assert not Outcome.cancelled.judged and Outcome.pruned.judged
    assert all(o.judged for o in Outcome if o not in (Outcome.invalid_input, Outcome.cancelled))


def test_no_failure_rule_is_learned_from_invalid_input():
    points = SPACE.sample(np.random.default_rng(0), 150)
    judged = [(p, landscape(p)[0]) for p in points]
    assert failure_rules(SPACE, judged)  # the same points, failing as runtime_error, give a rule
    assert failure_rules(SPACE, [(p, unjudged_landscape(p)[0]) for p in points]) == []


def test_agents_see_an_invalid_input_candidate_but_never_observe_it():
    params = [{"BX": 16, "BY": 1, "TILE": 1, "UNROLL": 0}, {"BX": 32, "BY": 1, "TILE": 1, "UNROLL": 0}]
    rows = [Row(1, 1, 1, "a", "invalid_input", params[0], {}, None), Row(2, 1, 1, "a", "ok", params[1], {}, None)]
    seen, history = agent_view.observe("unjudged-test", [], SPACE.names, rows, SPACE.point_key, lambda m: True)
    agent_view.forget("unjudged-test")
    assert seen == {SPACE.point_key(p) for p in params}
    assert [o.candidate for o in history] == [2]


def unjudged_evaluate(workload, source, params, **kwargs):
    return FakeEvidence(*unjudged_landscape(params))


@pytest.mark.django_db
def test_an_invalid_input_candidate_does_not_count_against_its_agent_or_create_a_failure_rule():
    goal = synthetic_goal()
    run, pending = orchestrator.start_run(goal, budget=60, seed=2, batch_size=10)
    drive(run, pending, evaluate=unjudged_evaluate)
    run.refresh_from_db()
    unjudged = Candidate.objects.filter(run=run, status="invalid_input").count()
    total = Candidate.objects.filter(run=run).count()
    assert unjudged >= 4 and total == 60
    # Credit: only judged candidates are pulls of an agent's arm.
    assert sum(a.evaluations for a in run.agents.all()) == total - unjudged
    assert not Insight.objects.filter(kind="failure_rule").exists()
    assert orchestrator.run_state(run)["status_counts"]["invalid_input"] == unjudged
