"""fused_add_rmsnorm: residual add + RMSNorm with per-model eps; inputs and template."""

import numpy as np
import pytest

from kernels import Outcome, evaluate, get_workload, load_template
from kernels.baselines import baseline_latency_ms, numpy_fused_add_rmsnorm
from kernels.templates import default_space

pytestmark = pytest.mark.timeout(120)

wl = get_workload("fused_add_rmsnorm")


def test_reference_adds_the_residual_then_normalises_in_float64():
    inp = wl.generate({"rows": 3, "hidden": 5}, 0)
    out = wl.reference(inp, wl.attrs)
    x, res, w = (inp[k].astype(np.float64) for k in ("x", "residual", "w"))
    for r in range(3):
        s = [x[r, i] + res[r, i] for i in range(5)]
        rms = np.sqrt(sum(v * v for v in s) / 5 + np.float32(1e-5))
        assert np.allclose(out["residual_out"][r], s, rtol=1e-15)
        assert np.allclose(out["y"][r], np.array(s) / rms * w, rtol=1e-12)


def test_eps_belongs_to_the_shape_sets_model():
    assert wl.attrs_for("llama3-8b") == {"eps": 1e-5}
    assert wl.attrs_for("deepseek-v3") == {"eps": 1e-6}
    assert wl.for_shape_set("deepseek-v3").attrs == {"eps": 1e-6}
    assert wl.for_shape_set("llama3-8b") is wl
    assert {s["hidden"] for s in wl.shapes("deepseek-v3")} == {7168}
    rms = get_workload("rmsnorm")
    assert rms.attrs_for("deepseek-v3") == {"eps": 1e-6} and rms.attrs_for("llama3-8b") == {"eps": 1e-5}
    # a row of tiny values shows the difference
    inp = {"x": np.full((1, 8), 1e-3, np.float32), "residual": np.zeros((1, 8), np.float32), "w": np.ones(8, np.float32)}
    y5 = wl.reference(inp, wl.attrs_for("llama3-8b"))["y"]
    y6 = wl.reference(inp, wl.attrs_for("deepseek-v3"))["y"]
    assert y6[0, 0] > 2 * y5[0, 0]


def test_inputs_are_seeded_float32_with_a_residual_stream_of_massive_activations():
    shape = {"rows": 200, "hidden": 4096}
    a, b = wl.generate(shape, 1), wl.generate(shape, 1)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert set(a) == {"x", "residual", "w"}
    assert all(v.dtype == np.float32 and v.flags.c_contiguous for v in a.values())
    assert a["x"].shape == a["residual"].shape == (200, 4096) and a["w"].shape == (4096,)
    assert 200 <= np.abs(a["residual"]).max() <= 500  # BOS-like rows
    assert np.abs(a["x"]).max() < np.abs(a["residual"]).max()


def test_tolerance_accepts_float32_numpy_and_rejects_a_missing_add_or_weight():
    shape = {"rows": 7, "hidden": 4099}
    inp = wl.generate(shape, 5)
    ref = wl.reference(inp, wl.attrs)
    eps = wl.attrs["eps"]
    y, r = numpy_fused_add_rmsnorm(inp["x"], inp["residual"], inp["w"], eps)
    assert wl.errors(y, ref["y"])[1] <= wl.tolerance and wl.errors(r, ref["residual_out"])[1] <= wl.tolerance
    y_no_add, _ = numpy_fused_add_rmsnorm(inp["x"], 0 * inp["residual"], inp["w"], eps)
    y_no_w, _ = numpy_fused_add_rmsnorm(inp["x"], inp["residual"], np.ones_like(inp["w"]), eps)
    assert wl.errors(y_no_add, ref["y"])[1] > wl.tolerance
    assert wl.errors(y_no_w, ref["y"])[1] > wl.tolerance


def test_counts_signature_and_shape_sets():
    s = {"rows": 16, "hidden": 4096}
    assert wl.flops(s) == 5 * 16 * 4096
    assert wl.bytes(s) == (4 * 16 * 4096 + 4096) * 4
    assert wl.c_signature.startswith("void fused_add_rmsnorm(const float *x, const float *residual, const float *w,")
    assert wl.outputs == ("y", "residual_out")
    assert {s["hidden"] for s in wl.shapes("llama3-8b")} == {4096}
    for odd in wl.validation_shapes.values():
        assert all(x["hidden"] % 2 and x["rows"] % 2 for x in odd)


def test_the_template_has_a_default_for_every_parameter():
    src = load_template("fused_add_rmsnorm")
    for name in default_space("fused_add_rmsnorm").names:
        assert f"#ifndef {name}" in src


def run(source, quick_bench, params=None, shape_set="test-small"):
    return evaluate("fused_add_rmsnorm", source, params or {}, shape_set=shape_set, bench=quick_bench, seed=5, timeout_s=60)


@pytest.mark.parametrize("params", [
    {},
    {"ROWS_PER_CHUNK": 1, "UNROLL": 1, "VEC": 1, "ACC_DOUBLE": 1, "RECOMPUTE": 1},
    {"ROWS_PER_CHUNK": 32, "UNROLL": 4, "VEC": 16, "ACC_DOUBLE": 0, "RECOMPUTE": 0},
])
def test_the_default_template_is_ok_at_several_points(params, quick_bench):
    ev = run(load_template("fused_add_rmsnorm"), quick_bench, params)
    assert ev.status == Outcome.ok, ev.log
    assert ev.metrics["max_rel_error"] <= wl.tolerance and ev.metrics["gbps"] > 0


# Correct, but insists on being called with DeepSeek-V3's eps.
EPS_CHECK = r"""
#include <math.h>
void fused_add_rmsnorm(const float *x, const float *residual, const float *w, float *y,
                       float *residual_out, int rows, int hidden, float eps)
{
    for (int r = 0; r < rows; ++r) {
        const float *xr = x + (long)r * hidden, *rr = residual + (long)r * hidden;
        float *yr = y + (long)r * hidden, *ro = residual_out + (long)r * hidden;
        double s = 0.0;
        for (int i = 0; i < hidden; ++i) { ro[i] = xr[i] + rr[i]; s += (double)ro[i] * ro[i]; }
        float inv = (float)(1.0 / sqrt(s / hidden + eps));
        for (int i = 0; i < hidden; ++i) yr[i] = /*Y*/ro[i] * inv * w[i];
    }
    if (eps != 1e-6f) y[0] = NAN;
}
"""


def test_the_kernel_receives_the_eps_of_the_shape_set(quick_bench):
    assert run(EPS_CHECK, quick_bench, shape_set="deepseek-v3").status == Outcome.ok
    assert run(EPS_CHECK, quick_bench, shape_set="test-small").status == Outcome.wrong_result


def test_normalising_x_without_the_residual_is_a_wrong_result(quick_bench):
    src = EPS_CHECK.replace("    if (eps != 1e-6f) y[0] = NAN;\n", "").replace("/*Y*/ro[i]", "xr[i]")
    ev = run(src, quick_bench)
    assert ev.status == Outcome.wrong_result, ev.log
    assert "output 'y'" in ev.log


def test_a_template_without_its_remainder_loop_is_caught_by_the_odd_shapes(quick_bench):
    src = load_template("fused_add_rmsnorm")
    tail = "for (; i < hidden; ++i) {"
    assert tail in src
    ev = run(src.replace(tail, "for (; i < 0; ++i) {"), quick_bench, {"VEC": 8, "UNROLL": 2})
    assert ev.status == Outcome.wrong_result, ev.log
    assert {c["label"] for c in ev.cases if not c["passed"]} == {"rows=7,hidden=259"}


def test_numpy_baseline_uses_the_shape_sets_eps(quick_bench):
    assert baseline_latency_ms("fused_add_rmsnorm", "test-small", bench=quick_bench) > 0
