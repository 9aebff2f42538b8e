"""Transfer between goals: ranking weights, the forest's ensemble and the evidence it reads."""

import math

import numpy as np
import pytest

from swarm.agents import Observation, RelatedEvidence, make_agent
from swarm.agents.transfer import ranking_losses, ranking_weights
from tests.contracts.agent_contract import SPACE, landscape, view

ALL = [p for p in SPACE.sample(np.random.default_rng(0), 10_000) if landscape(p)[0] == "ok"]


def related(scale=3.0, invert=False, n=120, seed=1):
    """Another device's evaluations of the test landscape: ``scale`` times slower, or ranked
    the other way round (``invert``)."""
    rng = np.random.default_rng(seed)
    points = [ALL[int(i)] for i in rng.choice(len(ALL), size=min(n, len(ALL)), replace=False)]
    t = [landscape(p)[1]["latency_ms"] for p in points]
    scores = [1.0 / v if invert else scale * v for v in t]
    return RelatedEvidence("goal 9 (cpu-other, default)", tuple(points), tuple(scores))


def evaluated(points):
    return [Observation(i + 1, p, *landscape(p), landscape(p)[0] == "ok") for i, p in enumerate(points)]


def test_misranked_pairs_are_counted_with_the_draws_multiplicities():
    y = np.array([1.0, 2.0, 3.0])
    preds = np.array([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0], [1.0, 1.0, 1.0]])
    losses = ranking_losses(preds, y, np.array([[1.0, 1.0, 1.0], [2.0, 0.0, 1.0]]))
    assert losses[0].tolist() == [0.0, 3.0, 1.5]  # a constant ranks each pair half right
    assert losses[1].tolist() == [0.0, 2.0, 1.0]  # the pair (0, 2) drawn 2 x 1 times


def test_a_model_that_ranks_the_runs_evaluations_best_takes_the_weight():
    rng = np.random.default_rng(0)
    y = rng.normal(size=40)
    own = y + rng.normal(scale=1.0, size=40)  # the run's own model, noisy out of bag
    alike = 5 + 2 * y + rng.normal(scale=0.05, size=40)  # another device, other units, same ranking
    reversed_ = -y
    w = ranking_weights(np.stack([own, alike, reversed_]), y, rng)
    assert math.isclose(w.sum(), 1.0)
    assert w[1] > 0.9 and w[2] == 0.0
    # a model worse than the run's own at the 95th percentile is dropped, its share to the run
    w = ranking_weights(np.stack([y + rng.normal(scale=0.1, size=40), reversed_]), y, rng)
    assert w.tolist() == [1.0, 0.0]
    assert ranking_weights(np.stack([y[:2], y[:2]]), y[:2], rng).tolist() == [1.0, 0.0]


def test_the_forest_leans_on_a_device_that_ranks_alike_and_ignores_one_that_does_not():
    from dataclasses import replace

    history = evaluated(SPACE.sample(np.random.default_rng(5), 12))
    base = view(history, 3)
    alike = make_agent("forest", 4).propose(replace(base, related=(related(),)), 4)
    note = alike[0].rationale.split("transfer weights: ")[1]
    own_weight = float(note.split("this run ")[1].split(",")[0])
    assert own_weight < 0.5, note
    unlike = make_agent("forest", 4).propose(replace(base, related=(related(invert=True),)), 4)
    alone = make_agent("forest", 4).propose(base, 4)
    assert "transfer weights: this run 1.00" in unlike[0].rationale
    assert "transfer" not in alone[0].rationale


def test_evidence_of_an_alike_device_finds_the_optimum_sooner():
    from dataclasses import replace

    optimum = min(landscape(p)[1]["latency_ms"] for p in ALL)

    def evaluations_to_optimum(rel, seed):
        history = evaluated(SPACE.sample(np.random.default_rng(seed), 10))
        while len(history) < 60:
            if min(o.metrics["latency_ms"] for o in history if o.status == "ok") <= optimum:
                return len(history)
            v = replace(view(history, len(history)), related=rel)
            history += evaluated([p.params for p in make_agent("forest", seed * 100 + len(history)).propose(v, 2)])
            history = [Observation(i + 1, o.params, o.status, o.metrics, o.feasible) for i, o in enumerate(history)]
        return len(history)

    with_it = sorted(evaluations_to_optimum((related(),), s) for s in range(5))[2]
    without = sorted(evaluations_to_optimum((), s) for s in range(5))[2]
    assert with_it < without, (with_it, without)


@pytest.mark.django_db
def test_a_run_reads_the_other_goals_evidence_spread_over_their_ranking(monkeypatch):
    from swarm.learning import store
    from swarm.runs import orchestrator
    from swarm.runs.agent_view import forget, run_view
    from tests.swarm.synthetic import drive, synthetic_goal

    monkeypatch.setattr(store, "TRANSFER_ROWS", 5)
    earlier = synthetic_goal(name="device a", target="cpu-a")
    run, pending = orchestrator.start_run(earlier, budget=24, seed=2, batch_size=6)
    drive(run, pending)
    stranger = synthetic_goal(name="other space", target="cpu-q", space={"parameters": [{"name": "Q", "values": [1]}],
                                                                     "restrictions": []})
    new = synthetic_goal(name="device b", target="cpu-b")
    got = store.related_evidence(new)
    assert [g["source"] for g in got] == [f"goal {earlier.pk} (cpu-a, {earlier.shape_set})"]
    scores = got[0]["scores"]
    assert len(scores) == 5 and scores == sorted(scores)
    from swarm.models import Candidate

    ok = [c.evidence.metrics["latency_ms"] for c in Candidate.objects.filter(goal=earlier, status="ok")
          .select_related("evidence")]
    assert scores[0] == min(ok) and scores[-1] == max(ok)  # the best and the worst, and between
    assert store.related_evidence(stranger) == []
    run_b, _ = orchestrator.start_run(new, budget=8, seed=3, batch_size=4)
    forget()
    v = run_view(run_b)
    assert [r.source for r in v.related] == [got[0]["source"]]
    assert list(v.related[0].scores) == scores and all(SPACE.contains(p) for p in v.related[0].points)
    # what device a evaluates after run B started is not read: every process sees the same
    more, pending = orchestrator.start_run(earlier, budget=12, seed=5, batch_size=6)
    drive(more, pending)
    assert store.related_evidence(new)[0]["scores"] != scores
    forget()
    assert run_view(run_b).related == v.related


def test_with_other_goals_evidence_the_forest_models_from_the_third_evaluation():
    from dataclasses import replace

    from swarm.agents.surrogate import RELATED_STARTUP

    history = evaluated([p for p in SPACE.sample(np.random.default_rng(7), 20) if landscape(p)[0] == "ok"][:RELATED_STARTUP])
    with_it = make_agent("forest", 4).propose(replace(view(history, 2), related=(related(),)), 4)
    alone = make_agent("forest", 4).propose(view(history, 2), 4)
    assert all(p.rationale.startswith("forest predicts") and "transfer weights" in p.rationale for p in with_it)
    assert not any(p.rationale for p in alone)  # below its startup: random points
    gp = make_agent("gp", 4).propose(replace(view(history, 2), related=(related(),)), 4)
    assert not any(p.rationale for p in gp)  # the GP does not transfer: its startup holds


def test_an_inverted_device_gets_no_weight_even_before_the_forest_can_split():
    from dataclasses import replace

    # 3-5 points: with leaves of 3 a tree cannot split, and its out-of-bag mean would rank the
    # points backwards; a device that ranks them otherwise must still not win the weight
    points = [p for p in SPACE.sample(np.random.default_rng(11), 40) if landscape(p)[0] == "ok"]
    for n in (3, 4, 5):
        for seed in range(4):
            v = replace(view(evaluated(points[:n]), 2), related=(related(invert=True),))
            proposals = make_agent("forest", seed).propose(v, 2)
            assert "transfer weights: this run 1.00" in proposals[0].rationale, (n, seed, proposals[0].rationale)


def test_a_glitched_value_in_an_other_goal_leaves_it_out_instead_of_failing_the_forest():
    from dataclasses import replace

    glitched = related()
    glitched = RelatedEvidence(glitched.source, glitched.points, (-1e17, *glitched.scores[1:]))
    history = evaluated(SPACE.sample(np.random.default_rng(5), 12))
    proposals = make_agent("forest", 4).propose(replace(view(history, 3), related=(glitched,)), 4)
    assert len(proposals) == 4 and all(p.rationale.startswith("forest predicts") for p in proposals)
    assert "transfer" not in proposals[0].rationale


def test_the_startup_is_shortened_only_by_usable_evidence_and_never_against_an_explicit_setting():
    from dataclasses import replace

    from swarm.agents.surrogate import MIN_RELATED

    history = evaluated([p for p in SPACE.sample(np.random.default_rng(7), 20) if landscape(p)[0] == "ok"][:4])
    few = related(n=MIN_RELATED - 1)
    assert not any(p.rationale for p in make_agent("forest", 4).propose(replace(view(history, 2), related=(few,)), 4))
    explicit = make_agent("forest", 4, {"startup": 10}).propose(replace(view(history, 2), related=(related(),)), 4)
    assert not any(p.rationale for p in explicit)
