"""The orchestrator end to end with the real sandboxed evaluator, driven in-process."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from swarm.models import AgentRecord, Candidate, CandidateStatus, Evidence, Generation, Run
from swarm.runs import claims, orchestrator, summaries


def drive(run, pending):
    while pending:
        for c in pending:
            orchestrator.evaluate_candidate(c.pk)
        pending = orchestrator.advance(run.pk)


@pytest.mark.django_db
def test_a_run_evaluates_its_budget_and_finishes(small_goal):
    run, first = orchestrator.start_run(small_goal, budget=6, seed=1, batch_size=4)
    assert len(first) == 4 and all(c.status == CandidateStatus.QUEUED for c in first)
    drive(run, first)
    run.refresh_from_db()
    assert run.state == Run.State.FINISHED
    assert run.generation == 2
    cands = list(run.candidates.select_related("evidence"))
    assert len(cands) == 6
    assert all(c.evidence.status == c.status for c in cands)
    ok = [c for c in cands if c.status == CandidateStatus.OK]
    assert ok, [c.evidence.log for c in cands]
    assert all(c.evidence.metrics["latency_ms"] > 0 for c in ok)
    summary = summaries.run_summary(run)
    assert summary["evaluated"] == 6
    assert summary["best"]["metrics"]["latency_ms"] == min(c.evidence.metrics["latency_ms"] for c in ok
                                                           if c.evidence.metrics["max_rel_error"] <= 1e-4)


@pytest.mark.django_db
def test_a_second_run_never_proposes_a_kernel_the_goal_already_has(small_goal):
    run1, pending = orchestrator.start_run(small_goal, budget=4, seed=7)
    drive(run1, pending)
    run2, pending = orchestrator.start_run(small_goal, budget=4, seed=7)
    drive(run2, pending)
    hashes = list(Candidate.objects.filter(goal=small_goal).values_list("content_hash", flat=True))
    assert len(hashes) == 8 == len(set(hashes))


@pytest.mark.django_db
def test_a_candidate_is_claimed_once(small_goal):
    run, pending = orchestrator.start_run(small_goal, budget=1, seed=3)
    assert claims.claim(pending[0].pk) is True
    assert claims.claim(pending[0].pk) is False
    # a redelivered task for a claimed candidate does nothing
    assert orchestrator.evaluate_candidate(pending[0].pk) is None


@pytest.mark.django_db
def test_evidence_is_final(small_goal):
    run, pending = orchestrator.start_run(small_goal, budget=1, seed=3)
    drive(run, pending)
    evidence = Evidence.objects.get()
    evidence.log = "tampered"
    with pytest.raises(RuntimeError, match="final"):
        evidence.save()


@pytest.mark.django_db
def test_an_evaluator_crash_is_recorded_not_lost(small_goal):
    run, pending = orchestrator.start_run(small_goal, budget=1, seed=3)

    def broken(*args, **kwargs):
        raise OSError("disk full")

    c = orchestrator.evaluate_candidate(pending[0].pk, evaluate=broken)
    assert c.status == CandidateStatus.RUNTIME_ERROR
    assert "disk full" in c.evidence.log


@pytest.mark.django_db
def test_stopping_a_run_cancels_its_queued_candidates(small_goal, owner):
    run, pending = orchestrator.start_run(small_goal, budget=8, seed=3)
    orchestrator.stop_run(run, owner)
    run.refresh_from_db()
    assert run.state == Run.State.STOPPED
    assert not run.candidates.exists()
    assert orchestrator.advance(run.pk) == []


@pytest.mark.django_db
def test_budget_must_be_positive(small_goal):
    with pytest.raises(ValueError, match="budget"):
        orchestrator.start_run(small_goal, budget=0)


@pytest.mark.django_db
def test_an_identical_kernel_in_another_goal_reuses_its_evidence_instead_of_re_benchmarking(monkeypatch):
    from swarm.learning import store
    from tests.swarm.synthetic import drive, synthetic_evaluate, synthetic_goal

    calls = []

    def counting(*args, **kwargs):
        calls.append(args[2])
        return synthetic_evaluate(*args, **kwargs)

    a = synthetic_goal(name="a")
    run_a, pending = orchestrator.start_run(a, budget=12, seed=9, batch_size=4)
    drive(run_a, pending, evaluate=counting)
    assert len(calls) == 12
    monkeypatch.setattr(store, "warm_start", lambda goal: {})  # run B proposes exactly what run A did
    monkeypatch.setattr(store, "related_evidence", lambda goal, before=None: [])  # nor does its model transfer from A
    b = synthetic_goal(name="b")
    run_b, pending = orchestrator.start_run(b, budget=12, seed=9, batch_size=4)
    drive(run_b, pending, evaluate=counting)
    run_b.refresh_from_db()
    assert len(calls) == 12, "identical kernels were benchmarked again"
    reused = list(Candidate.objects.filter(run=run_b).select_related("evidence", "reused_from"))
    assert len(reused) == 12 and all(c.reused_from and c.reused_from.goal_id == a.pk for c in reused)
    assert all(c.evidence.metrics == c.reused_from.evidence.metrics and c.status == c.reused_from.status for c in reused)
    assert run_b.state == Run.State.FINISHED


@pytest.mark.django_db
@pytest.mark.parametrize("reads_context", [False, True])
def test_sources_logs_and_insights_reach_only_agents_that_read_them(monkeypatch, reads_context):
    from swarm.agents import AGENTS
    from swarm.agents.random_search import RandomAgent
    from tests.swarm.synthetic import drive, synthetic_goal

    views = []

    class Recording(RandomAgent):
        kind = "recording"

        def propose(self, view, n):
            views.append(view)
            return super().propose(view, n)

    Recording.reads_context = reads_context
    monkeypatch.setitem(AGENTS, "recording", Recording)
    run, pending = orchestrator.start_run(synthetic_goal(), budget=24, seed=4, batch_size=4,
                                          agents=[{"name": "r", "kind": "recording"}])
    drive(run, pending)
    last = views[-1]
    assert len(last.history) == 20
    best = last.ranked()[0]
    if reads_context:
        assert best.source.startswith("#define") and best.source.endswith("/* synthetic */")
        assert {i["kind"] for i in last.insights} >= {"best_config"}
    else:
        assert all(o.source == "" and o.log == "" for o in last.history)
        assert last.insights == ()
    assert last.run == run.identity and last.template == ("/* synthetic */" if reads_context else "")


@pytest.mark.django_db
@pytest.mark.parametrize("kind, settings, named", [
    ("forest", {"leaf": 0}, "leaf"), ("forest", {"max_features": 1.5}, "max_features"),
    ("forest", {"max_features": "abc"}, "max_features"), ("forest", {"trees": 0}, "trees"),
    ("gp", {"nu": 2.0}, "nu"), ("gp", {"tune_points": 1}, "tune_points"), ("gp", {"retune_growth": 1}, "retune_growth"),
    ("forest", {"pool": True}, "pool"), ("forest", {"failure_quantile": float("nan")}, "failure_quantile"),
    ("evolutionary", {"population": 0}, "population"), ("evolutionary", {"jump_rate": 2}, "jump_rate"),
    ("evolutionary", {"tournament": None}, "tournament"), ("local", {"kick": 0}, "kick"),
    ("local", {"bases": float("inf")}, "bases"), ("optuna", {"failure_penalty": -1}, "failure_penalty"),
    ("llm", {"temperature": 5}, "temperature"), ("llm", {"max_attempts": 0}, "max_attempts"),
    ("llm", {"backoff_s": float("inf")}, "backoff_s"), ("llm", {"timeout_s": "soon"}, "timeout_s"),
    ("forest", {"failure_quantile": -3}, "failure_quantile"), ("forest", {"failure_quantile": 5000}, "failure_quantile"),
    ("gp", {"tune_points": 2.9}, "tune_points"), ("gp", {"retune_growth": 1e308}, "retune_growth"),
    ("llm", {"backoff_s": 1e300}, "backoff_s"), ("llm", {"max_attempts": 1030}, "max_attempts"),
    ("llm", {"price_prompt_per_mtok": 1e306}, "price_prompt_per_mtok"),
])
def test_an_agent_with_bad_settings_is_refused_when_the_run_starts(kind, settings, named):
    from tests.swarm.synthetic import synthetic_goal

    goal = synthetic_goal()
    with pytest.raises(ValueError, match=f"{kind} agent: {named} must be (a number|an integer) "):
        orchestrator.start_run(goal, budget=8, agents=[{"name": "a", "kind": kind, "settings": settings}])
    assert not Run.objects.filter(goal=goal).exists()


@pytest.mark.django_db
@pytest.mark.parametrize("kind, settings, message", [
    ("optuna", {"sampler": "cmaes"}, "optuna agent: sampler must be 'tpe', 'nsga2' or 'auto', not 'cmaes'"),
    ("llm", {"base_url": "localhost:8000/v1"}, "llm agent: base_url must be an http:// or https:// URL"),
    ("llm", {"model": 4}, "llm agent: model must be a model name, not 4"),
    ("forest", {"pairs": "false"}, "forest agent: pairs must be true or false, not 'false'"),
    ("evolutionary", {"populaton": 8}, "evolutionary agent has no setting 'populaton'; its settings: crossover_rate, "
                                       "elite, jump_rate, mutation_rate, population, tournament"),
])
def test_an_agent_with_a_bad_or_unknown_setting_is_refused_when_the_run_starts(kind, settings, message):
    from tests.swarm.synthetic import synthetic_goal

    goal = synthetic_goal()
    with pytest.raises(ValueError, match=re.escape(message)):
        orchestrator.start_run(goal, budget=8, agents=[{"name": "a", "kind": kind, "settings": settings}])
    assert not Run.objects.filter(goal=goal).exists()


@pytest.mark.django_db
@pytest.mark.parametrize("entry", [{"name": "a", "kind": "forest", "settings": [1, 2]}, {"name": "a"},
                                   {"name": ["a"], "kind": "forest"}, {"kind": ["forest"]}, "forest"])
def test_a_malformed_agent_entry_is_refused_when_the_run_starts(entry):
    from tests.swarm.synthetic import synthetic_goal

    goal = synthetic_goal()
    with pytest.raises(ValueError, match="an agent is"):
        orchestrator.start_run(goal, budget=8, agents=[entry])
    assert not Run.objects.filter(goal=goal).exists()


@pytest.mark.django_db
def test_an_agent_that_raises_is_recorded_and_the_others_go_on(monkeypatch):
    from swarm.agents.surrogate import ForestAgent
    from swarm.models import ProposalFailure
    from tests.swarm.synthetic import drive, synthetic_goal

    def boom(self, view, n):
        raise RuntimeError("boom")

    monkeypatch.setattr(ForestAgent, "propose", boom)
    run, pending = orchestrator.start_run(synthetic_goal(), budget=12, seed=1, batch_size=4, agents=[
        {"name": "f", "kind": "forest", "settings": {}}, {"name": "r", "kind": "random", "settings": {}}])
    drive(run, pending)
    run.refresh_from_db()
    # Never stuck "running", never short: the failing agent's slots go to the other agent.
    assert run.state == Run.State.FINISHED and run.candidates.count() == 12
    assert set(run.candidates.values_list("agent", flat=True)) == {"r"}
    failures = ProposalFailure.objects.filter(run=run, agent="f")
    assert failures.exists() and all(f.error == "the agent failed: RuntimeError: boom" for f in failures)
    agents = {a.name: a for a in run.agents.all()}
    assert agents["f"].failed_proposals == failures.count() and agents["r"].evaluations == 12
    # Each generation's shares are the slots filled: all four by the random agent.
    assert [g.shares for g in Generation.objects.filter(run=run).order_by("number")] == [{"f": 0, "r": 4}] * 3

    # With every agent failing, the run fails with the agents' errors instead of staying "running".
    run2, pending2 = orchestrator.start_run(synthetic_goal(name="other"), budget=8, seed=1, agents=[
        {"name": "f", "kind": "forest", "settings": {"startup": 0}}])
    drive(run2, pending2)
    run2.refresh_from_db()
    assert run2.state == Run.State.FAILED and run2.end_kind == "failed"
    assert "no agent proposed a new candidate" in run2.end_reason and "f: the agent failed: RuntimeError: boom" in run2.end_reason


@pytest.mark.django_db
def test_an_agent_that_proposes_more_than_asked_does_not_overspend_the_budget(monkeypatch):
    from swarm.agents.random_search import RandomAgent
    from tests.swarm.synthetic import drive, synthetic_goal

    real = RandomAgent.propose
    monkeypatch.setattr(RandomAgent, "propose", lambda self, view, n: real(self, view, n + 3))
    run, pending = orchestrator.start_run(synthetic_goal(), budget=10, seed=1, batch_size=4, agents=[
        {"name": "g", "kind": "random", "settings": {}}])
    drive(run, pending)
    assert run.candidates.count() == 10


@pytest.mark.django_db
def test_a_run_that_cannot_advance_does_not_stop_the_sweep_of_the_others(monkeypatch):
    from tests.swarm.synthetic import synthetic_goal

    broken, _ = orchestrator.start_run(synthetic_goal(), budget=8, seed=1, agents=[{"name": "r", "kind": "random"}])
    healthy, _ = orchestrator.start_run(synthetic_goal(name="other"), budget=8, seed=2, agents=[{"name": "r", "kind": "random"}])
    real = orchestrator.advance

    def advance(run_id, *args, **kwargs):
        if run_id == broken.pk:
            raise RuntimeError("database hiccup")
        return real(run_id, *args, **kwargs)

    monkeypatch.setattr(orchestrator, "advance", advance)
    to_dispatch, queued = orchestrator.sweep()
    assert {c.run_id for c in queued} == {broken.pk, healthy.pk}  # both runs' queued work is still found


@pytest.mark.django_db
def test_settings_given_as_numeric_strings_are_accepted():
    from tests.swarm.synthetic import drive, synthetic_goal

    run, pending = orchestrator.start_run(synthetic_goal(), budget=16, seed=2, agents=[
        {"name": "f", "kind": "forest", "settings": {"leaf": "2", "max_features": "0.5", "startup": 4}},
        {"name": "e", "kind": "evolutionary", "settings": {"population": "8", "jump_rate": "1"}},
    ])
    drive(run, pending)
    run.refresh_from_db()
    assert run.state == Run.State.FINISHED and run.candidates.count() == 16


@pytest.mark.django_db
def test_a_sweep_during_start_run_leaves_the_first_generation_to_start_run(monkeypatch):
    """The sweeper's pass can fall between creating a run and proposing its first generation;
    it must not propose that generation itself (start_run would then return nothing)."""
    from tests.swarm.synthetic import synthetic_goal

    real, swept = orchestrator._next_candidates, []

    def racing(run_id, after):
        if not swept:
            swept.append(orchestrator.sweep())
        return real(run_id, after)

    monkeypatch.setattr(orchestrator, "_next_candidates", racing)
    run, pending = orchestrator.start_run(synthetic_goal(), budget=8, seed=1, batch_size=4,
                                          agents=[{"name": "r", "kind": "random"}])
    assert swept == [([], [])] and len(pending) == 4 and run.candidates.count() == 4


@pytest.mark.django_db
def test_a_run_left_half_started_is_advanced_by_the_sweep():
    from tests.swarm.synthetic import synthetic_goal

    goal = synthetic_goal()
    run = Run.objects.create(goal=goal, budget=8, batch_size=4, seed=1, space=goal.space, constraints=goal.constraints)
    AgentRecord.objects.create(run=run, name="r", kind="random", settings={})
    assert orchestrator.sweep() == ([], [])  # being started: left to start_run
    Run.objects.filter(pk=run.pk).update(started_at=timezone.now() - orchestrator.START_GRACE - timedelta(seconds=1))
    to_dispatch, _ = orchestrator.sweep()
    assert len(to_dispatch) == 4 and {c.run_id for c in to_dispatch} == {run.pk}
