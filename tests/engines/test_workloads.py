"""The engines' workloads in kernels/: references, inputs, templates through the full
evaluation protocol, wrong variants caught, and the engines' NumPy baselines."""

import numpy as np
import pytest

from engines._baselines import BASELINES
from engines._graph import AXES
from kernels import Outcome, evaluate, get_workload, load_template
from kernels.templates import default_space
from kernels.workloads._common import gelu64

pytestmark = pytest.mark.timeout(300)

NEW = ("layernorm", "gelu", "gemm_bias", "attention", "decode_attention", "rope", "swiglu")
SETS = [("layernorm", "test-small"), ("gelu", "test-small"), ("gemm_bias", "test-small"),
        ("gemm_bias", "test-small-gelu"), ("attention", "test-small"), ("attention", "test-small-bidir"),
        ("decode_attention", "test-small"), ("rope", "test-small"), ("swiglu", "test-small")]


def run(workload, source, quick_bench, shape_set="test-small", params=None):
    return evaluate(workload, source, params or {}, shape_set=shape_set, bench=quick_bench, seed=5, timeout_s=120)


@pytest.mark.parametrize("workload", NEW)
def test_every_engine_workload_is_registered_with_a_template_and_a_space(workload):
    wl = get_workload(workload)
    src = load_template(workload)
    space = default_space(workload)
    for name in space.names:
        assert f"#ifndef {name}" in src
    assert f"{workload}(" in src and wl.c_signature.split("(")[0].split()[-1] == workload
    for shape_set in wl.shape_sets:
        for s in wl.shapes(shape_set):
            assert wl.flops(s) > 0 and wl.bytes(s) > 0
        assert wl.validation_shapes.get(shape_set), f"{workload}/{shape_set} has no odd validation shapes"


@pytest.mark.parametrize("workload,shape_set", SETS)
def test_the_template_passes_the_evaluation_protocol(workload, shape_set, quick_bench):
    ev = run(workload, load_template(workload), quick_bench, shape_set)
    assert ev.status == Outcome.ok, ev.log
    assert ev.metrics["max_rel_error"] <= get_workload(workload).tolerance
    assert any(c["kind"] == "fresh" for c in ev.cases) and ev.samples_ms


@pytest.mark.parametrize("workload,shape_set,params", [
    ("layernorm", "test-small", {"ALGO": 1, "LANES": 4, "ACC_DOUBLE": 1}),
    ("gelu", "test-small", {"ERF_IMPL": 1}),
    ("gemm_bias", "test-small-gelu", {"ERF_IMPL": 1, "PACK_MIN_M": 1, "MR": 2, "NV": 1, "VEC": 8}),
    ("attention", "test-small", {"BQ": 1, "BK": 16, "SCHEDULE": 0}),
    ("decode_attention", "test-small", {"GROUP": 0, "BK": 16}),
    ("swiglu", "test-small", {"SIGMOID": 1, "CHUNK": 512}),
])
def test_other_points_of_the_space_are_ok_too(workload, shape_set, params, quick_bench):
    assert run(workload, load_template(workload), quick_bench, shape_set, params).status == Outcome.ok


WRONG = [
    # one-pass E[x^2] - E[x]^2 in float: cancellation on the offset rows
    ("layernorm", "test-small", lambda s: s.replace("acc_t var = ss / (acc_t)n - md * md;", "acc_t var = ss / (acc_t)n - md * md; var = var;")
     .replace("acc_t shift = (acc_t)xr[0];", "acc_t shift = 0;"), {"ALGO": 1}),
    # tanh approximation instead of erf
    ("gelu", "test-small", lambda s: s.replace("return erff(z);", "return tanhf(0.7978845608f * 1.41421356f * z * (1.0f + 0.044715f * 2.0f * z * z));"), {}),
    # bias dropped
    ("gemm_bias", "test-small", lambda s: s.replace("c[n] += bias[n];", "c[n] += 0.0f;"), {}),
    # causal mask ignored
    ("attention", "test-small", lambda s: s.replace("is_causal = causal != 0.0f", "is_causal = 0"), {}),
    # no max subtraction: the peaky heads overflow
    ("decode_attention", "test-small", lambda s: s.replace("float corr = expf(m[g] - mb), sum = 0.0f;", "mb = 0.0f; float corr = 1.0f, sum = 0.0f;"), {}),
    # interleaved (GPT-J) pairs instead of rotate-half
    ("rope", "test-small", lambda s: s.replace("float a = xr[i], b = xr[i + half];", "float a = xr[2 * (i % (half / 2))], b = xr[2 * (i % (half / 2)) + 1];"), {}),
    # gate and up swapped
    ("swiglu", "test-small", lambda s: s.replace("const float *restrict u = g + inter;", "const float *restrict u = g; g = g + inter;")
     .replace("const float *restrict g = x", "const float *g = x"), {}),
]


@pytest.mark.parametrize("workload,shape_set,mutate,params", WRONG, ids=[w[0] for w in WRONG])
def test_a_wrong_variant_is_caught(workload, shape_set, mutate, params, quick_bench):
    src = load_template(workload)
    bad = mutate(src)
    assert bad != src, "the mutation must change the template"
    ev = run(workload, bad, quick_bench, shape_set, params)
    assert ev.status in (Outcome.wrong_result, Outcome.invalid), ev.log


def test_attention_reference_matches_an_independent_per_head_formula():
    wl = get_workload("attention")
    shape = {"batch": 2, "seq": 9, "heads": 4, "kv_heads": 2, "head_dim": 8}
    x = wl.generate(shape, 0)
    for causal in (0.0, 1.0):
        ref = wl.reference(x, {"causal": causal})["o"]
        q, k, v = (x[n].astype(np.float64) for n in ("q", "k", "v"))
        for b in range(2):
            for h in range(4):
                s = q[b, :, h] @ k[b, :, h // 2].T / np.sqrt(8)
                if causal:
                    s[np.triu_indices(9, 1)] = -np.inf
                p = np.exp(s - s.max(1, keepdims=True))
                o = (p / p.sum(1, keepdims=True)) @ v[b, :, h // 2]
                assert np.allclose(ref[b, :, h], o, rtol=1e-12, atol=1e-12)


def test_rope_reference_is_a_complex_rotation_of_the_two_halves():
    wl = get_workload("rope")
    x = wl.generate({"tokens": 5, "heads": 3, "head_dim": 16}, 2)
    y = wl.reference(x, {})["y"]
    z = x["x"][..., :8].astype(np.float64) + 1j * x["x"][..., 8:]
    rot = z * (x["cos"].astype(np.float64) + 1j * x["sin"])[:, None, :]
    assert np.allclose(y, np.concatenate([rot.real, rot.imag], axis=-1), atol=1e-12)
    assert np.allclose(np.linalg.norm(y, axis=-1), np.linalg.norm(x["x"].astype(np.float64), axis=-1), rtol=1e-6)


def test_gemm_bias_act_is_set_by_the_shape_set_and_gelu_is_exact():
    wl = get_workload("gemm_bias")
    assert wl.attrs_for("minilm-l6-ffn-up")["act"] == 1.0 and wl.attrs_for("minilm-l6-qkv")["act"] == 0.0
    x = wl.generate({"M": 3, "N": 5, "K": 7}, 1)
    lin = wl.reference(x, {"act": 0.0})["C"]
    assert np.allclose(wl.reference(x, {"act": 1.0})["C"], gelu64(lin))
    assert abs(gelu64(np.array([1.0]))[0] - 0.8413447460685429) < 1e-12


def test_layernorm_inputs_defeat_a_one_pass_float32_variance():
    wl = get_workload("layernorm")
    x = wl.generate({"rows": 64, "hidden": 384}, 3)
    xr = x["x"]
    assert np.abs(xr.mean(axis=1)).max() > 10  # rows far from zero mean
    n = np.float32(xr.shape[1])  # sequential float32 sums, as a one-accumulator C loop does
    m = np.cumsum(xr, axis=1, dtype=np.float32)[:, -1:] / n
    var = np.cumsum(xr * xr, axis=1, dtype=np.float32)[:, -1:] / n - m * m
    naive = (xr - m) / np.sqrt(np.maximum(var, 0) + np.float32(1e-12)) * x["w"] + x["b"]
    assert wl.errors(naive, wl.reference(x, wl.attrs)["y"])[1] > wl.tolerance


@pytest.mark.parametrize("workload", sorted(BASELINES))
def test_the_engine_baselines_agree_with_the_references(workload):
    wl = get_workload(workload)
    shape_set = "test-small-gelu" if workload == "gemm_bias" else "test-small"
    attrs = wl.attrs_for(shape_set)
    for shape in [*wl.shapes(shape_set), *wl.validation_shapes[shape_set]]:
        x = wl.generate(shape, 7)
        out = {k: np.empty(s, np.float32) for k, s in wl.output_shapes(shape).items()}
        assert AXES[workload](x) == {k: int(v) for k, v in shape.items()}
        BASELINES[workload](x, out, shape, attrs)
        ref = wl.reference(x, attrs)
        for k in out:
            assert wl.errors(out[k], ref[k])[1] <= wl.tolerance, (workload, shape, k)
