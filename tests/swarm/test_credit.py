import pytest

from swarm.learning.credit import Arm, allocate, frontier_improvements
from swarm.models import Generation
from swarm.runs import orchestrator
from tests.swarm.synthetic import drive, synthetic_goal


def test_new_agents_are_each_tried_before_any_is_favoured():
    shares, _ = allocate([Arm("a", 0, 0), Arm("b", 0, 0), Arm("c", 0, 0)], 3)
    assert shares == {"a": 1, "b": 1, "c": 1}


def test_budget_moves_to_the_agent_that_improves_the_frontier():
    shares, scores = allocate([Arm("good", 40, 20), Arm("bad", 40, 0)], 10)
    assert shares["good"] > shares["bad"] >= 0 and scores["good"] > scores["bad"]


def test_failed_proposals_use_up_credit_and_the_cold_start_floor():
    # Eight failures and no evaluations: no longer cold, and no better than an agent that never improves.
    shares, scores = allocate([Arm("failing", 0, 0, failures=8), Arm("good", 8, 4)], 1)
    assert shares == {"failing": 0, "good": 1} and scores["failing"] < scores["good"]
    shares, _ = allocate([Arm("failing", 0, 0, failures=40), Arm("good", 40, 10)], 10)
    assert shares["good"] > shares["failing"]


def test_paused_agents_get_nothing_and_boost_multiplies():
    shares, _ = allocate([Arm("a", 10, 1, paused=True), Arm("b", 10, 1)], 4)
    assert shares == {"a": 0, "b": 4}
    shares, _ = allocate([Arm("a", 10, 1, boost=3.0), Arm("b", 10, 1)], 8)
    assert shares["a"] > shares["b"]


def test_an_improvement_is_a_point_not_dominated_on_arrival():
    before = [[3.0, 1.0], [1.0, 3.0]]
    new = [("x", [2.0, 2.0]), ("y", [2.5, 2.5]), ("z", [0.5, 0.5]), ("x", [0.5, 0.5])]
    # x improves, y is dominated by x's point, z improves, x's repeat equals z's point
    assert frontier_improvements(before, new) == {"x": 1, "z": 1}


@pytest.mark.django_db
def test_a_run_credits_agents_and_records_shares_per_generation():
    goal = synthetic_goal()
    run, pending = orchestrator.start_run(goal, budget=48, seed=4, batch_size=6)
    drive(run, pending)
    run.refresh_from_db()
    agents = {a.name: a for a in run.agents.all()}
    assert sum(a.evaluations for a in agents.values()) == 48
    assert sum(a.improvements for a in agents.values()) >= 1
    gens = list(Generation.objects.filter(run=run))
    assert len(gens) == 8 and all(sum(g.shares.values()) == 6 for g in gens)
    assert all(g.finished_at for g in gens)
    # the shares follow the bandit: after generation 1 they are no longer uniform for ever
    assert len({tuple(sorted(g.shares.items())) for g in gens}) > 1
