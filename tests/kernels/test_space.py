
import json

import numpy as np
import pytest

from kernels import DesignSpace, Parameter, SpaceError, default_space, point_key


def space(restrictions=(), **params):
    return DesignSpace(tuple(Parameter(k, tuple(v)) for k, v in params.items()), tuple(restrictions))


def test_it_round_trips_through_dict():
    d = {"parameters": [{"name": "UNROLL", "values": [1, 2, 4]}, {"name": "vec", "values": [4, 8]}],
         "restrictions": ["UNROLL * vec <= 16"]}
    s = DesignSpace.from_dict(d)
    assert s.to_dict() == d
    assert DesignSpace.from_dict(s.to_dict()) == s


@pytest.mark.parametrize("expr, message", [
    ("__import__('os')", "call to '__import__' is not allowed"),
    ("foo(1)", "call to 'foo' is not allowed"),
    ("UNROLL.real > 0", "attribute access '.real' is not allowed"),
    ("().__class__", "attribute access '.__class__' is not allowed"),
    ("BLOK > 1", "unknown parameter 'BLOK'"),
    ("'a' == 'a'", "literal 'a' is not allowed"),
    ("[1][0] > 0", "subscripts"),
    ("(lambda: 1)() > 0", "calls are only allowed"),
    ("UNROLL if UNROLL else 1", "IfExp"),
    ("UNROLL in (1, 2)", "comparison In is not allowed"),
    ("UNROLL > ", "syntax error"),
    ("max(UNROLL, key=1)", "positional arguments only"),
    ("UNROLL + 1", "is not a condition"),  # truthy for every value: surely not what was meant
    ("1", "is not a condition"),
    ("UNROLL > 1 and UNROLL % 2", "is not a condition"),
    ("not max(UNROLL, 2)", "is not a condition"),
])
def test_it_rejects_unsafe_restrictions_with_a_clear_message(expr, message):
    with pytest.raises(SpaceError) as info:
        space([expr], UNROLL=[1, 2])
    assert f"restriction '{expr}'" in str(info.value)
    assert message in str(info.value)


def test_it_accepts_the_whitelisted_operators():
    s = space(["1 <= A * B <= 8 and not (A % 2 == 1 and A != 1)",
               "max(A, B) // min(A, B) ** 1 < 9 or -A > 0", "A / B >= 0.25"],
              A=[1, 2, 3, 4], B=[1, 2, 8])
    valid = list(s.iter_valid())
    assert valid
    for p in valid:
        a, b = p["A"], p["B"]
        assert 1 <= a * b <= 8 and not (a % 2 == 1 and a != 1) and a / b >= 0.25
    assert s.contains({"A": 2, "B": 2})
    assert not s.contains({"A": 3, "B": 2})  # odd A != 1
    assert not s.contains({"A": 4, "B": 8})  # product too big


def test_conditions_may_be_combined_negated_constant_or_flags():
    s = space(["not (A == 2)", "True", "A > 0 or A < -1"], A=[1, 2, 3])
    assert [p["A"] for p in s.iter_valid()] == [1, 3]
    flags = space(["not USE_SMEM or BLOCK >= 64", "USE_SMEM and BLOCK < 256 or not USE_SMEM"],
                  USE_SMEM=[0, 1], BLOCK=[32, 64, 256])
    assert sorted((p["USE_SMEM"], p["BLOCK"]) for p in flags.iter_valid()) == [(0, 32), (0, 64), (0, 256), (1, 64)]


def test_division_by_zero_makes_the_point_invalid_not_a_crash():
    s = space(["8 // A >= 1"], A=[0, 1, 2])
    assert not s.contains({"A": 0})
    assert s.contains({"A": 2})


def test_huge_powers_are_refused_before_they_are_computed():
    s = space(["2 ** 10 ** 10 > A"], A=[1])
    assert not s.contains({"A": 1})
    assert "over the cap" in s.restriction_failures({"A": 1})["2 ** 10 ** 10 > A"]


@pytest.mark.parametrize("params, message", [
    ({"1X": [1]}, "must be a C identifier"),
    ({"A\n": [1]}, "must be a C identifier"),  # else "#define A\n 1" breaks every kernel
    ({"A": []}, "needs at least one value"),
    ({"A": [1, 1]}, "duplicate values"),
    ({"A": [True]}, "must be an int or a float"),
    ({"A": ["1"]}, "must be an int or a float"),
    ({"A": [float("nan")]}, "must be finite"),
])
def test_it_validates_parameters(params, message):
    with pytest.raises(SpaceError, match=message):
        DesignSpace.from_dict({"parameters": [{"name": k, "values": v} for k, v in params.items()]})


def test_labels_name_the_values_of_a_category_and_round_trip():
    d = {"parameters": [{"name": "METHOD", "values": [0, 1, 2], "labels": ["best1bin", True, 1]},
                        {"name": "B", "values": [4, 8]}], "restrictions": []}
    s = DesignSpace.from_dict(d)
    assert s.to_dict() == d and s.parameters[0].labels == ("best1bin", True, 1)  # True and 1 apart
    assert s != DesignSpace.from_dict(d | {"parameters": [{"name": "METHOD", "values": [0, 1, 2], "labels": [1, True, "best1bin"]},
                                                          d["parameters"][1]]})
    for labels, message in ((["a"], "labels must be a list of 3"), (["a", "b", ["c"]], "labels must be"),
                            ("abc", "labels must be"), (["a", "b", "a"], "duplicate labels")):
        with pytest.raises(SpaceError, match=message):
            DesignSpace.from_dict({"parameters": [{"name": "M", "values": [0, 1, 2], "labels": labels}]})
    with pytest.raises(SpaceError, match="optional 'labels'"):
        DesignSpace.from_dict({"parameters": [{"name": "M", "values": [0], "units": "ms"}]})


def test_it_rejects_duplicate_names():
    with pytest.raises(SpaceError, match="duplicate parameter names: A"):
        DesignSpace.from_dict({"parameters": [{"name": "A", "values": [1]}, {"name": "A", "values": [2]}]})


def test_cartesian_size_of_a_huge_space_enumerates_nothing(monkeypatch):
    s = space(["P0 * P1 <= 50"], **{f"P{i}": range(10) for i in range(12)})

    def refuse(*a, **kw):
        raise AssertionError("the size was counted by enumerating points")

    monkeypatch.setattr(type(s), "iter_valid", refuse)
    monkeypatch.setattr(type(s), "satisfies_restrictions", refuse)
    assert s.cartesian_size() == 10**12


@pytest.mark.parametrize("dims", [3, 8])  # enumerated (small) and rejection-sampled (large)
def test_sample_respects_restrictions_and_exclusions(dims):
    s = space(["P0 * P1 <= 12", "P2 != 3"], **{f"P{i}": range(1, 7) for i in range(dims)})
    rng = np.random.default_rng(0)
    first = s.sample(rng, 20)
    assert len(first) == 20
    assert len({point_key(p) for p in first}) == 20
    assert all(s.contains(p) for p in first)
    second = s.sample(rng, 20, exclude={point_key(p) for p in first})
    assert all(s.contains(p) for p in second)
    assert not {point_key(p) for p in first} & {point_key(p) for p in second}


def test_sample_of_a_small_space_returns_every_valid_point_once():
    s = space(["A < B"], A=[1, 2, 3], B=[1, 2, 3])
    points = s.sample(np.random.default_rng(1), 100)
    assert sorted((p["A"], p["B"]) for p in points) == [(1, 2), (1, 3), (2, 3)]


def test_sample_is_reproducible_from_the_seed():
    s = default_space("rmsnorm")
    a = s.sample(np.random.default_rng(7), 5)
    b = s.sample(np.random.default_rng(7), 5)
    assert a == b


def test_defines_and_point_key_are_canonical():
    s = space(B=[2], A=[0.5])
    assert s.defines({"A": 0.5, "B": 2}) == "#define B 2\n#define A 0.5\n"
    assert point_key({"B": 2, "A": 0.5}) == point_key({"A": 0.5, "B": 2}) == '{"A":0.5,"B":2}'
    with pytest.raises(SpaceError, match="missing parameter values: A"):
        s.defines({"B": 2})


@pytest.mark.parametrize("point", [
    {"B": 2, "A": 0.5, "C": -0.0, "D": 1e-05, "E": 10**30, "F": 1.5e300},
    {"x": True, "y": 1},  # a bool is JSON's true, not 1
    {"x": None, "y": "best1bin", "z": 'say "hi"\\'},  # labels, quotes and backslashes escaped
    {"é": 1, "a b": 2, "x\n": 3},  # names JSON escapes or that are no identifier
    {"x": float("nan")}, {"x": float("inf")},  # JSON's NaN / Infinity, not Python's nan / inf
    {"x": [1, 2]}, {},
])
def test_point_key_is_exactly_the_sorted_compact_json_of_the_point(point):
    # Stored candidates, seen sets and recorded domains are keyed by it: one spelling only.
    assert point_key(point) == json.dumps(point, sort_keys=True, separators=(",", ":"))


def test_a_point_key_of_a_point_json_cannot_write_raises_as_json_does():
    with pytest.raises(TypeError):
        point_key({"x": object()})
    with pytest.raises(TypeError):
        point_key({"x": 1, 2: 3})


def test_a_recorded_domain_keeps_the_values_of_points_that_name_different_parameters():
    from kernels.space import Domain

    d = Domain.of("test:mixed", [{"A": 1, "B": 2}, {"A": 3}, {"B": 4, "C": 5}])
    assert d.values == {"A": {1, 3}, "B": {2, 4}, "C": {5}}
    assert d.point_keys == ('{"A":1,"B":2}', '{"A":3}', '{"B":4,"C":5}')
    later = Domain.of("test:later", [{"A": 1}, {"A": 2, "B": 5}, {"A": 3, "B": 6}, {"A": 4, "B": 7}])
    assert later.values == {"A": {1, 2, 3, 4}, "B": {5, 6, 7}}  # a name first seen later keeps every value


def test_a_labelled_value_reads_as_the_label_of_that_value_not_of_that_position():
    from kernels.space import labelled_params

    space = DesignSpace((Parameter("SCHED", (4, 8, 16), ("static", "dynamic", "guided")), Parameter("TILE", (1, 2))))
    stored = space.to_dict()
    assert labelled_params(stored, {"SCHED": 8, "TILE": 2}) == {"SCHED": "dynamic", "TILE": 2}
    assert labelled_params(stored, {"SCHED": 1}) == {"SCHED": 1}  # position 1 is no value of SCHED
    assert labelled_params(stored, {"SCHED": True, "OTHER": 4}) == {"SCHED": True, "OTHER": 4}
    assert labelled_params(None, {"SCHED": 8}) == {"SCHED": 8}


def test_the_default_rmsnorm_space_matches_its_template():
    s = default_space("rmsnorm")
    assert s.names == ("ROWS_PER_CHUNK", "UNROLL", "VEC", "ACC_DOUBLE")
    assert s.cartesian_size() == 6 * 4 * 4 * 2
    assert not s.contains({"ROWS_PER_CHUNK": 1, "UNROLL": 8, "VEC": 16, "ACC_DOUBLE": 0})
    assert s.contains({"ROWS_PER_CHUNK": 1, "UNROLL": 4, "VEC": 16, "ACC_DOUBLE": 0})


def test_sample_wants_a_count_of_points():
    space = DesignSpace.from_dict({"parameters": [{"name": "A", "values": [1, 2, 3]}]})
    with pytest.raises(TypeError):
        space.sample(np.random.default_rng(0), 1.5)
    assert len(space.sample(np.random.default_rng(0), np.int64(2))) == 2
