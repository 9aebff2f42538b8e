"""softmax: row-wise, numerically stable, over Llama-3's vocabulary; inputs and template."""

import os

import numpy as np
import pytest

from kernels import Outcome, evaluate, get_workload, load_template
from kernels.baselines import baseline_latency_ms, numpy_softmax
from kernels.templates import default_space

pytestmark = pytest.mark.timeout(120)

wl = get_workload("softmax")


def test_reference_rows_are_probabilities_equal_to_exp_minus_logsumexp():
    inp = wl.generate({"rows": 12, "cols": 3001}, 0)
    y = wl.reference(inp, wl.attrs)["y"]
    x = inp["x"].astype(np.float64)
    lse = np.logaddexp.reduce(x, axis=-1, keepdims=True)  # independent formulation
    assert np.allclose(y, np.exp(x - lse), rtol=1e-12, atol=1e-300)
    assert np.allclose(y.sum(axis=-1), 1.0, rtol=1e-12)
    assert (y >= 0).all() and np.isfinite(y).all()
    assert (y[np.isneginf(x)] == 0).all()


def test_logits_overflow_a_softmax_that_does_not_subtract_the_max():
    x = wl.generate({"rows": 12, "cols": 3001}, 1)["x"]
    assert x.dtype == np.float32 and x.flags.c_contiguous
    finite_max = np.max(np.where(np.isfinite(x), x, -np.inf), axis=-1)
    assert np.isfinite(finite_max).all()  # every row has a finite maximum
    assert (finite_max > 88.8).sum() >= 2  # cold rows: exp overflows float32
    assert (finite_max < -90).sum() >= 2  # shifted rows: every exp underflows
    masked = np.isneginf(x).any(axis=-1)
    assert masked.sum() >= 2 and np.isneginf(x[masked, 0]).any()  # masked first elements too
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        e = np.exp(x)
        naive = e / e.sum(axis=-1, keepdims=True)
    assert not np.isfinite(naive).all()
    stable = numpy_softmax(x)
    assert np.isfinite(stable).all()


def test_tolerance_accepts_float32_and_rejects_half_precision_or_no_normalisation():
    inp = wl.generate({"rows": 6, "cols": 128263}, 2)
    x = inp["x"]
    ref = wl.reference(inp, wl.attrs)["y"]
    assert wl.errors(numpy_softmax(x), ref)[1] <= wl.tolerance
    m = np.max(x, axis=-1, keepdims=True)
    # exp2(x*log2e - m*log2e) in float32 (the scaled-exponent form): rounding of the products
    # only hurts elements near the maximum, well inside the tolerance
    e = np.exp2(np.float32(np.log2(np.e)) * x - np.float32(np.log2(np.e)) * m).astype(np.float32)
    assert wl.errors(e / e.sum(axis=-1, keepdims=True), ref)[1] <= wl.tolerance
    # exponentials in half precision are not float32 softmax
    h = np.exp((x - m).astype(np.float16)).astype(np.float32)
    assert wl.errors(h / h.sum(axis=-1, keepdims=True), ref)[1] > wl.tolerance
    unnormalised = np.exp(x - m)
    assert wl.errors(unnormalised, ref)[1] > wl.tolerance
    assert wl.errors(np.full_like(x, 1.0 / x.shape[1]), ref)[1] > wl.tolerance


def test_counts_signature_and_shape_sets():
    s = {"rows": 16, "cols": 128256}
    assert wl.flops(s) == 5 * 16 * 128256
    assert wl.bytes(s) == 8 * 16 * 128256
    assert wl.c_signature == "void softmax(const float *x, float *y, int rows, int cols)"
    assert {x["cols"] for x in wl.shapes("llama3-8b")} == {128256}
    for odd in wl.validation_shapes.values():
        assert all(x["cols"] % 2 for x in odd)


def test_the_template_has_a_default_for_every_parameter_and_a_valid_space():
    src = load_template("softmax")
    space = default_space("softmax")
    for name in space.names:
        assert f"#ifndef {name}" in src
    assert not space.satisfies_restrictions(
        {"ALGO": 0, "VEC": 8, "UNROLL": 2, "EXP_POLY": 0, "EXP_DEGREE": 5, "ACC_DOUBLE": 0,
         "BLOCK": 1024, "ROWS_PER_CHUNK": 1, "SPLIT_ROWS": 1})


def run(source, quick_bench, params=None, shape_set="test-small"):
    return evaluate("softmax", source, params or {}, shape_set=shape_set, bench=quick_bench, seed=11, timeout_s=60)


@pytest.mark.parametrize("params", [
    {},
    {"ALGO": 1, "VEC": 16, "UNROLL": 4, "BLOCK": 256, "ACC_DOUBLE": 1, "ROWS_PER_CHUNK": 2},
    {"ALGO": 2, "VEC": 4, "UNROLL": 1, "EXP_DEGREE": 5, "ROWS_PER_CHUNK": 8},
    {"ALGO": 0, "EXP_POLY": 0, "SPLIT_ROWS": 0},
])
def test_the_default_template_is_ok_at_several_points(params, quick_bench):
    ev = run(load_template("softmax"), quick_bench, params)
    assert ev.status == Outcome.ok, ev.log
    assert ev.metrics["max_rel_error"] <= wl.tolerance
    assert ev.metrics["gbps"] > 0


@pytest.mark.parametrize("algo", [0, 1, 2])
def test_rows_split_across_threads_are_ok_on_a_full_vocabulary(algo, quick_bench, monkeypatch):
    # rows < threads and cols >= 4096: every row is split across the team
    if (os.cpu_count() or 1) < 2:
        pytest.skip("row splitting needs at least two threads")
    monkeypatch.setitem(wl.shape_sets, "one-row", ({"rows": 1, "cols": 128256},))
    monkeypatch.setitem(wl.validation_shapes, "one-row", ({"rows": 1, "cols": 50021},))
    ev = run(load_template("softmax"), quick_bench, {"ALGO": algo, "SPLIT_ROWS": 1, "BLOCK": 256}, "one-row")
    assert ev.status == Outcome.ok, ev.log


NAIVE = r"""
#include <math.h>
void softmax(const float *x, float *y, int rows, int cols)
{
    for (int r = 0; r < rows; ++r) {
        const float *xr = x + (long)r * cols;
        float *yr = y + (long)r * cols;
        float m = /*MAX*/-INFINITY;
        for (int j = 0; j < cols; ++j) m = xr[j] > m ? xr[j] : m;
        double s = 0.0;
        for (int j = 0; j < cols; ++j) s += expf(xr[j] - m);
        for (int j = 0; j < cols; ++j) yr[j] = (float)(expf(xr[j] - m) / s);
    }
}
"""


def test_a_plain_stable_softmax_is_ok(quick_bench):
    assert run(NAIVE, quick_bench).status == Outcome.ok


def test_a_softmax_without_max_subtraction_is_a_wrong_result(quick_bench):
    unstable = NAIVE.replace("float m = /*MAX*/-INFINITY;", "float m = 0.0f; if (0)")
    ev = run(unstable, quick_bench)
    assert ev.status == Outcome.wrong_result, ev.log
    assert "NaN/inf" in ev.log or "max_rel_error" in ev.log


def test_a_template_without_remainder_loops_is_caught_by_the_odd_shapes(quick_bench):
    src = load_template("softmax")
    tails = src.count("for (; i < n; ++i)")
    assert tails >= 4
    ev = run(src.replace("for (; i < n; ++i)", "for (; i < 0; ++i)"), quick_bench, {"VEC": 8, "UNROLL": 1})
    assert ev.status == Outcome.wrong_result, ev.log
    assert {c["label"] for c in ev.cases if not c["passed"]} == {"rows=7,cols=1003", "rows=3,cols=37"}
    assert all(c["passed"] for c in ev.cases if c["label"] in ("rows=1,cols=1000", "rows=8,cols=1000"))


def test_numpy_baseline_reports_a_positive_latency(quick_bench):
    assert baseline_latency_ms("softmax", "test-small", bench=quick_bench) > 0
