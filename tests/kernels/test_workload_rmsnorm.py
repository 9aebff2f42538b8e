import numpy as np
import pytest

from kernels import WORKLOADS, get_workload
from kernels.baselines import numpy_rmsnorm, numpy_rmsnorm_latency_ms
from kernels.templates import default_space, load_template

wl = get_workload("rmsnorm")


def test_the_registry_names_known_workloads_on_a_miss():
    assert "rmsnorm" in WORKLOADS
    with pytest.raises(KeyError, match="known: .*rmsnorm"):
        get_workload("gemmm")


def test_inputs_are_seeded_float32_with_llm_like_outliers():
    shape = {"rows": 64, "hidden": 4096}
    a, b = wl.generate(shape, 1), wl.generate(shape, 1)
    assert np.array_equal(a["x"], b["x"]) and np.array_equal(a["w"], b["w"])
    assert not np.array_equal(a["x"], wl.generate(shape, 2)["x"])
    assert a["x"].dtype == np.float32 and a["x"].shape == (64, 4096) and a["x"].flags.c_contiguous
    assert a["w"].dtype == np.float32 and a["w"].shape == (4096,)
    assert 20 <= np.abs(a["x"]).max() <= 1000
    assert 0.8 < a["w"].mean() < 1.2


def test_reference_is_the_rmsnorm_formula_in_float64():
    inp = wl.generate({"rows": 3, "hidden": 5}, 0)
    y = wl.reference(inp, wl.attrs)["y"]
    x, w = inp["x"].astype(np.float64), inp["w"].astype(np.float64)
    for r in range(3):
        rms = np.sqrt(sum(v * v for v in x[r]) / 5 + np.float32(1e-5))
        assert np.allclose(y[r], x[r] / rms * w, rtol=1e-12)


def test_tolerance_accepts_float32_numpy_and_rejects_a_missing_weight():
    shape = {"rows": 7, "hidden": 4099}
    inp = wl.generate(shape, 5)
    ref = wl.reference(inp, wl.attrs)["y"]
    _, good = wl.errors(numpy_rmsnorm(inp["x"], inp["w"], wl.attrs["eps"]), ref)
    _, bad = wl.errors(numpy_rmsnorm(inp["x"], np.ones_like(inp["w"]), wl.attrs["eps"]), ref)
    assert good <= wl.tolerance < bad


def test_counts_and_shape_sets():
    s = {"rows": 512, "hidden": 4096}
    assert wl.flops(s) == 4 * 512 * 4096
    assert wl.bytes(s) == (2 * 512 * 4096 + 4096) * 4
    assert [x["rows"] for x in wl.shapes("llama3-8b")] == [1, 32, 512]
    assert all(x["hidden"] % 8 for x in wl.validation_shapes["llama3-8b"])
    assert "void rmsnorm(const float *x" in wl.c_signature


def test_the_template_has_a_default_for_every_parameter():
    src = load_template("rmsnorm")
    for name in default_space("rmsnorm").names:
        assert f"#ifndef {name}" in src
    with pytest.raises(KeyError):
        load_template("no_such_workload")


def test_numpy_baseline_reports_a_positive_latency(quick_bench):
    assert numpy_rmsnorm_latency_ms("test-small", bench=quick_bench) > 0
