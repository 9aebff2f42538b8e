"""The enumerated index of a design space that model-based agents score points from."""

import numpy as np

from kernels import DesignSpace
from swarm.agents import Observation, make_agent
from swarm.agents.space_index import index_of
from tests.contracts.agent_contract import SPACE, search, view


def test_the_index_holds_exactly_the_valid_points_in_order():
    index = index_of(SPACE)
    valid = list(SPACE.iter_valid())
    assert len(index) == len(valid) == sum(1 for p in valid if p["BX"] * p["BY"] <= 1024)
    assert [index.point(i) for i in range(len(index))] == valid
    assert index.values.shape == (len(valid), 4) and index.values.dtype == np.float64
    assert index.values[3].tolist() == [float(valid[3][k]) for k in SPACE.names]
    assert index.row(valid[7]) == 7
    assert index.row({"BX": 256, "BY": 16, "TILE": 1, "UNROLL": 0}) is None  # restricted away
    assert index.row({"BX": 16}) is None  # not a full point


def test_seen_points_are_masked_by_their_keys():
    index = index_of(SPACE)
    valid = list(SPACE.iter_valid())
    mask = index.seen_mask([SPACE.point_key(valid[0]), SPACE.point_key(valid[5]), "#42"])
    assert mask.dtype == bool and np.flatnonzero(mask).tolist() == [0, 5]


def test_rows_within_a_distance_are_the_valid_neighbours_of_a_point():
    from swarm.agents.surrogate import _neighbours

    index = index_of(SPACE)
    v = view([])
    for row in (0, 7, len(index) - 1):
        for distance in (1, 2):
            expected = {index.row(p) for p in _neighbours(v, index.point(row), distance)} - {None}
            assert index.within(row, distance).tolist() == sorted(expected)
            assert row not in expected


def test_the_index_is_built_once_per_space():
    assert index_of(SPACE) is index_of(DesignSpace.from_dict(SPACE.to_dict()))


def test_a_space_too_large_to_enumerate_has_no_index():
    big = DesignSpace.from_dict({"parameters": [{"name": f"P{i}", "values": list(range(8))} for i in range(7)]})
    assert big.cartesian_size() == 8**7
    assert index_of(big) is None


def test_the_forest_agent_also_searches_a_space_too_large_to_enumerate():
    big = DesignSpace.from_dict({
        "parameters": [{"name": f"P{i}", "values": list(range(8))} for i in range(7)],
        "restrictions": ["P0 + P1 <= 12"],
    })

    def latency(p):
        return 1.0 + sum((p[f"P{i}"] - 3) ** 2 for i in range(7))

    rng = np.random.default_rng(0)
    history = [Observation(i, p, "ok", {"latency_ms": latency(p)}, True) for i, p in enumerate(big.sample(rng, 30))]
    v = view([], 2)
    v = type(v)(**{**v.__dict__, "space": big, "history": tuple(history),
                   "seen": frozenset(big.point_key(o.params) for o in history)})
    proposals = make_agent("forest", 3).propose(v, 6)
    keys = [big.point_key(p.params) for p in proposals]
    assert len(proposals) == 6 and len(set(keys)) == 6
    assert not set(keys) & v.seen
    assert all(big.contains(p.params) and p.rationale.startswith("forest predicts") for p in proposals)


def test_the_forest_agent_finds_the_optimum_of_the_contract_landscape():
    # 80 of the space's 176 valid points, for five seeds
    for seed in range(5):
        history = search("forest", {}, 80, 8, seed=seed)
        best = min((o for o in history if o.status == "ok"), key=lambda o: o.metrics["latency_ms"])
        assert best.params == {"BX": 128, "BY": 4, "TILE": 4, "UNROLL": 1}, seed


def test_spaces_that_differ_only_in_how_values_are_spelled_get_their_own_index():
    def space(values):
        return DesignSpace.from_dict({"parameters": [{"name": "BLOCK", "values": values}, {"name": "B", "values": [1, 2]}]})

    floats, ints = space([32.0, 64.0]), space([32, 64])
    assert floats == ints  # dataclass equality: 32 == 32.0, but "#define BLOCK 32.0" is not "32"
    assert index_of(floats) is not index_of(ints)
    assert index_of(ints).point(0) == {"BLOCK": 32, "B": 1} and type(index_of(ints).point(0)["BLOCK"]) is int
    seen = [ints.point_key(p) for p in ints.iter_valid()]
    assert index_of(ints).seen_mask(seen).all()


def _forest_view(space, n=12):
    rng = np.random.default_rng(0)
    history = [Observation(i, p, "ok", {"latency_ms": 1.0 + i % 5}, True) for i, p in enumerate(space.sample(rng, n))]
    v = view([], 2)
    return type(v)(**{**v.__dict__, "space": space, "history": tuple(history),
                      "seen": frozenset(space.point_key(o.params) for o in history)})


def test_the_forest_agent_ignores_parameters_with_one_value():
    space = DesignSpace.from_dict({"parameters": [{"name": "BIG", "values": [10**400]}, {"name": "B", "values": list(range(1, 30))}]})
    proposals = make_agent("forest", 1).propose(_forest_view(space), 3)
    assert len(proposals) == 3 and all(p.rationale.startswith("forest predicts") for p in proposals)


def test_with_no_parameter_left_to_vary_the_forest_agent_proposes_what_is_left():
    wide = DesignSpace.from_dict({"parameters": [{"name": "A", "values": [1, 2]}, {"name": "B", "values": list(range(1, 30))}]})
    narrowed = DesignSpace.from_dict({"parameters": [{"name": "A", "values": [1]}, {"name": "B", "values": [7]}]})
    v = _forest_view(wide, 14)
    left = narrowed.point_key({"A": 1, "B": 7})
    # Both cases, whatever the sample drew: the one point left unseen, then already seen.
    unseen = type(v)(**{**v.__dict__, "space": narrowed, "seen": v.seen - {left}})
    assert [p.params for p in make_agent("forest", 1).propose(unseen, 3)] == [{"A": 1, "B": 7}]
    seen = type(v)(**{**v.__dict__, "space": narrowed, "seen": v.seen | {left}})
    assert make_agent("forest", 1).propose(seen, 3) == []


def test_neighbours_are_exact_for_integers_that_floats_cannot_tell_apart():
    big = DesignSpace.from_dict({"parameters": [{"name": "A", "values": [2**53, 2**53 + 1, 3]},
                                                {"name": "B", "values": [0, 1]}]})
    index = index_of(big)
    row = index.row({"A": 2**53, "B": 0})
    one_change = {index.row(p) for p in ({"A": 2**53 + 1, "B": 0}, {"A": 3, "B": 0}, {"A": 2**53, "B": 1})}
    assert set(index.within(row, 1).tolist()) == one_change
