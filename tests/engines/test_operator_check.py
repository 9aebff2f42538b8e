"""Every operator of an engine is judged against its float64 reference at the engine's shapes:
the Llama layer's end-to-end error is floored by its residual stream's rounding and cannot
tell two kernels apart, the operator figures can."""

import pytest

from engines._binding import StaticRegistry
from engines._operator_check import record_calls
from engines._validate import validate, validation_run
from engines.llama import LlamaLayer
from kernels import load_template

pytestmark = pytest.mark.timeout(300)

SRC = load_template("rmsnorm")
# Correct math scaled by 1 + 7e-5: over rmsnorm's tolerance (5e-5), under the layer's (1e-4).
SCALED = SRC.replace("void rmsnorm(const float *restrict x", "static void rmsnorm_ok(const float *restrict x", 1) + """
void rmsnorm(const float *x, const float *w, float *y, int rows, int hidden, float eps)
{
    rmsnorm_ok(x, w, y, rows, hidden, eps);
    for (long i = 0; i < (long)rows * hidden; ++i) y[i] *= 1.00007f;
}
"""


def run_with(source, params):
    entry = {"workload": "rmsnorm", "target": "cpu-x86_64", "shape_set": "test-small", "source": source,
             "params": params, "candidate": 1}
    return validate("llama-layer", engine=LlamaLayer("small", registry=StaticRegistry([entry])))


def norm_rows(res):
    return [r for r in res["operators"] if r["workload"] == "rmsnorm"]


def test_operator_errors_tell_kernels_apart_where_the_layer_figure_cannot():
    f, d = run_with(SRC, {"ACC_DOUBLE": 0}), run_with(SRC, {"ACC_DOUBLE": 1})
    assert f["status"] == d["status"] == "ok"
    fr, dr = norm_rows(f), norm_rows(d)
    assert fr and all(r["kernel"]["kind"] == "production" for r in fr + dr)
    # The end-to-end figure is floored by the rest of the layer's float32 rounding: either
    # kernel's own error is a small part of it, so it cannot say which kernel is better.
    assert max(r["max_rel_error"] for r in fr + dr) < 0.1 * min(f["max_rel_error"], d["max_rel_error"])
    assert {tuple(r["shape"].items()) for r in fr} == {(("rows", 24), ("hidden", 256)), (("rows", 1), ("hidden", 256))}
    assert [r["max_rel_error"] for r in fr] != [r["max_rel_error"] for r in dr]


def test_an_operator_off_beyond_its_tolerance_fails_the_validation_the_layer_figure_passes():
    res = run_with(SCALED, {})
    assert res["end_to_end_status"] == "ok" and res["max_rel_error"] < 1e-4
    assert res["status"] == "wrong_result" and res["operators_status"] == "wrong_result"
    rows = norm_rows(res)
    assert all(r["status"] == "wrong_result" and 5e-5 < r["max_rel_error"] < 1e-4 for r in rows)
    assert res["worst_operator"]["workload"] == "rmsnorm"
    assert all(r["status"] == "ok" for r in res["operators"] if r["workload"] != "rmsnorm")


def test_recording_the_shapes_loads_no_kernel_and_leaves_the_engine_as_it_was():
    eng = LlamaLayer("small", registry=StaticRegistry([]))
    plan = eng.plan({})
    calls = record_calls(eng, plan, validation_run(eng, plan))
    assert calls[("prefill", "input_norm")] == [{"rows": 24, "hidden": 256}]
    assert calls[("decode", "input_norm")] == [{"rows": 1, "hidden": 256}]
    assert not eng._programs and "program" not in vars(eng)
