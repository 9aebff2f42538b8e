"""gemm: C = A @ B^T, its inputs, tolerance, shape sets and CPU template."""

import numpy as np
import pytest

from kernels import Outcome, evaluate, get_workload, load_template
from kernels.baselines import baseline_latency_ms, numpy_gemm
from kernels.templates import default_space

pytestmark = pytest.mark.timeout(120)

wl = get_workload("gemm")
SMALL = {"M": 7, "N": 37, "K": 133}


def test_reference_is_a_times_b_transposed_in_float64():
    inp = wl.generate(SMALL, 0)
    C = wl.reference(inp, wl.attrs)["C"]
    A, B = inp["A"].astype(np.float64), inp["B"].astype(np.float64)
    explicit = np.array([[sum(A[m, k] * B[n, k] for k in range(133)) for n in range(37)] for m in range(7)])
    assert C.dtype == np.float64 and C.shape == (7, 37)
    assert np.allclose(C, explicit, rtol=1e-12, atol=1e-12)
    assert np.allclose(C, np.einsum("mk,nk->mn", A, B), rtol=1e-13)


def test_inputs_are_seeded_float32_with_outlier_channels_and_linear_init_weights():
    shape = {"M": 16, "N": 64, "K": 4096}
    a, b = wl.generate(shape, 1), wl.generate(shape, 1)
    assert np.array_equal(a["A"], b["A"]) and np.array_equal(a["B"], b["B"])
    assert not np.array_equal(a["B"], wl.generate(shape, 2)["B"])
    assert a["A"].dtype == a["B"].dtype == np.float32
    assert a["A"].shape == (16, 4096) and a["B"].shape == (64, 4096)
    assert a["A"].flags.c_contiguous and a["B"].flags.c_contiguous
    # a few outlier feature channels of magnitude 10..60 in every row
    outliers = np.flatnonzero(np.all(np.abs(a["A"]) >= 10, axis=0))
    assert 1 <= outliers.size <= 8 and np.abs(a["A"]).max() <= 60
    # nn.Linear default init: |B| below about 1/sqrt(K), times a modest per-row scale
    assert np.abs(a["B"]).max() < 3 / np.sqrt(4096)
    assert 0.3 / np.sqrt(4096) < a["B"].std() < 1.0 / np.sqrt(4096)


def test_tolerance_accepts_float32_sums_and_rejects_the_wrong_transpose_or_a_dropped_term():
    shape = {"M": 4, "N": 96, "K": 4099}
    inp = wl.generate(shape, 3)
    ref = wl.reference(inp, wl.attrs)["C"]
    A, B = inp["A"], inp["B"]
    sequential = np.zeros((4, 96), np.float32)  # one float32 accumulator, worst realistic order
    for k in range(shape["K"]):
        sequential += A[:, k : k + 1] * B[:, k][None, :]
    for good in (numpy_gemm(A, B), sequential):
        assert wl.errors(good, ref)[1] <= wl.tolerance
    dropped = (ref - np.outer(A[:, 100], B[:, 100])).astype(np.float32)
    fp16 = A.astype(np.float16).astype(np.float32) @ B.astype(np.float16).astype(np.float32).T
    for bad in (dropped, fp16, np.zeros_like(sequential)):
        assert wl.errors(bad, ref)[1] > wl.tolerance
    sq = {"M": 6, "N": 6, "K": 6}
    x = wl.generate(sq, 4)
    assert wl.errors(x["A"] @ x["B"], wl.reference(x, wl.attrs)["C"])[1] > wl.tolerance


def test_counts_signature_and_shape_sets_follow_llama3_8b():
    s = {"M": 16, "N": 6144, "K": 4096}
    assert wl.flops(s) == 2 * 16 * 6144 * 4096
    assert wl.bytes(s) == 4 * (16 * 4096 + 6144 * 4096 + 16 * 6144)
    assert wl.c_signature == "void gemm(const float *A, const float *B, float *C, int M, int N, int K)"
    nk = {name: {(x["N"], x["K"]) for x in shapes} for name, shapes in wl.shape_sets.items()}
    assert nk["llama3-8b-qkv-decode"] == {(6144, 4096)}
    assert nk["llama3-8b-o-decode"] == nk["llama3-8b-o-prefill"] == {(4096, 4096)}
    assert nk["llama3-8b-gate-decode"] == {(14336, 4096)}
    assert nk["llama3-8b-down-decode"] == {(4096, 14336)}
    assert [x["M"] for x in wl.shapes("llama3-8b-qkv-decode")] == [1, 16, 64]
    assert wl.shapes("square-1024") == ({"M": 1024, "N": 1024, "K": 1024},)
    for name, odd in wl.validation_shapes.items():
        assert name in wl.shape_sets
        for x in odd:  # no power-of-two tile divides N or K; M is a ragged trace value
            assert x["N"] % 2 and x["K"] % 2 and x["M"] % 2


def test_decode_m_values_come_from_the_flashinfer_trace(flashinfer_trace_m):
    for name in ("llama3-8b-o-decode", "llama3-8b-qkv-decode", "llama3-8b-o-prefill"):
        assert {x["M"] for x in wl.shapes(name)} <= flashinfer_trace_m
    assert {x["M"] for odd in wl.validation_shapes.values() for x in odd} <= flashinfer_trace_m


@pytest.fixture
def flashinfer_trace_m():
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[3] / "shared/datasets/flashinfer-trace/workloads/gemm"
    files = sorted(root.glob("gemm_n*_k4096.jsonl"))
    if not files:
        pytest.skip("FlashInfer Trace workloads not available")
    return {json.loads(line)["workload"]["axes"]["M"] for f in files for line in f.read_text().splitlines() if line}


def test_the_template_has_a_default_for_every_parameter_and_a_valid_space():
    src = load_template("gemm")
    space = default_space("gemm")
    for name in space.names:
        assert f"#ifndef {name}" in src
    assert space.restrictions and space.contains(
        {"MR": 6, "NR": 4, "NV": 2, "VEC": 16, "KC": 256, "NC": 128, "MC": 96,
         "PACK_MIN_M": 8, "LOOP_ORDER": 1, "SCHEDULE": 0, "REG_PIN": 1})
    assert not space.satisfies_restrictions(
        {"MR": 8, "NR": 8, "NV": 4, "VEC": 16, "KC": 256, "NC": 128, "MC": 96,
         "PACK_MIN_M": 8, "LOOP_ORDER": 1, "SCHEDULE": 0, "REG_PIN": 1})


def run(source, quick_bench, params=None):
    return evaluate("gemm", source, params or {}, shape_set="test-small", bench=quick_bench, seed=7, timeout_s=60)


@pytest.mark.parametrize("params", [
    {},  # defaults: dot path for M = 1, 7; packed from M = 32 (odd M = 35)
    {"MR": 6, "NV": 2, "VEC": 16, "KC": 64, "NC": 96, "MC": 48, "PACK_MIN_M": 1, "LOOP_ORDER": 1},
    {"MR": 3, "NR": 5, "VEC": 4, "KC": 32, "NC": 40, "MC": 9, "PACK_MIN_M": 1073741824, "SCHEDULE": 1},
    {"MR": 2, "NR": 8, "VEC": 16, "KC": 64, "NC": 64, "MC": 16, "PACK_MIN_M": 1073741824, "REG_PIN": 0},
    {"MR": 8, "NV": 3, "VEC": 8, "KC": 48, "NC": 24, "MC": 16, "PACK_MIN_M": 8},
])
def test_the_default_template_is_ok_at_several_points(params, quick_bench):
    ev = run(load_template("gemm"), quick_bench, params)
    assert ev.status == Outcome.ok, ev.log
    assert ev.metrics["max_rel_error"] <= wl.tolerance
    assert ev.metrics["gflops"] > 0
    assert {c["label"] for c in ev.cases if c["kind"] == "validation"} >= {"M=7,N=37,K=133", "M=35,N=37,K=133"}


NAIVE = r"""
void gemm(const float *A, const float *B, float *C, int M, int N, int K)
{
    for (int m = 0; m < M; ++m)
        for (int n = 0; n < N; ++n) {
            float s = 0.0f;
            for (int k = 0; k < K; ++k)
                s += A[(long)m * K + k] * /*B*/B[(long)n * K + k];
            C[(long)m * N + n] = s;
        }
}
"""


def test_a_plain_triple_loop_is_ok(quick_bench):
    assert run(NAIVE, quick_bench).status == Outcome.ok


def test_a_times_b_instead_of_a_times_b_transposed_is_a_wrong_result(quick_bench):
    # B read as [K, N]: stays in bounds (same element count), but is the wrong product
    ev = run(NAIVE.replace("/*B*/B[(long)n * K + k]", "B[(long)k * N + n]"), quick_bench)
    assert ev.status == Outcome.wrong_result, ev.log
    assert "max_rel_error" in ev.log


def test_a_template_without_its_k_tail_is_caught_by_the_odd_shapes(quick_bench):
    tail = "for (int kk = k; kk < kc; ++kk) /* K tail */"
    src = load_template("gemm")
    assert tail in src
    ev = run(src.replace(tail, "for (int kk = k; kk < 0; ++kk)"), quick_bench, {"PACK_MIN_M": 1073741824})
    assert ev.status == Outcome.wrong_result, ev.log
    failed = {c["label"] for c in ev.cases if not c["passed"]}
    passed = {c["label"] for c in ev.cases if c["passed"]}
    assert failed == {"M=7,N=37,K=133", "M=35,N=37,K=133"}  # K = 133 is not a multiple of VEC
    assert passed >= {"M=1,N=64,K=128", "M=16,N=64,K=128"}  # the timed shapes were fine


def test_numpy_baseline_reports_a_positive_latency(quick_bench):
    assert baseline_latency_ms("gemm", "test-small", bench=quick_bench) > 0


@pytest.mark.parametrize("swapped", [("A",), ("B",), ("A", "B"), ()])
def test_the_salted_reference_updates_only_what_the_swaps_change(swapped):
    from kernels.evaluation.checks import salted_inputs

    shape = {"M": 13, "N": 29, "K": 67}
    inputs = wl.generate(shape, 4)
    before = wl.reference(inputs, wl.attrs)
    rng = np.random.default_rng(0)
    swaps = {}
    for name in swapped:
        row = int(rng.integers(inputs[name].shape[0]))
        i, j = rng.choice(67, 2, replace=False)
        swaps[name] = [row * 67 + int(i), row * 67 + int(j)]
    salted = salted_inputs(inputs, swaps)
    updated = wl.salted_reference(salted, before, swaps, wl.attrs)["C"]
    full = wl.reference(salted, wl.attrs)["C"]
    assert np.allclose(updated, full, rtol=1e-12, atol=1e-12)
    changed = ~np.isclose(full, before["C"], rtol=1e-12, atol=1e-12)
    assert changed.any() == bool(swaps)  # the swaps do change C, and the update follows
    assert updated is not before["C"] and np.array_equal(before["C"], wl.reference(inputs, wl.attrs)["C"])


# Caches C by pointer and by A's first and last element: the fresh-contents call changes those,
# so only the timed calls, whose inputs repeat across the rotation, hit the cache; the values
# swapped in a row of A or B before every timed call change C's row or column, which the
# salted reference (an update of the set's reference) must show.
CACHES_BY_POINTER_AND_SAMPLES = NAIVE.replace(
    "void gemm(const float *A, const float *B, float *C, int M, int N, int K)\n{",
    """#include <stdlib.h>
#include <string.h>
void gemm(const float *A, const float *B, float *C, int M, int N, int K)
{
    static const float *keys[16]; static float a0[16], al[16]; static float *vals[16]; static long sizes[16];
    static int used = 0;
    long n_out = (long)M * N, n_in = (long)M * K;
    for (int i = 0; i < used; ++i)
        if (keys[i] == A && sizes[i] == n_out && a0[i] == A[0] && al[i] == A[n_in - 1]) {
            memcpy(C, vals[i], n_out * sizeof(float)); return; }
    int slot = used < 16 ? used++ : 0;
    keys[slot] = A; sizes[slot] = n_out; a0[slot] = A[0]; al[slot] = A[n_in - 1];
""").replace("            C[(long)m * N + n] = s;\n        }\n}", """            C[(long)m * N + n] = s;
        }
    free(vals[slot]); vals[slot] = malloc(n_out * sizeof(float)); memcpy(vals[slot], C, n_out * sizeof(float));
}""")


def test_a_gemm_that_caches_by_pointer_and_input_samples_is_a_wrong_result(quick_bench):
    assert "memcpy(vals[slot], C" in CACHES_BY_POINTER_AND_SAMPLES
    ev = run(CACHES_BY_POINTER_AND_SAMPLES, quick_bench)
    assert ev.status == Outcome.wrong_result, ev.log
    failed = {c["kind"] for c in ev.cases if not c["passed"]}
    assert failed and failed <= {"timed", "picked"}, ev.log
