import pytest

from swarm.models import AuditEvent, Direction, Run
from swarm.runs import directions, orchestrator, summaries
from swarm.runs.directions import DirectionError
from tests.swarm.synthetic import drive, synthetic_evaluate, synthetic_goal


@pytest.fixture
def run(db, owner):
    goal = synthetic_goal()
    run, pending = orchestrator.start_run(goal, budget=40, seed=5, batch_size=5)
    for c in pending:
        orchestrator.evaluate_candidate(c.pk, evaluate=synthetic_evaluate)
    return run


def finish_generation(run):
    return orchestrator.advance(run.pk)


def test_narrowing_applies_at_the_next_generation_with_author_and_effect(run, owner):
    d = directions.submit(run, "narrow", {"param": "BX", "values": [64, 128]}, owner)
    assert d.state == "pending"
    new = finish_generation(run)
    d.refresh_from_db()
    assert d.state == "applied" and d.applied_generation == 2 and d.author == owner
    assert d.effect == {"space_size_before": 200, "space_size_after": 80}
    assert new and all(c.params["BX"] in (64, 128) for c in new)
    assert AuditEvent.objects.filter(verb="direction.narrow").exists()


def test_a_suggested_restriction_is_accepted_in_one_call(run, owner):
    directions.submit(run, "add_restriction", {"expression": "not (BX*BY > 512)"}, owner)
    new = finish_generation(run)
    assert all(c.params["BX"] * c.params["BY"] <= 512 for c in new)


@pytest.mark.parametrize(
    "kind, payload, message",
    [
        ("narrow", {"param": "BZ", "values": [1]}, "unknown parameter 'BZ'"),
        ("narrow", {"param": "BX", "values": [7]}, "no value(s) [7]"),
        ("exclude", {"param": "UNROLL", "values": [0, 1]}, "without any value"),
        ("add_restriction", {"expression": "__import__('os')"}, "not allowed"),
        ("set_constraint", {"metric": "latency_ms", "op": "<", "value": 1}, "'<=' or '>='"),
        ("boost_agent", {"agent": "nobody", "factor": 2}, "no agent 'nobody'"),
        ("teleport", {}, "unknown direction"),
    ],
)
def test_bad_directions_are_refused_with_a_reason_and_nothing_saved(run, owner, kind, payload, message):
    with pytest.raises(DirectionError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[").replace("]", r"\]")):
        directions.submit(run, kind, payload, owner)
    assert not Direction.objects.exists()


def test_pausing_an_agent_gives_it_no_budget(run, owner):
    directions.submit(run, "pause_agent", {"agent": "evolutionary"}, owner)
    finish_generation(run)
    gen = run.generations.get(number=2)
    assert gen.shares["evolutionary"] == 0 and sum(gen.shares.values()) == 5


def test_a_changed_constraint_changes_feasibility(run, owner):
    directions.submit(run, "set_constraint", {"metric": "latency_ms", "op": "<=", "value": 0.5}, owner)
    pending = finish_generation(run)
    drive(run, pending)
    run.refresh_from_db()
    assert run.constraints == [{"metric": "latency_ms", "op": "<=", "value": 0.5}]
    assert summaries.run_summary(run)["best"] is None  # nothing is that fast


def test_stop_ends_the_run_at_the_boundary(run, owner):
    directions.submit(run, "stop", {}, owner)
    assert finish_generation(run) == []
    run.refresh_from_db()
    assert run.state == Run.State.STOPPED
    with pytest.raises(DirectionError, match="stopped"):
        directions.submit(run, "stop", {}, owner)
