"""A float64 reference that explodes is the workload's failure (invalid_input), never the candidate's."""

import dataclasses

import numpy as np
import pytest

from kernels import BenchSettings, Outcome, ValidationStore, evaluate, load_template
from kernels.evaluation.cases import plan_cases
from kernels.evaluation.reference_check import reference_problems
from kernels.workloads import registry
from kernels.workloads.base import FLOAT32_MAX, MAGNITUDE_HEADROOM, default_magnitude_bound
from kernels.workloads.registry import WORKLOADS

pytestmark = pytest.mark.timeout(90)

BENCH = BenchSettings(warmup_ms=1, rep_ms=2, min_reps=1, max_reps=3)
PARAMS = {"ROWS_PER_CHUNK": 4, "UNROLL": 2, "VEC": 8, "ACC_DOUBLE": 0}
ODD = {"rows": 7, "hidden": 259}  # rmsnorm's odd validation shape of test-small
POISON = {"inf": np.inf, "nan": np.nan, "1e30": 1e30}


def poisoned(value: float, when=lambda inputs: inputs["x"].shape == (ODD["rows"], ODD["hidden"]), count: int = 3):
    """rmsnorm's reference, with ``count`` elements of ``y`` set to ``value`` for inputs ``when`` picks."""
    real = WORKLOADS["rmsnorm"].reference

    def reference(inputs, attrs):
        out = real(inputs, attrs)
        if when(inputs):
            out["y"].reshape(-1)[:count] = value
        return out

    return reference


@pytest.fixture
def exploding(monkeypatch):
    """Register rmsnorm with a reference that explodes (for the test only): ``exploding(value, when)``."""

    def install(value: float, **kw) -> None:
        monkeypatch.setitem(registry.WORKLOADS, "rmsnorm",
                            dataclasses.replace(WORKLOADS["rmsnorm"], reference=poisoned(value, **kw)))

    return install


def run(store, source=None, params=None):
    """The template (or ``source``) on rmsnorm's test-small shapes, seed 3, with ``store``."""
    return evaluate("rmsnorm", source or load_template("rmsnorm"), PARAMS if params is None else params,
                    shape_set="test-small", bench=BENCH, seed=3, timeout_s=30, validation_store=store)


# -- the check itself ------------------------------------------------------------------------


def test_the_default_bound_follows_its_formula_and_never_exceeds_float32():
    inputs = {"a": np.array([[3.0, -5.0]], dtype=np.float32), "b": np.full(7, 0.5, dtype=np.float32)}
    assert default_magnitude_bound(inputs) == MAGNITUDE_HEADROOM * 7 * 5.0**2  # n: the largest input; m: max |x|
    assert default_magnitude_bound({"a": np.full(4, 0.25)}) == MAGNITUDE_HEADROOM * 4  # m is at least 1
    assert default_magnitude_bound({"a": np.array([np.inf, 2.0])}) == MAGNITUDE_HEADROOM * 2 * 4  # finite values count
    wl = dataclasses.replace(WORKLOADS["rmsnorm"], magnitude_bound=lambda inputs, attrs: 1e300)
    assert wl.reference_bound(inputs) == FLOAT32_MAX


@pytest.mark.parametrize("poison", sorted(POISON))
def test_a_non_finite_or_absurd_reference_is_reported_per_output(poison):
    wl = WORKLOADS["rmsnorm"]
    inputs = wl.generate(ODD, 1)
    ref = wl.reference(inputs, wl.attrs)
    assert reference_problems(ref, wl.reference_bound(inputs)) == []
    ref["y"].reshape(-1)[:3] = POISON[poison]
    (problem,) = reference_problems(ref, wl.reference_bound(inputs))
    assert problem.output == "y" and problem.size == ODD["rows"] * ODD["hidden"]
    assert problem.nonfinite == (0 if poison == "1e30" else 3)
    assert problem.bound == wl.reference_bound(inputs)
    assert (problem.largest == 1e30) if poison == "1e30" else (problem.largest <= problem.bound)


def test_a_workload_can_set_its_own_bound():
    wl = WORKLOADS["softmax"]
    shape = wl.shapes("test-small")[0]
    inputs = wl.generate(shape, 0)
    ref = wl.reference(inputs, wl.attrs)
    assert reference_problems(ref, wl.reference_bound(inputs)) == []
    tight = dataclasses.replace(wl, magnitude_bound=lambda inputs, attrs: 0.5)  # below softmax's largest output
    assert [p.output for p in reference_problems(ref, tight.reference_bound(inputs))] == ["y"]


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_every_registered_workload_has_usable_references_on_its_test_shapes(name):
    wl = WORKLOADS[name]
    for shape_set in [s for s in wl.shape_sets if s.startswith("test-small")] or [next(iter(wl.shape_sets))]:
        w = wl.for_shape_set(shape_set)
        for shape in (*w.shapes(shape_set), *w.validation_shapes.get(shape_set, ())):
            for seed in (0, 1):
                inputs = w.generate(shape, seed)
                assert reference_problems(w.reference(inputs, w.attrs), w.reference_bound(inputs)) == [], (shape_set, shape, seed)


# -- the evaluator ---------------------------------------------------------------------------


@pytest.mark.parametrize("poison", sorted(POISON))
def test_a_correct_kernel_on_an_exploding_reference_is_invalid_input_and_nothing_is_stored(poison, exploding, tmp_path):
    exploding(POISON[poison])
    store = ValidationStore(tmp_path)
    ev = run(store)
    assert ev.status == Outcome.invalid_input, ev.log
    assert not any(c["verdict"] == "wrong_result" for c in ev.cases)
    bad = [c for c in ev.cases if c["verdict"] == "invalid_input"]
    assert bad and all(c["shape"] == ODD and c["reference"][0]["output"] == "y" for c in bad)
    assert store.cases("rmsnorm") == []
    assert "== timing ==\nnot run: validation decided invalid_input" in ev.log
    # The log names the case, the output, what was wrong, and how to fix the input generator.
    section = ev.log.split("== reference check ==\n", 1)[1]
    assert f"validation rows=7,hidden=259 seed {bad[0]['seed']}: " in section and "output 'y': " in section
    assert ("3 of 1813 elements NaN/inf" in section) == (poison != "1e30")
    assert poison != "1e30" or "largest finite magnitude 1e+30 > bound " in section
    assert "the input generator of workload 'rmsnorm' produces inputs whose float64 reference overflows" in section
    assert "at shape rows=7,hidden=259" in section and "bound the generated values" in section
    assert "not the candidate's failure" in ev.log.rsplit("== verdict ==", 1)[1]


def test_a_normal_workload_is_unaffected(tmp_path):
    store = ValidationStore(tmp_path)
    ev = run(store)
    assert ev.status == Outcome.ok, ev.log
    assert "== reference check ==" not in ev.log
    assert not any("reference" in c or c.get("skipped") for c in ev.cases)


def test_an_exploding_reference_at_a_timed_call_is_invalid_input(exploding, tmp_path):
    wl = WORKLOADS["rmsnorm"]
    _, timed = plan_cases(wl, "test-small", 3)
    fresh_x = wl.generate(timed[0]["shape"], timed[0]["fresh_seed"])["x"]
    exploding(np.inf, when=lambda inputs: np.array_equal(inputs["x"], fresh_x))
    store = ValidationStore(tmp_path)
    ev = run(store)
    assert ev.status == Outcome.invalid_input, ev.log
    (bad,) = [c for c in ev.cases if c["verdict"] == "invalid_input"]
    assert bad["kind"] == "fresh" and bad["seed"] == timed[0]["fresh_seed"]
    assert bad["reason"].startswith("call on fresh contents in the timed buffers: the float64 reference is unusable")
    assert store.cases("rmsnorm") == []


def test_a_stored_case_whose_reference_went_bad_is_skipped_with_a_note(exploding, tmp_path):
    stored = {"rows": 5, "hidden": 100}  # not a planned shape: only the stored case has it
    exploding(np.nan, when=lambda inputs: inputs["x"].shape == (5, 100))
    store = ValidationStore(tmp_path)
    store.add("rmsnorm", stored, 11, reason="kept earlier")
    ev = run(store)
    assert ev.status == Outcome.ok, ev.log
    (case,) = [c for c in ev.cases if c["kind"] == "regression"]
    assert case["skipped"] and case["verdict"] is None and case["reason"].startswith("stored case skipped: ")
    assert "1 stored case(s) skipped" in ev.log
    assert ("regression rows=5,hidden=100 seed 11 (stored case, skipped): the float64 reference is unusable: "
            "output 'y': 3 of 500 elements NaN/inf") in ev.log


WRITES_PAST_THE_END = r"""
#include <math.h>
void rmsnorm(const float *x, const float *w, float *y, int rows, int hidden, float eps)
{
    for (int r = 0; r < rows; ++r) {
        double s = 0.0;
        for (int i = 0; i < hidden; ++i) s += (double)x[(long)r * hidden + i] * x[(long)r * hidden + i];
        float inv = (float)(1.0 / sqrt(s / hidden + eps));
        for (int i = 0; i < hidden; ++i) y[(long)r * hidden + i] = x[(long)r * hidden + i] * inv * w[i];
    }
    if (hidden == 259) y[(long)rows * hidden] = 0.0f;  /* one past the end, only where the reference explodes */
}
"""


def test_breaking_a_rule_on_a_case_with_a_bad_reference_is_still_invalid(exploding, tmp_path):
    exploding(np.inf)
    ev = run(ValidationStore(tmp_path), WRITES_PAST_THE_END, params={})
    assert ev.status == Outcome.invalid, ev.log
    assert any(c["verdict"] == "invalid" and "wrote past the end of output 'y'" in c["reason"] for c in ev.cases)


def test_a_wrong_kernel_is_still_wrong_result_and_only_cases_with_usable_references_are_stored(exploding, tmp_path):
    exploding(1e30)
    wrong = WRITES_PAST_THE_END.replace("if (hidden == 259) y[(long)rows * hidden] = 0.0f;", "y[0] += 1.0f;")
    store = ValidationStore(tmp_path)
    ev = run(store, wrong, params={})
    assert ev.status == Outcome.wrong_result, ev.log
    verdicts = {c["verdict"] for c in ev.cases if c["shape"] == ODD}
    assert verdicts == {"invalid_input"}
    kept = store.cases("rmsnorm")
    assert kept and all(c.shape != ODD for c in kept)
