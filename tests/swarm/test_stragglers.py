"""A generation does not wait for its slowest candidate; directions apply at the next
proposal; a hopeless candidate is pruned and a running one can be cancelled."""

import threading
import time

import pytest

from kernels.evaluation.pruning import Prune
from swarm.models import Candidate, CandidateStatus, Direction, Evidence, Generation, Run
from swarm.runs import agent_view, cancelling, claims, directions, orchestrator, pruning, summaries
from tests.swarm.synthetic import synthetic_evaluate, synthetic_goal


def in_flight(run):
    return run.candidates.filter(status__in=("queued", "running")).count()


@pytest.fixture
def straggling(db, owner):
    """A run of batch 4 whose first candidate is left in flight (a straggler) while the other
    three of generation 1 are evaluated."""
    run, first = orchestrator.start_run(synthetic_goal(), budget=12, seed=3, batch_size=4)
    return run, first[0], first[1:]


def test_each_slot_freed_is_proposed_again_while_a_straggler_runs(straggling):
    run, straggler, rest = straggling
    for c in rest:
        orchestrator.evaluate_candidate(c.pk, evaluate=synthetic_evaluate)
        new = orchestrator.advance(run.pk)
        assert len(new) == 1 and new[0].status == CandidateStatus.QUEUED  # the freed slot, at once
        assert in_flight(run) == 4
    run.refresh_from_db()
    assert run.generation == 4
    assert Generation.objects.get(run=run, number=1).finished_at is None  # its straggler still runs
    assert Generation.objects.filter(run=run, number__gt=1, finished_at__isnull=True).count() == 3
    orchestrator.evaluate_candidate(straggler.pk, evaluate=synthetic_evaluate)  # finishes at last
    orchestrator.advance(run.pk)
    assert Generation.objects.get(run=run, number=1).finished_at is not None


def test_a_direction_applies_at_the_next_proposal_not_when_the_straggler_ends(straggling, owner):
    run, straggler, rest = straggling
    d = directions.submit(run, "narrow", {"param": "BX", "values": [64, 128]}, owner)
    orchestrator.evaluate_candidate(rest[0].pk, evaluate=synthetic_evaluate)
    new = orchestrator.advance(run.pk)
    d.refresh_from_db()
    assert d.state == Direction.State.APPLIED and d.applied_generation == 2
    assert new and all(c.params["BX"] in (64, 128) for c in new)


def test_a_direction_applies_even_when_no_slot_is_free(straggling, owner):
    run, straggler, rest = straggling
    d = directions.submit(run, "pause_agent", {"agent": run.agents.first().name}, owner)
    assert orchestrator.advance(run.pk) == []  # four in flight: nothing to propose
    d.refresh_from_db()
    assert d.state == Direction.State.APPLIED


def test_directions_left_pending_when_the_run_stops_are_marked_not_applied(straggling, owner):
    run, straggler, rest = straggling
    d = directions.submit(run, "exclude", {"param": "BX", "values": [16]}, owner)
    orchestrator.stop_run(run, owner, via="a test")
    d.refresh_from_db()
    assert d.state == Direction.State.NOT_APPLIED and "stopped" in d.effect["not_applied"]


def test_a_stop_direction_removes_queued_candidates_and_drops_the_directions_after_it(straggling, owner):
    run, straggler, rest = straggling
    assert claims.claim(straggler.pk)  # running: it finishes and is kept
    stop = directions.submit(run, "stop", {}, owner)
    later = directions.submit(run, "exclude", {"param": "BX", "values": [16]}, owner)
    orchestrator.advance(run.pk)
    run.refresh_from_db()
    stop.refresh_from_db()
    later.refresh_from_db()
    assert run.state == Run.State.STOPPED and stop.state == Direction.State.APPLIED
    assert later.state == Direction.State.NOT_APPLIED
    assert not run.candidates.filter(status=CandidateStatus.QUEUED).exists()
    assert run.candidates.filter(pk=straggler.pk, status=CandidateStatus.RUNNING).exists()  # it finishes, kept


def test_the_budget_ends_the_run_only_once_nothing_is_in_flight(db):
    run, first = orchestrator.start_run(synthetic_goal(), budget=5, seed=3, batch_size=4)
    orchestrator.evaluate_candidate(first[0].pk, evaluate=synthetic_evaluate)
    fifth = orchestrator.advance(run.pk)
    assert len(fifth) == 1
    for c in first[1:]:
        orchestrator.evaluate_candidate(c.pk, evaluate=synthetic_evaluate)
        assert orchestrator.advance(run.pk) == []
    run.refresh_from_db()
    assert run.state == Run.State.RUNNING  # the fifth is still queued
    orchestrator.evaluate_candidate(fifth[0].pk, evaluate=synthetic_evaluate)
    orchestrator.advance(run.pk)
    run.refresh_from_db()
    assert run.state == Run.State.FINISHED and run.end_kind == Run.EndKind.BUDGET
    assert run.candidates.count() == 5
    assert not Generation.objects.filter(run=run, finished_at__isnull=True).exists()


# -- pruning -----------------------------------------------------------------------------------


def fast_and_slow(label_ms):
    """An evaluator where BX=16 is the incumbent and every other point is pruned (its report
    stands in for the sandbox's), recording the prune limits it was given."""
    given = []

    def evaluate(workload, source, params, **kw):
        given.append(kw.get("prune"))
        status, metrics = synthetic_evaluate(workload, source, params).status, {}
        if params["BX"] == 16:
            metrics = {"latency_ms": label_ms, f"latency_ms[{'rows=1'}]": label_ms, "max_rel_error": 1e-7}
        else:
            status, metrics = "pruned", {"latency_ms[rows=1]": 9 * label_ms, "prune_ratio": 9.0}

        class Ev:
            def to_dict(self):
                return {"status": status, "metrics": metrics, "log": "fake",
                        "fingerprint": {"child_wall_s": {"timing": 0.5}}}
        return Ev()

    return evaluate, given


def test_the_incumbent_of_the_goal_sets_the_prune_limits(db):
    goal = synthetic_goal(prune_factor=4.0)
    run, first = orchestrator.start_run(goal, budget=8, seed=3, batch_size=2)
    assert pruning.prune_for(run) is None  # nothing measured yet
    c = first[0]
    Candidate.objects.filter(pk=c.pk).update(params={**c.params, "BX": 16})
    evaluate, given = fast_and_slow(2.0)
    orchestrator.evaluate_candidate(c.pk, evaluate=evaluate)
    prune = pruning.prune_for(run)
    assert prune == Prune(4.0, {"rows=1": 2.0}, timing_wall_s=0.5, incumbent={"candidate": c.pk})
    assert prune.limit_ms("rows=1") == 8.0 and prune.deadline_s() == 4.0 * 0.5 + prune.slack_s
    orchestrator.evaluate_candidate(first[1].pk, evaluate=evaluate)
    assert given == [None, prune]


def test_a_pruned_candidate_is_evaluated_but_never_feasible_nor_proposed_again(db):
    run, first = orchestrator.start_run(synthetic_goal(), budget=6, seed=3, batch_size=2)
    Candidate.objects.filter(pk=first[0].pk).update(params={**first[0].params, "BX": 16})
    evaluate, _ = fast_and_slow(2.0)
    pending = first
    while pending:
        for c in pending:
            orchestrator.evaluate_candidate(c.pk, evaluate=evaluate)
        pending = orchestrator.advance(run.pk)
    summary = summaries.run_summary(run)
    pruned = list(run.candidates.filter(status=CandidateStatus.PRUNED))
    assert pruned and summary["evaluated"] == 6 and summary["status_counts"]["pruned"] == len(pruned)
    assert summary["best"]["id"] == first[0].pk
    assert all(c["id"] not in {p.pk for p in pruned} for c in summary["frontier"])
    view = agent_view.run_view(run)
    assert {view.space.point_key(p.params) for p in pruned} <= view.seen
    assert {o.status for o in view.history if o.candidate in {p.pk for p in pruned}} == {"pruned"}
    assert Evidence.objects.get(candidate=pruned[0]).metrics["prune_ratio"] == 9.0


# -- cancelling --------------------------------------------------------------------------------


def test_a_queued_candidate_is_cancelled_at_once_and_its_slot_proposed_again(db, owner):
    run, first = orchestrator.start_run(synthetic_goal(), budget=12, seed=3, batch_size=4)
    done = cancelling.cancel(first[0], owner, via="a test")
    assert done.status == CandidateStatus.CANCELLED and "cancelled by owner" in done.evidence.log
    assert claims.claim(first[0].pk) is False  # its task, arriving later, does nothing
    assert in_flight(run) == 4  # the freed slot was proposed again
    with pytest.raises(cancelling.CancelError, match="cancelled"):
        cancelling.cancel(first[0], owner)


def test_an_evaluated_candidate_or_one_of_an_ended_run_cannot_be_cancelled(db, owner):
    run, first = orchestrator.start_run(synthetic_goal(), budget=12, seed=3, batch_size=4)
    orchestrator.evaluate_candidate(first[0].pk, evaluate=synthetic_evaluate)
    with pytest.raises(cancelling.CancelError, match="only queued or running"):
        cancelling.cancel(first[0], owner)
    orchestrator.stop_run(run, owner)
    with pytest.raises(cancelling.CancelError, match="stopped"):
        cancelling.cancel(first[0], owner)


@pytest.mark.django_db(transaction=True)
def test_a_running_candidate_is_cancelled_while_its_sandbox_child_runs(owner):
    """The real evaluator, a kernel that spins 3 s a call: the cancel reaches the worker's
    wait loop through the database and the child is stopped."""
    from tests.kernels.test_pruning import SLOW_C

    goal = synthetic_goal(name="slow", workload="rmsnorm", shape_set="test-small", source=SLOW_C,
                          space={"parameters": [{"name": "SPIN_MS", "values": [3000]}], "restrictions": []})
    run, first = orchestrator.start_run(goal, budget=1, seed=1, batch_size=1)
    def work():  # a worker thread of its own, with its own database connection
        from django.db import connection

        try:
            orchestrator.evaluate_candidate(first[0].pk)
        finally:
            connection.close()

    worker = threading.Thread(target=work)
    worker.start()
    for _ in range(600):  # until the worker has claimed it
        if Candidate.objects.filter(pk=first[0].pk, status=CandidateStatus.RUNNING).exists():
            break
        time.sleep(0.05)
    cancelling.cancel(Candidate.objects.get(pk=first[0].pk), owner, via="a test")
    worker.join(120)
    assert not worker.is_alive()
    c = Candidate.objects.select_related("evidence").get(pk=first[0].pk)
    assert c.status == CandidateStatus.CANCELLED == c.evidence.status, c.evidence.log
    assert "cancelled" in c.evidence.log
