import numpy as np
import pytest
from django.test import override_settings

from kernels import DesignSpace
from swarm.learning.insights import best_per_shape, failure_rules, parameter_importance
from swarm.models import Insight
from swarm.runs import orchestrator
from tests.contracts.agent_contract import SPACE, landscape
from tests.swarm.synthetic import drive, synthetic_goal


def sample_rows(n=150, seed=0):
    points = SPACE.sample(np.random.default_rng(seed), n)
    return [(p, *landscape(p)) for p in points]


def test_the_known_failure_rule_is_learned_as_a_restriction():
    rows = sample_rows()
    rules = failure_rules(SPACE, [(p, s) for p, s, _ in rows])
    assert rules, "no rule learned"
    top = rules[0]
    assert top["status"] == "runtime_error" and "BX*BY > " in top["rule"] and top["precision"] >= 0.9
    # the suggested restriction is valid and excludes exactly failing points in the sample
    space = DesignSpace.from_dict({**SPACE.to_dict(), "restrictions": [*SPACE.restrictions, top["restriction"]]})
    kept = [s for p, s, _ in rows if space.contains(p)]
    assert kept and all(s == "ok" for s in kept)


def test_importance_ranks_the_parameters_that_matter():
    rows = [(p, m["latency_ms"]) for p, s, m in sample_rows(200, 1) if s == "ok"]
    imp = parameter_importance(SPACE, rows)
    assert set(imp) == {"BX", "BY", "TILE", "UNROLL"}
    assert abs(sum(imp.values()) - 1) < 1e-6


def test_best_per_shape_reads_per_shape_latencies():
    best = best_per_shape([({"A": 1}, {"latency_ms[m=1]": 2.0, "latency_ms[m=64]": 9.0}),
                           ({"A": 2}, {"latency_ms[m=1]": 3.0, "latency_ms[m=64]": 5.0})])
    assert best == {"m=1": {"params": {"A": 1}, "latency_ms": 2.0}, "m=64": {"params": {"A": 2}, "latency_ms": 5.0}}


@pytest.mark.django_db
def test_a_run_stores_insights_and_the_next_run_warm_starts_from_them():
    goal = synthetic_goal()
    run, pending = orchestrator.start_run(goal, budget=60, seed=2, batch_size=10)
    drive(run, pending)
    kinds = set(Insight.objects.filter(workload="rmsnorm", target="cpu-x86_64").values_list("kind", flat=True))
    assert kinds == {"importance", "failure_rule", "best_config"}
    best = Insight.objects.get(kind="best_config")
    # another goal on the same workload and another shape set starts from the best configuration
    other = synthetic_goal(name="other", shape_set="other-shapes")
    run2, first = orchestrator.start_run(other, budget=10, seed=3, batch_size=5)
    assert run2.warm_start["configs"][0] == best.data["params"]
    assert best.data["params"] in [c.params for c in first]


@pytest.mark.django_db
def test_what_a_run_finds_in_its_last_generation_is_learned():
    from swarm.models import Candidate

    goal = synthetic_goal()
    # 7 generations of 4: the schedule learns after 1, 2, 3, 4 and 6, not after 7, the last
    with override_settings(SWARM_ENDGAME_SHARE=0):  # this seed's run, without an endgame, finds its best in generation 7
        run, pending = orchestrator.start_run(goal, budget=28, seed=10, batch_size=4)
        drive(run, pending)
    ok = Candidate.objects.filter(run=run, status="ok").select_related("evidence")
    best = min(ok, key=lambda c: (c.evidence.metrics["latency_ms"], c.pk))
    assert best.generation == 7
    insight = Insight.objects.get(kind="best_config", workload=goal.workload, target=goal.target)
    assert insight.data["params"] == best.params and insight.data["latency_ms"] == best.evidence.metrics["latency_ms"]


@pytest.mark.django_db
def test_a_new_goal_starts_from_the_best_few_configurations_of_every_other_goal_of_its_workload():
    from swarm.learning.store import WARM_START_PER_GOAL, warm_start
    from swarm.models import Candidate

    earlier = [synthetic_goal(name=f"device {i}", target=f"cpu-{i}") for i in range(2)]
    for i, goal in enumerate(earlier):
        run, pending = orchestrator.start_run(goal, budget=30, seed=10 + i, batch_size=6)
        drive(run, pending)
    Insight.objects.all().delete()  # the evidence alone, not only the best-config insights
    new = synthetic_goal(name="new device", target="cpu-new")
    got = warm_start(new)

    def best(goal):
        ok = Candidate.objects.filter(goal=goal, status="ok").select_related("evidence")
        return [c.params for c in sorted(ok, key=lambda c: (c.evidence.metrics["latency_ms"], c.pk))][:WARM_START_PER_GOAL]

    a, b = best(earlier[0]), best(earlier[1])
    assert len(a) == len(b) == WARM_START_PER_GOAL
    # in turns: each goal's best before any goal's second best (a point both found, once)

    def turns(x, y):
        out = []
        for p in (q for pair in zip(x, y) for q in pair):
            if p not in out:
                out.append(p)
        return out

    assert got["configs"] in (turns(a, b), turns(b, a))
    assert {s["target"] for s in got["from"]} <= {"cpu-0", "cpu-1"} and all("candidate" in s for s in got["from"])
    # a run of the new goal proposes them first
    run, first = orchestrator.start_run(new, budget=10, seed=3, batch_size=4)
    k = min(4, len(got["configs"]))
    assert [c.params for c in first][:k] == got["configs"][:k]


def _evaluated(goal, params, latency_ms):
    """A candidate of ``goal`` with ``params`` (stored as given) and evidence ``latency_ms``."""
    from swarm.models import Candidate, Evidence, Run

    run = goal.runs.first() or Run.objects.create(goal=goal, budget=10, seed=1, space=goal.space, constraints=[])
    c = Candidate.objects.create(goal=goal, run=run, generation=1, agent="test", params=params, source="/* */",
                                 content_hash=f"h{Candidate.objects.count()}", status="ok")
    Evidence.objects.create(candidate=c, status="ok", metrics={"latency_ms": latency_ms} if latency_ms is not None else [1])
    return c


@pytest.mark.django_db
def test_warm_start_reads_each_other_goal_and_skips_what_is_not_a_point_of_the_space(monkeypatch):
    from swarm.learning import store

    monkeypatch.setattr(store, "MAX_ROWS", 5)  # per goal: a big newer run does not hide an older goal
    best = {"BX": 128, "BY": 4, "TILE": 2, "UNROLL": 1}
    old = synthetic_goal(name="old device", target="cpu-old")
    _evaluated(old, {**best, "BX": 128.0}, 0.5)  # stored as a float: proposed with the space's own value
    big = synthetic_goal(name="big run", target="cpu-big")
    for i in range(8):
        _evaluated(big, {**best, "UNROLL": 0, "BY": [1, 2, 4, 8, 16, 32, 1, 2][i]}, 2.0 + i)
    stranger = synthetic_goal(name="other space", target="cpu-q", space={"parameters": [{"name": "Q", "values": [1]}],
                                                                     "restrictions": []})
    for _ in range(8):
        _evaluated(stranger, {"Q": 1}, 0.1)
    broken = synthetic_goal(name="broken rows", target="cpu-broken")
    for params, latency in (([["BX", 16]], 0.1), (5, 0.1), (best, True), (best, None), ({**best, "BX": 3}, 0.1)):
        _evaluated(broken, params, latency)
    new = synthetic_goal(name="new", target="cpu-new")
    got = store.warm_start(new)
    # in turns, newest goal first: the big run's best, then the old device's
    assert got["configs"][1] == best and isinstance(got["configs"][1]["BX"], int)
    assert {s["target"] for s in got["from"]} == {"cpu-old", "cpu-big"}
    assert len(got["configs"]) == 1 + store.WARM_START_PER_GOAL


@pytest.mark.django_db
def test_insights_fill_at_most_half_of_the_warm_start():
    from swarm.learning import store

    space_points = SPACE.sample(np.random.default_rng(4), 12)
    for i, p in enumerate(space_points[:10]):
        Insight.objects.create(kind=Insight.Kind.BEST_CONFIG, workload="rmsnorm", target=f"t{i}", shape_set="s",
                               data={"shape": "a", "params": p, "latency_ms": 1.0 + i})
    other = synthetic_goal(name="other", target="cpu-other")
    _evaluated(other, space_points[11], 0.1)
    got = store.warm_start(synthetic_goal(name="new", target="cpu-new"))
    assert sum("insight" in s for s in got["from"]) == store.WARM_START_CONFIGS // 2
    assert space_points[11] in got["configs"]
