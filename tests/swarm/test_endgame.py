"""A run's endgame: its last evaluations go to the agents that climb from the best points."""

from pathlib import Path

import pytest
from django.test import override_settings

from swarm.learning.credit import Arm, endgame_evaluations, endgame_share, endgame_shares
from swarm.models import Candidate, Generation
from swarm.runs import orchestrator

CONV = Path(__file__).resolve().parents[3] / "shared" / "datasets" / "tuning-cache" / "convolution_A100-PCIE-40GB.json.gz"
ENERGY = CONV.with_name("gemm-xgemm-energy_A100-PCIE-40GB_partial.json.gz")
MIX = [{"name": "forest", "kind": "forest", "settings": {}}, {"name": "local", "kind": "local", "settings": {}},
       {"name": "evolutionary", "kind": "evolutionary", "settings": {}}]


def test_the_endgame_is_the_budgets_last_share_rounded_down():
    assert [endgame_evaluations(b, 0.15) for b in (1, 6, 7, 50, 100, 400)] == [0, 0, 1, 7, 15, 60]
    assert endgame_evaluations(100, 0.0) == 0 and endgame_evaluations(100, 1.0) == 100
    assert endgame_evaluations(100, 0.29) == 29 and endgame_evaluations(100, 0.57) == 57  # not 28.999...
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="endgame share"):
            endgame_evaluations(100, bad)


def test_endgame_slots_are_split_among_the_active_climbing_agents_only():
    arms = [Arm("forest", 30, 2), Arm("local", 10, 0), Arm("pack", 5, 1), Arm("off", 1, 0, paused=True)]
    assert endgame_shares(arms, 5, {"local", "pack", "off"}) == {"forest": 0, "local": 3, "pack": 2, "off": 0}
    assert endgame_shares(arms, 4, {"local"}) == {"forest": 0, "local": 4, "pack": 0, "off": 0}
    assert endgame_shares(arms, 4, {"off"}) is None  # no active climber: the bandit shares
    assert endgame_shares(arms, 4, set()) is None
    # One slot a generation: the climbers take turns by the generation's number.
    assert [endgame_shares(arms, 1, {"local", "pack"}, turn=t)["pack"] for t in range(4)] == [0, 1, 0, 1]
    assert endgame_shares([Arm("local", 1, 0, boost=0.0)], 4, {"local"}) is None


@pytest.mark.parametrize("raw, share", [(None, 0.25), ("", 0.25), (" ", 0.25), ("0", 0.0), (" 0.5 ", 0.5), ("1", 1.0)])
def test_the_share_is_read_from_the_environment(raw, share):
    assert endgame_share(raw) == share


@pytest.mark.parametrize("raw", ["abc", "nan", "inf", "-0.1", "1.0000001", "1_0"])
def test_a_share_that_is_not_in_zero_to_one_is_refused(raw):
    with pytest.raises(ValueError, match="expected a share of the budget in"):
        endgame_share(raw)


def test_a_share_outside_the_budget_is_refused_at_start_up():
    import os
    import subprocess
    import sys

    env = {**os.environ, "SWARM_ENDGAME_SHARE": "1.5", "DJANGO_SETTINGS_MODULE": "int21_site.settings"}
    done = subprocess.run([sys.executable, "-c", "import django; django.setup()"], env=env, capture_output=True,
                          text=True, cwd=Path(__file__).resolve().parents[2], timeout=120)
    assert done.returncode != 0 and "SWARM_ENDGAME_SHARE='1.5': expected a share of the budget in [0, 1]" in done.stderr


def _drive(run, pending):
    while pending:
        orchestrator.evaluate_batch([c.pk for c in pending])
        pending = orchestrator.advance(run.pk)


@pytest.mark.skipif(not CONV.exists(), reason="shared tuning-cache data set not present")
@pytest.mark.django_db
@pytest.mark.parametrize("share, endgame_generations", [(0.25, [10, 11, 12]), (0.0, [])])
def test_the_last_generations_go_to_the_local_agent_which_ranks_the_best_points_neighbours(share, endgame_generations):
    """Budget 48 in generations of 4 with a quarter's endgame (12 evaluations): generations 10,
    11 and 12 (12, 8 and 4 evaluations left) are all the local agent's, each candidate a
    one-parameter neighbour of one of the five best points evaluated before its generation."""
    from swarm.goals.replay import import_cache

    goal, _ = import_cache(CONV)
    with override_settings(SWARM_ENDGAME_SHARE=share):
        run, pending = orchestrator.start_run(goal, budget=48, seed=3, batch_size=4, agents=MIX)
        _drive(run, pending)
    gens = {g.number: g.shares for g in Generation.objects.filter(run=run)}
    assert len(gens) == 12
    for number, shares in gens.items():
        if number in endgame_generations:
            assert shares == {"forest": 0, "local": 4, "evolutionary": 0}
        else:
            assert shares["forest"] + shares["evolutionary"] > 0, (number, shares)
    cands = list(Candidate.objects.filter(run=run).select_related("evidence").order_by("id"))
    for c in cands:
        assert c.rationale.startswith("endgame: ") == (c.generation in endgame_generations), (c.generation, c.rationale)
    for c in (c for c in cands if c.generation in endgame_generations):
        before = [o for o in cands if o.generation < c.generation and o.status == "ok"]
        best = sorted(before, key=lambda o: o.evidence.metrics["latency_ms"])[:5]
        (parent,) = c.parents.values_list("pk", flat=True)
        assert parent in {o.pk for o in best}
        base = next(o for o in best if o.pk == parent)
        assert sum(c.params[k] != base.params[k] for k in c.params) == 1


@pytest.mark.skipif(not ENERGY.exists(), reason="shared tuning-cache data set not present")
@pytest.mark.django_db
def test_a_goal_of_two_objectives_has_no_endgame():
    """Its result is a Pareto front of time and energy, which a climb on time does not serve."""
    from swarm.goals.replay import import_cache

    goal, _ = import_cache(ENERGY)
    assert len(goal.objectives) == 2
    run, pending = orchestrator.start_run(goal, budget=48, seed=3, batch_size=4, agents=MIX)
    _drive(run, pending)
    assert Candidate.objects.filter(run=run).count() == 48
    assert not Candidate.objects.filter(run=run, rationale__startswith="endgame").exists()
    assert all(g.shares["local"] < 4 for g in Generation.objects.filter(run=run, number__gte=10))
