"""The guard's timed calls see input contents no earlier call saw (engines._fresh), and the
inputs are as generated again after each call."""

import numpy as np
import pytest

from engines._fresh import Rotation, salt, unsalt
from engines._timing import FreshScenario
from engines.registry import make_engine


def test_salt_swaps_two_different_values_of_one_row_and_unsalt_restores():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 8)).astype(np.float32)
    orig = x.copy()
    swaps = salt({"x": x}, np.random.default_rng(1))
    (i, j), = swaps.values()
    assert i // 8 == j // 8 and x.reshape(-1)[i] != orig.reshape(-1)[i]
    assert np.array_equal(np.sort(x, axis=1), np.sort(orig, axis=1))  # row contents kept
    unsalt({"x": x}, swaps)
    assert np.array_equal(x, orig)


def test_a_rotation_never_repeats_contents_over_many_calls():
    sets = [{"x": np.random.default_rng(s).standard_normal((24, 256)).astype(np.float32)} for s in range(3)]
    originals = [s["x"].copy() for s in sets]
    rot = Rotation(sets, seed=5)
    seen = set()
    for _ in range(300):
        seen.add(rot.before()["x"].tobytes())
        rot.after()
    assert len(seen) >= 298  # a cache of contents hits at most on chance repeats
    assert all(np.array_equal(s["x"], o) for s, o in zip(sets, originals))


@pytest.mark.parametrize("engine,scenario", [("llama-layer", "prefill"), ("llama-layer", "decode"),
                                             ("kda-layer", "decode")])
def test_a_fresh_scenario_runs_and_restores_its_inputs(engine, scenario):
    eng = make_engine(engine, config="small")
    plan = eng.plan({})
    fs = FreshScenario(eng, plan, scenario, sets=3, seed=0)
    xs = [x.copy() for x in fs.xs]
    used = set()
    for _ in range(6):
        fs.before()
        used.add(fs.rotation.cur)
        fs()
        fs.after()
    assert used == {0, 1, 2}
    assert all(np.array_equal(a, b) for a, b in zip(fs.xs, xs))


def test_fresh_scenario_rejects_unknown_scenarios():
    eng = make_engine("llama-layer", config="small")
    with pytest.raises(KeyError):
        FreshScenario(eng, eng.plan({}), "nope")
    with pytest.raises(ValueError):
        FreshScenario(eng, eng.plan({}), "prefill", sets=0)


def test_minilm_fresh_scenarios_change_the_sentences_each_call():
    eng = make_engine("minilm")
    plan = eng.plan({})
    for scenario, n in (("batch-1", 1), ("batch-32", 32)):
        fs = FreshScenario(eng, plan, scenario, seed=0)
        seen = set()
        for _ in range(5):
            fs.before()
            assert len(fs.texts) == n
            seen.add(tuple(fs.texts))
        assert len(seen) == 5
    fs()  # runs end to end
