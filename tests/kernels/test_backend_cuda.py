"""The CUDA backend: static evidence, occupancy, launch plans, templates, evaluation.

Without a GPU: nvcc's resource report and PTX (skipped without nvcc), the occupancy rules
against hand-computed values and against ``cuda_occupancy.h`` itself, launch-plan parsing
and resolution, the ``.cu`` templates run through a CPU emulation of the CUDA execution
model (skipped without g++), and the child runner plus the evaluator's judge driven
in-process with a stand-in cupy. With a GPU (``-m gpu``): real evaluations.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import cuda_emu
import numpy as np
import pytest

from kernels.backends import BACKENDS, get_backend
from kernels.backends.cuda import (
    CompileError,
    CompileOptions,
    CudaBackend,
    LaunchPlan,
    LaunchPlanError,
    plan_env,
    plan_names,
    roofline_for,
    target_arch,
)
from kernels.evaluation import static
from kernels.outcome import Outcome
from kernels.space import format_defines
from kernels.templates import default_launch_plan, default_space, load_template
from kernels.workloads import get_workload

NVCC = static.nvcc_path()
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not found (set KERNELS_NVCC)")
needs_gxx = pytest.mark.skipif(not cuda_emu.available(), reason="g++ not found (CUDA emulation)")
OCC_HEADER = next((p for p in (
    *([Path(NVCC).resolve().parent.parent / "include"] if NVCC else []),
    *(Path(os.environ[v]) / "include" for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)),
    Path("/usr/local/cuda/include"),
) if (p / "cuda_occupancy.h").is_file()), None)
OCC_HEADER = OCC_HEADER / "cuda_occupancy.h" if OCC_HEADER else None


def _have_gpu() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001 - no cupy, no driver, no device
        return False


HAVE_GPU = _have_gpu()

SMALL = r"""
__constant__ float table[16];
extern "C" __global__ void with_smem(const float *x, float *y, int n) {
    __shared__ float s[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    s[threadIdx.x] = i < n ? x[i] + table[i % 16] : 0.0f;
    __syncthreads();
    if (i < n) y[i] = s[(threadIdx.x + 1) % 256];
}
extern "C" __global__ void with_stack(const float *x, float *y, int n, int k) {
    float local[64];
    for (int j = 0; j < 64; ++j) local[j] = x[(j * 7) % n];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = local[(i + k) & 63];
}
"""


# -- registry, targets, fingerprint --------------------------------------------------------


def test_the_registry_builds_the_cuda_backend_lazily_without_cupy():
    assert BACKENDS["cuda"] == "kernels.backends.cuda:CudaBackend"
    be = get_backend("cuda")
    assert isinstance(be, CudaBackend) and be.target == "cuda-sm90" and be.arch == "sm_90"
    assert be.supports("cuda-sm90") and be.supports("cuda-sm100") and be.supports("cuda-sm90a")
    assert not be.supports("cpu-x86_64") and not be.supports("cuda-sm91") and not be.supports("replay:x")


@pytest.mark.parametrize("target, arch", [("cuda-sm90", "sm_90"), ("cuda-sm100", "sm_100"), ("cuda-sm90a", "sm_90a")])
def test_targets_name_architectures(target, arch):
    assert target_arch(target) == arch
    assert CudaBackend(target).arch == arch


@pytest.mark.parametrize("target, why", [("cuda-90", "must look like"), ("cuda-sm91", "unknown CUDA target"), ("", "must look like")])
def test_bad_targets_say_what_is_expected(target, why):
    with pytest.raises(ValueError, match=why):
        target_arch(target)


def test_fingerprint_describes_nvcc_and_the_target_without_a_gpu():
    fp = CudaBackend("cuda-sm100").fingerprint()
    assert fp["backend"] == "cuda" and fp["target"] == "cuda-sm100" and fp["arch"] == "sm_100"
    assert "-arch=sm_100" in fp["flags"]
    if NVCC:
        assert "release" in fp["nvcc_version"]
    if not HAVE_GPU:
        assert fp["gpu"] is None
    json.dumps(fp)


def test_rooflines_come_from_datasheets_and_can_be_overridden(monkeypatch):
    h200 = roofline_for("NVIDIA H200", "sm_90")
    assert (h200.peak_gbps, h200.peak_gflops) == (4800.0, 67_000.0) and "H200" in h200.source
    assert roofline_for("NVIDIA H100 80GB HBM3", "sm_90").peak_gbps == 3350.0
    assert roofline_for("NVIDIA H100 PCIe", "sm_90").peak_gbps == 2000.0
    assert roofline_for(None, "sm_90").device == "H200 SXM"  # unknown part: the fastest of the arch
    monkeypatch.setenv("KERNELS_CUDA_PEAK_GBPS", "4300")
    assert roofline_for("NVIDIA H200", "sm_90").peak_gbps == 4300.0
    limits = CudaBackend().physical_limits()
    assert limits["gbps"] == 4300.0 and limits["copy_gbps"] == 4300.0 and limits["gflops"] >= limits["fma_gflops"]


# -- occupancy -----------------------------------------------------------------------------

# Hand-computed with the rules of the CUDA Occupancy Calculator (cuda_occupancy.h) for sm_90:
# 64 warps, 32 blocks, 64 Ki registers in 4 sub-partitions allocated per warp in units of
# 256, 228 KiB shared memory with 1 KiB reserved per block in units of 128 bytes.
OCCUPANCY_CASES = [
    # threads, regs, static smem, dynamic smem, barriers -> blocks, limiting factor
    # 8 warps/block; 32 regs * 32 = 1024 per warp, 16 warps per sub-partition -> 64 warps
    (256, 32, 0, 0, 1, 8, "warps"),
    # 64 regs: 2048 per warp, 8 per sub-partition -> 32 warps -> 4 blocks (50%)
    (256, 64, 0, 0, 1, 4, "registers"),
    # 37 regs: 1184 -> 1280 per warp, 12 per sub-partition -> 48 warps -> 6 blocks (75%)
    (256, 37, 0, 0, 1, 6, "registers"),
    # 255 regs: 8160 -> 8192, 2 warps per sub-partition -> 8 warps -> 2 blocks of 4 warps
    (128, 255, 0, 0, 1, 2, "registers"),
    # 72 regs * 32 threads * 32 warps = 73728 > 65536 registers per block: cannot launch
    (1024, 72, 0, 0, 1, 0, "launch_fails"),
    # 64 KiB dynamic + 1 KiB reserved = 66560 B per block -> floor(233472 / 66560) = 3
    (128, 32, 0, 65536, 1, 3, "shared_memory"),
    # 8320 B static + 1 KiB -> 9344 B -> 24 blocks; warps allow 16 of 4 warps -> 16
    (128, 40, 8320, 0, 1, 12, "registers"),
    # 1 warp per block: 32 blocks (the block limit) = 32 warps = 50%
    (32, 16, 0, 0, 0, 32, "blocks"),
    # 3 warps: floor(64 / 3) = 21 blocks, 63 warps
    (96, 32, 0, 0, 1, 21, "warps"),
    # more threads than a block may have
    (2048, 16, 0, 0, 1, 0, "launch_fails"),
    # 228 KiB - 1 KiB reserved is the largest dynamic size; 1 byte more cannot launch
    (256, 32, 0, 227 * 1024, 1, 1, "shared_memory"),
    (256, 32, 0, 227 * 1024 + 1, 1, 0, "launch_fails"),
]


@pytest.mark.parametrize("threads, regs, smem_s, smem_d, bars, blocks, factor", OCCUPANCY_CASES)
def test_occupancy_matches_hand_computed_values(threads, regs, smem_s, smem_d, bars, blocks, factor):
    occ = static.occupancy("sm_90", threads, regs, smem_s, smem_d, bars)
    assert occ["active_blocks_per_sm"] == blocks
    assert occ["limiting_factor"] == factor
    warps = -(-threads // 32)
    assert occ["occupancy"] == pytest.approx(blocks * warps / 64)
    assert (occ["reason"] != "") == (blocks == 0)


def test_occupancy_details_of_a_register_limited_launch():
    occ = static.occupancy("sm_90", 256, 64)
    assert occ["limits"] == {"warps": 8, "blocks": 32, "registers": 4, "shared_memory": 228, "barriers": 64}
    assert occ["regs_allocated_per_block"] == 2048 * 8 and occ["smem_allocated_per_block"] == 1024
    assert occ["active_warps_per_sm"] == 32 and occ["occupancy"] == 0.5


def test_sm120_has_fewer_warps_and_less_shared_memory():
    assert static.occupancy("sm_120", 256, 32)["active_blocks_per_sm"] == 6  # 48 warps / 8
    assert static.occupancy("sm_120", 128, 32, 0, 100 * 1024)["active_blocks_per_sm"] == 0  # > 99 KiB


@needs_nvcc
@pytest.mark.skipif(not OCC_HEADER or not OCC_HEADER.is_file() or not shutil.which("g++"),
                    reason="needs cuda_occupancy.h and g++")
def test_occupancy_agrees_with_cuda_occupancy_h(tmp_path):
    """Cross-check the port against NVIDIA's header on a grid of launch configurations."""
    prog = tmp_path / "occ.cpp"
    prog.write_text(f'#include <cstdio>\n#include "{OCC_HEADER}"\n' + r"""
int main() {
  int major, minor, tpsm, bps, smsm, optin, threads, regs, sstat, sdyn, bars;
  while (scanf("%d %d %d %d %d %d %d %d %d %d %d", &major, &minor, &tpsm, &bps, &smsm, &optin,
               &threads, &regs, &sstat, &sdyn, &bars) == 11) {
    cudaOccDeviceProp p;
    p.computeMajor = major; p.computeMinor = minor; p.maxThreadsPerBlock = 1024;
    p.maxThreadsPerMultiprocessor = tpsm; p.regsPerBlock = 65536; p.regsPerMultiprocessor = 65536;
    p.warpSize = 32; p.sharedMemPerBlock = 49152; p.sharedMemPerMultiprocessor = smsm; p.numSms = 132;
    p.sharedMemPerBlockOptin = optin; p.reservedSharedMemPerBlock = 1024;
    cudaOccFuncAttributes a; a.maxThreadsPerBlock = 1024; a.numRegs = regs; a.sharedSizeBytes = sstat;
    a.partitionedGCConfig = PARTITIONED_GC_OFF; a.shmemLimitConfig = FUNC_SHMEM_LIMIT_OPTIN;
    a.maxDynamicSharedSizeBytes = sdyn; a.numBlockBarriers = bars;
    cudaOccDeviceState s; cudaOccResult r;
    int e = cudaOccMaxActiveBlocksPerMultiprocessor(&r, &p, &a, &s, threads, sdyn);
    printf("%d %d\n", e, e == 0 ? r.activeBlocksPerMultiprocessor : -1);
  }
}
""")
    exe = tmp_path / "occ"
    subprocess.run(["g++", "-O1", "-o", str(exe), str(prog)], check=True, capture_output=True)
    rng = np.random.default_rng(0)
    rows, expected = [], []
    for arch in ("sm_80", "sm_86", "sm_90", "sm_100", "sm_120"):
        lim = static.arch_limits(arch)
        for _ in range(300):
            threads = int(rng.choice([32, 64, 96, 128, 160, 256, 384, 512, 640, 768, 1024]))
            regs = int(rng.integers(8, 256))
            sstat = int(rng.choice([0, 1024, 8320, 16384, 49152]))
            sdyn = int(rng.choice([0, 4096, 65536, 100 * 1024, 160 * 1024, 227 * 1024]))
            bars = int(rng.integers(0, 3))
            rows.append(f"{lim.compute_capability[0]} {lim.compute_capability[1]} {lim.max_threads_per_sm} "
                        f"{lim.max_blocks_per_sm} {lim.smem_per_sm} {lim.smem_per_block_optin} "
                        f"{threads} {regs} {sstat} {sdyn} {bars}")
            expected.append(static.occupancy(arch, threads, regs, sstat, sdyn, bars)["active_blocks_per_sm"])
    out = subprocess.run([str(exe)], input="\n".join(rows), capture_output=True, text=True, check=True).stdout.split("\n")
    got = [int(line.split()[1]) for line in out if line.strip()]
    mismatches = [(r, g, e) for r, g, e in zip(rows, got, expected) if g != e]
    assert len(got) == len(rows) and not mismatches[:5]


# -- nvcc static evidence ------------------------------------------------------------------


def test_the_ptxas_report_parser_reads_both_formats():
    new = """ptxas info    : Compiling entry function 'k' for 'sm_90'
ptxas info    : Function properties for k
    256 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 256 bytes cumulative stack size, 1024 bytes smem
"""
    old = """ptxas info    : Compiling entry function '_Z1kPf' for 'sm_80'
ptxas info    : Function properties for _Z1kPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 18 registers, 2048 bytes smem, 360 bytes cmem[0], 8 bytes cmem[2]
"""
    k = static.parse_ptxas_report(new)["k"]
    assert k == {"registers": 40, "barriers": 1, "cumulative_stack_bytes": 256, "smem_static_bytes": 1024,
                 "stack_frame_bytes": 256, "spill_stores": 8, "spill_loads": 12}
    o = static.parse_ptxas_report(old)["_Z1kPf"]
    assert o["registers"] == 18 and o["smem_static_bytes"] == 2048 and o["cmem_0_bytes"] == 360 and o["cmem_2_bytes"] == 8


@needs_nvcc
def test_resource_usage_reports_registers_shared_memory_stack_and_constants():
    rep = static.resource_usage(SMALL, arch="sm_90")
    smem, stack = rep["kernels"]["with_smem"], rep["kernels"]["with_stack"]
    assert rep["language"] == "cuda" and "release" in rep["nvcc"]
    assert smem["smem_static_bytes"] == 1024 and smem["barriers"] == 1 and 0 < smem["registers"] <= 255
    assert smem["stack_frame_bytes"] == 0 and smem["spill_stores"] == 0
    assert stack["stack_frame_bytes"] >= 256  # the run-time indexed array lives in local memory
    assert rep["constant_bytes"] == 64  # __constant__ float table[16]
    assert smem["param_cmem_bytes"] > 0
    again = static.resource_usage(SMALL, arch="sm_90")
    assert again["cached"] and again["kernels"] == rep["kernels"]
    assert static.resource_usage(SMALL, "#define UNUSED 1\n", arch="sm_100")["arch"] == "sm_100"



@needs_nvcc
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (nvcc runs as the sandbox user)")
def test_nvcc_cannot_read_what_the_sandbox_user_cannot(tmp_path):
    secret = tmp_path / "secret.h"
    secret.write_text("#error TOPSECRET-4242\n")
    secret.chmod(0o600)
    with pytest.raises(static.CompileError) as err:
        static.resource_usage(f'#include "{secret}"\n' + SMALL, arch="sm_90")
    assert "TOPSECRET" not in err.value.log and "ermission denied" in err.value.log


HEAVY = r"""
extern "C" __global__ void heavy(const float *x, float *y) {
    float acc[64];
#pragma unroll
    for (int j = 0; j < 64; ++j) acc[j] = x[threadIdx.x + j * 128];
#pragma unroll
    for (int k = 0; k < 8; ++k)
#pragma unroll
        for (int j = 0; j < 64; ++j) acc[j] = acc[j] * acc[(j + 1) & 63] + 1.0f;
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < 64; ++j) s += acc[j];
    y[threadIdx.x] = s;
}
"""


@needs_nvcc
def test_register_caps_cause_spills_that_are_reported():
    free = static.resource_usage(HEAVY, arch="sm_90")["kernels"]["heavy"]
    capped = static.resource_usage(HEAVY, arch="sm_90", options=("-maxrregcount=32",))["kernels"]["heavy"]
    assert free["spill_stores"] == 0 and free["registers"] > 64
    assert capped["registers"] <= 32 and capped["spill_stores"] > 0 and capped["spill_loads"] > 0
    occ_free = static.occupancy("sm_90", 128, free["registers"])
    assert occ_free["limiting_factor"] == "registers" and occ_free["occupancy"] < 1


@needs_nvcc
def test_compile_errors_carry_the_nvcc_log():
    with pytest.raises(CompileError) as info:
        static.resource_usage('extern "C" __global__ void k(float *y) { y[0] = undefined_name; }')
    assert "undefined_name" in info.value.log and "error" in info.value.log


@needs_nvcc
def test_a_failing_source_costs_one_nvcc_run(monkeypatch):
    bad = 'extern "C" __global__ void k(float *y) { y[0] = not_declared_anywhere; }' + f"// {os.getpid()}-{id(object())}"
    with pytest.raises(CompileError) as first:
        static.resource_usage(bad)
    with pytest.raises(CompileError):
        static.ptx(bad)  # the PTX view records its own failure
    monkeypatch.setattr(static, "_run_nvcc", lambda *a, **k: pytest.fail("nvcc ran again for a known failure"))
    with pytest.raises(CompileError, match="cached") as again:
        static.resource_usage(bad)
    assert again.value.log == first.value.log and "not_declared_anywhere" in again.value.log
    with pytest.raises(CompileError, match="cached"):
        static.ptx(bad)


@needs_nvcc
def test_ptx_is_generated_for_display_and_ptx_sources_assemble():
    text = static.ptx(SMALL, arch="sm_90")
    assert ".entry with_smem" in text and ".target sm_90" in text
    assert static.ptx(text) == text  # PTX in, PTX out
    rep = static.resource_usage(text, arch="sm_90")
    assert rep["language"] == "ptx" and rep["kernels"]["with_smem"]["smem_static_bytes"] == 1024


@needs_nvcc
@pytest.mark.parametrize("workload, params, kernel, threads", [
    ("rmsnorm", {"BLOCK_SIZE": 256, "THREADS_PER_ROW": 256, "VEC": 4, "UNROLL": 2, "USE_SMEM": 0}, "rmsnorm_kernel", 256),
    ("rmsnorm", {"BLOCK_SIZE": 128, "THREADS_PER_ROW": 32, "VEC": 4, "UNROLL": 1, "USE_SMEM": 1}, "rmsnorm_kernel", 128),
    ("gemm", {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 16, "THREAD_M": 4, "THREAD_N": 4}, "gemm_kernel", 256),
    ("gemm", {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 8, "THREAD_M": 8, "THREAD_N": 8}, "gemm_kernel", 256),
    ("kda", {"DV_BLOCK": 8, "THREADS_PER_COL": 8, "VEC": 4, "CHUNK": 32, "ASYNC_COPY": 1}, "kda_kernel", 64),
    ("kda", {"DV_BLOCK": 64, "THREADS_PER_COL": 8, "VEC": 4, "CHUNK": 16, "PREP": 1, "PIPELINE": 1}, "kda_kernel", 512),
])
def test_static_evidence_of_the_templates(workload, params, kernel, threads):
    ev = static.static_evidence(load_template(workload, "cuda"), format_defines(params), arch="sm_90",
                                kernel=kernel, block_threads=threads)
    assert ev["spill_stores"] == 0 and ev["spill_loads"] == 0 and ev["stack_frame_bytes"] == 0
    assert 0 < ev["occupancy"] <= 1 and ev["active_blocks_per_sm"] >= 1
    assert ev["limiting_factor"] in ("warps", "registers", "shared_memory", "blocks", "barriers")
    if workload == "gemm":
        assert ev["smem_static_bytes"] >= 16 * 64 * 4 * 2  # both k-major tiles


@needs_nvcc
def test_static_evidence_names_missing_kernels():
    with pytest.raises(KeyError, match="found: with_smem, with_stack|found: with_stack, with_smem"):
        static.static_evidence(SMALL, kernel="nope")


# -- launch plans --------------------------------------------------------------------------

RMS = get_workload("rmsnorm")
RMS_PARAMS = {"BLOCK_SIZE": 128, "THREADS_PER_ROW": 32, "VEC": 4, "UNROLL": 2, "USE_SMEM": 1}


def _plan(d, params=RMS_PARAMS, wl=RMS):
    return LaunchPlan.from_dict(d, plan_names(wl, params))


def _launch(**kw):
    base = {"kernel": "k", "grid": ["rows"], "block": ["BLOCK_SIZE"], "args": ["x", "w", "y", "rows", "hidden", "eps"]}
    base.update(kw)
    return {"launches": [base]}


@pytest.mark.parametrize("plan, why", [
    ([], "must be an object"),
    ({}, "needs 'launches'"),
    ({"launches": []}, "needs 'launches'"),
    ({"launches": [{}], "extra": 1}, "unknown keys"),
    (_launch(kernel="not a name"), r"launches\[0\].kernel"),
    (_launch(grid=[1, 2, 3, 4]), r"launches\[0\].grid: must be a list of 1 to 3"),
    (_launch(block=[1.5]), r"launches\[0\].block\[0\]: must be an integer or an expression"),
    (_launch(grid=["__import__('os')"]), "call to '__import__' is not allowed"),
    (_launch(grid=["rows.bit_length()"]), "not allowed"),
    (_launch(grid=["nope + 1"]), "unknown parameter 'nope'"),
    (_launch(grid=["rows +"]), "syntax error"),
    (_launch(args=[{"expr": "rows", "dtype": "int8"}]), "dtype 'int8' not one of"),
    (_launch(args=[{"value": 1}]), "needs 'expr'"),
    (_launch(surprise=1), "unknown keys"),
    ({"launches": [_launch()["launches"][0]], "scratch": {"1bad": "4"}}, "scratch buffer name"),
])
def test_malformed_launch_plans_are_rejected_with_the_path(plan, why):
    with pytest.raises(LaunchPlanError, match=why):
        _plan(plan)


def test_syntax_only_parsing_defers_names_to_resolution():
    plan = LaunchPlan.from_dict(_launch(grid=["mystery"]))
    with pytest.raises(LaunchPlanError, match="unknown parameter 'mystery'"):
        plan.resolve(plan_env(RMS, {"rows": 2, "hidden": 8}, RMS_PARAMS), ["x", "w", "y"])


@pytest.mark.parametrize("launch, why", [
    ({"block": ["2048"]}, r"block\[0\] '2048' = 2048: must be in \[1, 1024\]"),
    ({"block": ["32", "32", "2"]}, "2048 threads per block exceed 1024"),
    ({"grid": ["rows / 2"]}, "must be an integer"),
    ({"grid": ["rows - rows"]}, r"must be in \[1, "),
    ({"grid": ["1", "70000"]}, r"grid\[1\]"),
    ({"shared_mem_bytes": "hidden * 1000"}, r"shared_mem_bytes .* must be in \[0, 232448\]"),
    ({"grid": ["rows // (BLOCK_SIZE - 128)"]}, "division by zero|cannot be evaluated"),
    ({"args": [{"expr": "hidden * 2 ** 30", "dtype": "int32"}]}, "out of range for int32"),
    ({"args": [{"expr": "eps", "dtype": "int64"}]}, "needs an integer"),
    ({"grid": ["rows > 1"]}, "must be an integer"),
])
def test_plans_that_cannot_launch_fail_at_resolution(launch, why):
    plan = _plan(_launch(**launch))
    with pytest.raises(LaunchPlanError, match=why):
        plan.resolve(plan_env(RMS, {"rows": 7, "hidden": 4099}, RMS_PARAMS), ["x", "w", "y"])


def test_the_rmsnorm_template_plan_resolves_to_launch_sizes():
    plan = _plan(default_launch_plan("rmsnorm", RMS_PARAMS))
    (l,), scratch = plan.resolve(plan_env(RMS, {"rows": 7, "hidden": 4099}, RMS_PARAMS), ["x", "w", "y"])
    assert scratch == {} and l.kernel == "rmsnorm_kernel"
    assert l.grid == (2, 1, 1) and l.block == (128, 1, 1) and l.block_threads == 128
    assert l.shared_mem_bytes == 4 * 4099 * 4  # 4 rows per block cached in shared memory
    assert l.args == (("buffer", "x"), ("buffer", "w"), ("buffer", "y"), ("int32", 7), ("int32", 4099),
                      ("float32", pytest.approx(1e-5)))
    too_big = {**RMS_PARAMS, "BLOCK_SIZE": 1024}  # 32 rows of 16 KiB do not fit: no cache
    (l,), _ = _plan(default_launch_plan("rmsnorm", too_big), too_big).resolve(
        plan_env(RMS, {"rows": 512, "hidden": 4096}, too_big), ["x", "w", "y"])
    assert l.shared_mem_bytes == 0
    assert LaunchPlan.from_dict(plan.to_dict()) == plan
    assert json.loads(json.dumps(l.to_json())) == l.to_json()


def test_the_gemm_split_k_plan_adds_a_reduction_and_scratch():
    gemm = get_workload("gemm")
    params = {"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 16, "THREAD_M": 2, "THREAD_N": 4, "VEC": 4, "SMEM_PAD": 1,
              "USE_SMEM": 1, "SPLIT_K": 4}
    plan = LaunchPlan.from_dict(default_launch_plan("gemm", params), plan_names(gemm, params))
    assert plan.kernels == ("gemm_kernel", "gemm_splitk_reduce")
    (mm, red), scratch = plan.resolve(plan_env(gemm, {"M": 1, "N": 4096, "K": 4096}, params), ["A", "B", "C"])
    assert mm.grid == (64, 1, 4) and mm.block == (256, 1, 1) and mm.args[2] == ("buffer", "partial")
    assert mm.args[-1] == ("int32", 1024)  # k per split
    assert red.grid == (16, 1, 1) and red.args[:2] == (("buffer", "partial"), ("buffer", "C"))
    assert scratch == {"partial": 4 * 4096}
    one = {**params, "SPLIT_K": 1}
    assert LaunchPlan.from_dict(default_launch_plan("gemm", one)).kernels == ("gemm_kernel",)


KDA_PARAMS = {"DV_BLOCK": 8, "THREADS_PER_COL": 8, "VEC": 4, "CHUNK": 32, "STATE_SMEM": 0, "ASYNC_COPY": 1,
              "FAST_EXP": 0, "PREP": 0, "PIPELINE": 1}


def test_the_kda_plan_splits_value_columns_and_sizes_the_staging_buffers():
    kda = get_workload("kda")
    buffers = list(kda.inputs) + list(kda.outputs)
    plan = LaunchPlan.from_dict(default_launch_plan("kda", KDA_PARAMS), plan_names(kda, KDA_PARAMS))
    (l,), scratch = plan.resolve(plan_env(kda, {"batch_heads": 4, "seq": 2048, "dk": 128, "dv": 128}, KDA_PARAMS),
                                 buffers, arch="sm_90")
    assert scratch == {} and l.kernel == "kda_kernel"
    assert l.grid == (4 * 16, 1, 1) and l.block == (64, 1, 1)  # 16 blocks of 8 value columns per head
    assert l.shared_mem_bytes == 2 * 32 * (3 * 128 + 8 + 2) * 4  # two buffers, state in registers
    assert [a for _, a in l.args] == ["q", "k", "v", "g", "beta", "o", "state", 4, 2048, 128, 128]
    # ragged head dimensions: rows padded to THREADS_PER_COL * VEC, the slab when dk > 128
    (l,), _ = plan.resolve(plan_env(kda, {"batch_heads": 3, "seq": 37, "dk": 131, "dv": 13}, KDA_PARAMS), buffers)
    assert l.grid == (3 * 2, 1, 1) and l.shared_mem_bytes == 2 * 32 * (3 * 160 + 8 + 2) * 4 + 160 * 8 * 4
    prep = {**KDA_PARAMS, "PREP": 1, "STATE_SMEM": 1, "PIPELINE": 0}
    plan = LaunchPlan.from_dict(default_launch_plan("kda", prep), plan_names(kda, prep))
    assert plan.kernels == ("kda_prep_kernel", "kda_kernel")
    (pre, main), scratch = plan.resolve(
        plan_env(kda, {"batch_heads": 4, "seq": 512, "dk": 128, "dv": 128}, prep), buffers)
    assert scratch == {"decay": 4 * 512 * 128, "qk": 4 * 512}
    assert pre.grid == (256, 1, 1)  # one warp per token
    assert pre.args[3:] == (("buffer", "decay"), ("buffer", "qk"), ("int32", 2048), ("int32", 128))
    assert main.args[3:6] == (("buffer", "decay"), ("buffer", "beta"), ("buffer", "qk"))
    assert main.shared_mem_bytes == 2 * 32 * (3 * 128 + 8 + 2) * 4 + 128 * 8 * 4


def test_names_used_twice_are_rejected():
    plan = _plan({**_launch(), "scratch": {"x": "4"}})
    with pytest.raises(LaunchPlanError, match="names used twice"):
        plan.resolve(plan_env(RMS, {"rows": 2, "hidden": 8}, RMS_PARAMS), ["x", "w", "y"])
    with pytest.raises(LaunchPlanError, match="shadow axes"):
        plan_env(RMS, {"rows": 2, "hidden": 8}, {"rows": 3})


def test_compile_options_are_typed_and_whitelisted():
    assert CompileOptions.parse(None, arch="sm_100") == CompileOptions("sm_100", "nvrtc", ())
    opts = CompileOptions.parse({"compiler": "nvcc", "extra": ["--use_fast_math", "--maxrregcount=64"]})
    assert opts.nvcc_flags() == ("--use_fast_math", "-maxrregcount=64")
    with pytest.raises(ValueError, match="needs compiler='nvcc'"):
        CompileOptions("sm_90a", "nvrtc")
    with pytest.raises(ValueError, match="not allowed"):
        CompileOptions(extra=("-I/etc",))
    with pytest.raises(ValueError, match="unknown keys"):
        CompileOptions.parse({"flags": []})


# -- templates and their spaces ------------------------------------------------------------

CUDA_WORKLOADS = ("rmsnorm", "softmax", "gemm", "fused_add_rmsnorm", "kda")


def test_default_space_keeps_its_cpu_signature_and_adds_cuda():
    assert default_space("rmsnorm") == default_space("rmsnorm", "cpu")
    assert "BLOCK_SIZE" in default_space("rmsnorm", "cuda").names
    with pytest.raises(KeyError, match="known: cpu, cuda"):
        default_space("rmsnorm", "tpu")
    with pytest.raises(KeyError, match="no CUDA"):
        default_launch_plan("layernorm", {})


@pytest.mark.parametrize("workload", CUDA_WORKLOADS)
def test_sampled_points_of_every_cuda_space_resolve_at_every_shape(workload):
    wl = get_workload(workload)
    space = default_space(workload, "cuda")
    shapes = [s for sets in (wl.shape_sets, wl.validation_shapes) for ss in sets.values() for s in ss]
    buffers = list(wl.inputs) + list(wl.outputs)
    for params in space.sample(np.random.default_rng(1), 40):
        plan = LaunchPlan.from_dict(default_launch_plan(workload, params), plan_names(wl, params))
        for shape in shapes:
            launches, _ = plan.resolve(plan_env(wl, shape, params), buffers, arch="sm_90")
            assert all(l.block_threads <= 1024 for l in launches)


@needs_nvcc
@pytest.mark.parametrize("workload", CUDA_WORKLOADS)
def test_sampled_points_of_every_cuda_space_compile_without_spills(workload):
    space = default_space(workload, "cuda")
    src = load_template(workload, "cuda")
    for params in space.sample(np.random.default_rng(2), 3):
        rep = static.resource_usage(src, format_defines(params), arch="sm_90")
        plan = LaunchPlan.from_dict(default_launch_plan(workload, params))
        assert set(plan.kernels) <= set(rep["kernels"])
        assert all(k["spill_stores"] == 0 for k in rep["kernels"].values()), (params, rep["kernels"])


def _nvrtc():
    """libnvrtc via ctypes: ``$KERNELS_NVRTC_LIB``, the CUDA toolkit, or the loader path."""
    import ctypes
    import ctypes.util
    import glob

    cands = [os.environ.get("KERNELS_NVRTC_LIB"), ctypes.util.find_library("nvrtc"),
             *glob.glob("/usr/local/cuda*/lib64/libnvrtc.so*")]
    for c in cands:
        if c:
            try:
                return ctypes.CDLL(c)
            except OSError:
                continue
    return None


NVRTC = _nvrtc()


@pytest.mark.skipif(NVRTC is None, reason="libnvrtc not found (set KERNELS_NVRTC_LIB)")
@pytest.mark.parametrize("workload", CUDA_WORKLOADS)
def test_the_templates_compile_with_nvrtc_as_cupy_does(workload):
    """NVRTC has no host headers and its own builtins: what nvcc accepts it may not."""
    import ctypes

    src = load_template(workload, "cuda")
    for params in [{}, *default_space(workload, "cuda").sample(np.random.default_rng(3), 2)]:
        prog = ctypes.c_void_p()
        assert NVRTC.nvrtcCreateProgram(ctypes.byref(prog), (format_defines(params) + src).encode(),
                                        b"kern.cu", 0, None, None) == 0
        opts = (ctypes.c_char_p * 1)(b"-arch=sm_90")
        rc = NVRTC.nvrtcCompileProgram(prog, 1, opts)
        size = ctypes.c_size_t()
        NVRTC.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        NVRTC.nvrtcGetProgramLog(prog, log)
        NVRTC.nvrtcDestroyProgram(ctypes.byref(prog))
        assert rc == 0, (params, log.value.decode())


# -- the templates, run through a CPU emulation of CUDA ------------------------------------

G = 64  # guard elements around every buffer in the emulation tests


def _guarded(a: np.ndarray | None, n: int) -> np.ndarray:
    buf = np.empty(n + 2 * G, np.float32)
    buf[:G].view(np.uint32)[:] = 0xA5A5A5A5
    buf[G + n:].view(np.uint32)[:] = 0xA5A5A5A5
    buf[G:G + n] = np.nan if a is None else a.reshape(-1)
    return buf


def _emulate(workload: str, params: dict, shape: dict, tmp_path: Path, seed: int = 5):
    wl = get_workload(workload)
    plan = LaunchPlan.from_dict(default_launch_plan(workload, params), plan_names(wl, params))
    launches, scratch = plan.resolve(plan_env(wl, shape, params), list(wl.inputs) + list(wl.outputs))
    inputs = wl.generate(shape, seed)
    sizes = {k: int(np.prod(s)) for k, s in wl.output_shapes(shape).items()}
    bufs = {k: _guarded(v, v.size) for k, v in inputs.items()}
    bufs.update({k: _guarded(None, n) for k, n in {**sizes, **scratch}.items()})
    cache = tmp_path.parent / "emu-cache"
    cache.mkdir(exist_ok=True)
    out = cuda_emu.run(format_defines(params) + load_template(workload, "cuda"), launches, bufs,
                       {k: G for k in bufs}, tmp_path / "run", cache)
    ref = wl.reference(inputs, wl.attrs)
    for k in inputs:
        assert np.array_equal(out[k].view(np.uint32), bufs[k].view(np.uint32)), f"input {k} changed"
    worst = 0.0
    for k, n in sizes.items():
        b = out[k]
        assert (b[:G].view(np.uint32) == 0xA5A5A5A5).all() and (b[G + n:].view(np.uint32) == 0xA5A5A5A5).all()
        y = b[G:G + n].reshape(wl.output_shapes(shape)[k])
        assert np.isfinite(y).all(), f"{k} not fully written"
        worst = max(worst, wl.errors(y, ref[k])[1])
    return worst, wl.tolerance


EMULATED = [
    ("rmsnorm", {"BLOCK_SIZE": 256, "THREADS_PER_ROW": 256, "VEC": 4, "UNROLL": 2, "USE_SMEM": 0}, {"rows": 7, "hidden": 259}),
    ("rmsnorm", {"BLOCK_SIZE": 128, "THREADS_PER_ROW": 32, "VEC": 4, "UNROLL": 1, "USE_SMEM": 1}, {"rows": 8, "hidden": 256}),
    ("rmsnorm", {"BLOCK_SIZE": 64, "THREADS_PER_ROW": 8, "VEC": 2, "UNROLL": 4, "USE_SMEM": 1}, {"rows": 7, "hidden": 259}),
    ("fused_add_rmsnorm", {"BLOCK_SIZE": 128, "THREADS_PER_ROW": 64, "VEC": 4, "UNROLL": 2, "USE_SMEM": 1}, {"rows": 7, "hidden": 260}),
    ("fused_add_rmsnorm", {"BLOCK_SIZE": 64, "THREADS_PER_ROW": 16, "VEC": 1, "UNROLL": 1, "USE_SMEM": 0}, {"rows": 7, "hidden": 259}),
    ("softmax", {"BLOCK_SIZE": 256, "THREADS_PER_ROW": 256, "VEC": 4, "ONLINE": 1, "USE_SMEM": 0}, {"rows": 3, "cols": 1000}),
    ("softmax", {"BLOCK_SIZE": 128, "THREADS_PER_ROW": 32, "VEC": 1, "ONLINE": 0, "USE_SMEM": 1}, {"rows": 7, "cols": 1003}),
    ("softmax", {"BLOCK_SIZE": 64, "THREADS_PER_ROW": 64, "VEC": 2, "ONLINE": 1, "USE_SMEM": 1}, {"rows": 3, "cols": 37}),
    ("gemm", {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 16, "THREAD_M": 4, "THREAD_N": 4, "VEC": 4, "SMEM_PAD": 1,
              "USE_SMEM": 1, "SPLIT_K": 1}, {"M": 35, "N": 37, "K": 136}),
    ("gemm", {"BLOCK_M": 32, "BLOCK_N": 16, "BLOCK_K": 8, "THREAD_M": 2, "THREAD_N": 1, "VEC": 1, "SMEM_PAD": 0,
              "USE_SMEM": 1, "SPLIT_K": 4}, {"M": 7, "N": 37, "K": 133}),
    ("gemm", {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 8, "THREAD_M": 1, "THREAD_N": 2, "VEC": 1, "SMEM_PAD": 0,
              "USE_SMEM": 0, "SPLIT_K": 2}, {"M": 1, "N": 64, "K": 128}),
    # kda: the test-small shapes (register and shared-memory state, several chunks), ragged
    # validation shapes (4-byte copies, partial column blocks), dk > 128 (the slab fallback);
    # ASYNC_COPY runs as plain copies here (no __CUDA_ARCH__)
    ("kda", {**KDA_PARAMS, "CHUNK": 16}, {"batch_heads": 2, "seq": 64, "dk": 32, "dv": 32}),
    ("kda", {"DV_BLOCK": 16, "THREADS_PER_COL": 4, "VEC": 2, "CHUNK": 32, "STATE_SMEM": 1, "ASYNC_COPY": 0,
             "FAST_EXP": 1, "PREP": 1, "PIPELINE": 0}, {"batch_heads": 1, "seq": 160, "dk": 32, "dv": 32}),
    ("kda", {"DV_BLOCK": 4, "THREADS_PER_COL": 16, "VEC": 1, "CHUNK": 8, "STATE_SMEM": 0, "ASYNC_COPY": 1,
             "FAST_EXP": 0, "PREP": 1, "PIPELINE": 1}, {"batch_heads": 3, "seq": 37, "dk": 19, "dv": 13}),
    ("kda", {"DV_BLOCK": 16, "THREADS_PER_COL": 2, "VEC": 4, "CHUNK": 64, "STATE_SMEM": 0, "ASYNC_COPY": 0,
             "FAST_EXP": 0, "PREP": 0, "PIPELINE": 0}, {"batch_heads": 1, "seq": 133, "dk": 33, "dv": 17}),
    ("kda", {**KDA_PARAMS, "DV_BLOCK": 4, "CHUNK": 8}, {"batch_heads": 1, "seq": 21, "dk": 131, "dv": 6}),
]


@needs_gxx
@pytest.mark.slow
@pytest.mark.parametrize("workload, params, shape", EMULATED, ids=lambda v: v if isinstance(v, str) else None)
def test_the_cuda_templates_compute_the_reference_under_emulation(workload, params, shape, tmp_path):
    assert default_space(workload, "cuda").contains(params)
    err, tol = _emulate(workload, params, shape, tmp_path)
    assert err <= tol


# -- the child runner and the judge, in-process with a stand-in cupy -------------------------

QUICK = {"warmup_ms": 1.0, "rep_ms": 2.0, "min_reps": 3, "max_reps": 4, "flush_bytes": 1 << 16}


def _run_in_process(ev, tmp_path: Path, monkeypatch):
    """What evaluate_cuda does, with the child run in this process on the fake cupy."""
    import fake_cupy

    from kernels.sandbox import cuda_child
    from kernels.sandbox.spawn import ChildRun

    cache = tmp_path.parent / "emu-cache"
    cache.mkdir(exist_ok=True)
    fake_cupy.install(monkeypatch, cache, tmp_path / "emu")
    early = ev.prepare()
    if early is not None:
        return early
    workdir = tmp_path / "work"
    workdir.mkdir()
    shutil.copyfile(ev.artifact.path, workdir / ev.module_name)
    monkeypatch.chdir(workdir)
    run = cuda_child.prepare(ev.request(workdir))
    result = run()
    return ev.judge(ChildRun(0, False, "", "", json.dumps(result).encode()), workdir)


def _evaluation(source=None, params=None, **kw):
    from kernels.evaluation.cuda_pipeline import CudaEvaluation
    from kernels.evaluation.timing import BenchSettings
    from kernels.validation_store import ValidationStore

    params = RMS_PARAMS if params is None else params
    kw.setdefault("validation_store", ValidationStore(Path(os.environ.get("KERNELS_DATA_DIR", "/tmp")) / "vs-cuda-tests"))
    return CudaEvaluation("rmsnorm", source if source is not None else load_template("rmsnorm", "cuda"), params,
                          shape_set="test-small", bench=BenchSettings(**QUICK), seed=11, require_cupy=False, **kw)


def _kernel(body: str) -> str:
    """A one-thread-per-row RMSNorm whose per-element store is ``body``."""
    return r"""
extern "C" __global__ void rmsnorm_kernel(const float *x, const float *w, float *y, int rows, int hidden, float eps) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const float *xr = x + (long)r * hidden; float *yr = y + (long)r * hidden;
    float s = 0.0f;
    for (int i = 0; i < hidden; ++i) s += xr[i] * xr[i];
    float inv = rsqrtf(s / hidden + eps);
    for (int i = 0; i < hidden; ++i) { BODY }
}
""".replace("BODY", body)


ROW_PLAN = {"launches": [{"kernel": "rmsnorm_kernel", "grid": ["(rows + 31) // 32"], "block": ["32"],
                          "args": ["x", "w", "y", "rows", "hidden", "eps"]}]}


@needs_gxx
@needs_nvcc
@pytest.mark.slow
def test_the_template_evaluates_ok_through_child_and_judge(tmp_path, monkeypatch):
    ev = _run_in_process(_evaluation(), tmp_path, monkeypatch)
    assert ev.status == Outcome.ok, ev.log
    kinds = [c["kind"] for c in ev.cases]
    assert kinds.count("validation") == 4 and kinds.count("timed") == 2 and kinds.count("fresh") == 2
    assert ev.metrics["latency_ms"] > 0 and ev.metrics["gbps"] > 0
    # each shape's first call (its first validation launch, events) apart from the steady state
    labels = ["rows=1,hidden=256", "rows=8,hidden=256"]
    assert all(ev.metrics[f"first_call_ms[{s}]"] > 0 for s in labels)
    assert ev.metrics["first_call_ms"] == ev.metrics[f"first_call_ms[{labels[0]}]"]
    assert ev.metrics["first_call_ratio"] == pytest.approx(
        ev.metrics["first_call_ms"] / ev.metrics[f"latency_ms[{labels[0]}]"])
    assert ev.metrics["first_call_flag"] in (0.0, 1.0)
    assert ev.metrics["registers[rmsnorm_kernel]"] > 0 and 0 < ev.metrics["occupancy_min"] <= 1
    assert ev.static["kernels"]["rmsnorm_kernel"]["spill_stores"] == 0
    assert {l["shape"] for l in ev.static["launches"]} == {"rows=1,hidden=256", "rows=8,hidden=256"}
    assert ev.static["runtime"]["rmsnorm_kernel"]["num_regs"] == 32  # the fake's number
    assert ev.fingerprint["device"]["gpu"] == "Fake NVIDIA H200" and ev.fingerprint["limits"]["gbps"] == 4800.0
    json.dumps(ev.to_dict(), allow_nan=False)


@needs_gxx
@needs_nvcc
@pytest.mark.slow
@pytest.mark.parametrize("body, status, why", [
    ("yr[i] = xr[i] * inv;", Outcome.wrong_result, "max_rel_error"),
    ("yr[i] = xr[i] * inv * w[i]; if (r == rows - 1 && i == hidden - 1) yr[i + 1] = 0.0f;", Outcome.invalid,
     "wrote past the end of output 'y'"),
    ("yr[i] = xr[i] * inv * w[i]; if (r == 0 && i == 0) ((float *)x)[0] = 1.0f;", Outcome.invalid, "modified input 'x'"),
    ("if (i > 0) yr[i] = xr[i] * inv * w[i];", Outcome.wrong_result, "NaN"),
])
def test_broken_kernels_are_classified_by_the_shared_judge(body, status, why, tmp_path, monkeypatch):
    ev = _run_in_process(_evaluation(_kernel(body), {}, launch_plan=ROW_PLAN), tmp_path, monkeypatch)
    assert ev.status == status, ev.log
    assert why in ev.log


@needs_gxx
@needs_nvcc
@pytest.mark.slow
def test_an_exploding_reference_is_invalid_input_on_the_cuda_path_and_is_not_stored(tmp_path, monkeypatch):
    import dataclasses

    import numpy as np

    from kernels.validation_store import ValidationStore
    from kernels.workloads import registry

    real = registry.WORKLOADS["rmsnorm"]

    def reference(inputs, attrs):  # inf wherever the shape is the odd validation shape
        out = real.reference(inputs, attrs)
        if inputs["x"].shape == (7, 259):
            out["y"][0, 0] = np.inf
        return out

    monkeypatch.setitem(registry.WORKLOADS, "rmsnorm", dataclasses.replace(real, reference=reference))
    store = ValidationStore(tmp_path / "store")
    ev = _run_in_process(_evaluation(validation_store=store), tmp_path, monkeypatch)
    assert ev.status == Outcome.invalid_input, ev.log
    assert "== reference check ==" in ev.log and "the input generator of workload 'rmsnorm'" in ev.log
    assert store.cases("rmsnorm") == []


@needs_nvcc
def test_plans_that_do_not_fit_the_source_or_the_hardware_fail_before_running(tmp_path):
    missing = _evaluation(_kernel("yr[i] = 0.0f;"), {}, launch_plan={"launches": [{**ROW_PLAN["launches"][0], "kernel": "other"}]})
    ev = missing.prepare()
    assert ev.status == Outcome.compile_error and "does not define" in ev.log
    mangled = _evaluation(_kernel("yr[i] = 0.0f;").replace('extern "C" ', ""), {}, launch_plan=ROW_PLAN).prepare()
    assert mangled.status == Outcome.compile_error and 'extern "C"' in mangled.log
    huge = _evaluation(_kernel("yr[i] = 0.0f;"), {}, launch_plan={"launches": [{**ROW_PLAN["launches"][0], "block": ["2048"]}]})
    assert huge.prepare().status == Outcome.invalid
    bad = _evaluation(params={"BLOCK_SIZE": 128}).prepare()  # the template plan needs all its parameters
    assert bad.status == Outcome.invalid and "unknown parameter 'THREADS_PER_ROW'" in bad.log
    syntax = _evaluation("extern \"C\" __global__ void rmsnorm_kernel( { }", {}, launch_plan=ROW_PLAN).prepare()
    assert syntax.status == Outcome.compile_error and "error" in syntax.log


@needs_nvcc
def test_an_nvrtc_failure_in_the_child_is_a_compile_error(tmp_path, monkeypatch):
    ev = _run_in_process(_evaluation(_kernel("yr[i] = 0.0f; /* SYNTAX ERROR for the fake NVRTC */"), {},
                                     launch_plan=ROW_PLAN), tmp_path, monkeypatch)
    assert ev.status == Outcome.compile_error and "fake NVRTC rejected" in ev.log


@needs_nvcc
def test_a_gpu_of_another_architecture_is_refused(tmp_path, monkeypatch):
    import fake_cupy

    from kernels.sandbox import cuda_child

    fake_cupy.install(monkeypatch, tmp_path, tmp_path, props={"major": 8, "minor": 0, "name": b"NVIDIA A100"})
    ev = _evaluation()
    assert ev.prepare() is None
    with pytest.raises(RuntimeError, match="target architecture sm_90 but the GPU is NVIDIA A100"):
        cuda_child.prepare(ev.request(tmp_path))


@pytest.mark.skipif("cupy" in sys.modules or HAVE_GPU, reason="cupy is installed here")
def test_evaluating_without_cupy_raises_an_import_error_naming_cupy():
    from kernels import evaluate

    try:
        import cupy  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("cupy is installed here")
    with pytest.raises(ImportError, match="cupy"):
        evaluate("rmsnorm", load_template("rmsnorm", "cuda"), RMS_PARAMS, shape_set="test-small", backend="cuda")


# -- on a GPU ------------------------------------------------------------------------------

GPU_CASES = [
    ("rmsnorm", "llama3-8b", {"BLOCK_SIZE": 256, "THREADS_PER_ROW": 256, "VEC": 4, "UNROLL": 2, "USE_SMEM": 0}),
    ("rmsnorm", "llama3-8b", {"BLOCK_SIZE": 128, "THREADS_PER_ROW": 32, "VEC": 4, "UNROLL": 1, "USE_SMEM": 1}),
    ("fused_add_rmsnorm", "llama3-8b", {"BLOCK_SIZE": 512, "THREADS_PER_ROW": 512, "VEC": 4, "UNROLL": 1, "USE_SMEM": 1}),
    ("softmax", "llama3-8b", {"BLOCK_SIZE": 1024, "THREADS_PER_ROW": 1024, "VEC": 4, "ONLINE": 1, "USE_SMEM": 0}),
    ("gemm", "llama3-8b-o-decode", {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 32, "THREAD_M": 1, "THREAD_N": 4, "VEC": 4,
                                    "SMEM_PAD": 1, "USE_SMEM": 1, "SPLIT_K": 4}),
    ("gemm", "square-1024", {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 16, "THREAD_M": 4, "THREAD_N": 4, "VEC": 4,
                             "SMEM_PAD": 1, "USE_SMEM": 1, "SPLIT_K": 1}),
    ("kda", "kimi-linear", KDA_PARAMS),
    ("kda", "kimi-linear", {"DV_BLOCK": 4, "THREADS_PER_COL": 16, "VEC": 4, "CHUNK": 64, "STATE_SMEM": 0,
                            "ASYNC_COPY": 1, "FAST_EXP": 0, "PREP": 1, "PIPELINE": 1}),
]


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_GPU, reason="needs cupy and an NVIDIA GPU")
@pytest.mark.parametrize("workload, shape_set, params", GPU_CASES)
def test_gpu_templates_are_ok_with_timings(workload, shape_set, params):
    from kernels import evaluate

    ev = evaluate(workload, load_template(workload, "cuda"), params, shape_set=shape_set, backend="cuda", timeout_s=240)
    assert ev.status == Outcome.ok, ev.log
    assert ev.metrics["latency_ms"] > 0 and 0 < ev.metrics["roofline_pct"] <= 100
    assert ev.fingerprint["device"]["compute_capability"] == "9.0" or ev.fingerprint["arch"] != "sm_90"
    assert ev.static["runtime"]


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_GPU, reason="needs cupy and an NVIDIA GPU")
@pytest.mark.parametrize("compile_options", [{"compiler": "nvcc"}, {"compiler": "nvrtc", "extra": ["--use_fast_math"]}])
def test_gpu_compilers_both_run_the_template(compile_options):
    from kernels import evaluate

    params = {"BLOCK_SIZE": 256, "THREADS_PER_ROW": 256, "VEC": 4, "UNROLL": 2, "USE_SMEM": 0}
    ev = evaluate("rmsnorm", load_template("rmsnorm", "cuda"), params, shape_set="test-small", backend="cuda",
                  compile_options=compile_options, timeout_s=120)
    assert ev.status == Outcome.ok, ev.log


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_GPU or NVCC is None, reason="needs cupy, an NVIDIA GPU and nvcc")
def test_gpu_ptx_candidates_load_through_the_same_plan():
    from kernels import evaluate

    params = {"BLOCK_SIZE": 128, "THREADS_PER_ROW": 32, "VEC": 4, "UNROLL": 1, "USE_SMEM": 0}
    text = static.ptx(load_template("rmsnorm", "cuda"), format_defines(params), arch="sm_90")
    ev = evaluate("rmsnorm", text, params, shape_set="test-small", backend="cuda", timeout_s=120)
    assert ev.status == Outcome.ok, ev.log


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_GPU, reason="needs cupy and an NVIDIA GPU")
@pytest.mark.parametrize("body, status", [
    ("yr[i] = xr[i] * inv;", Outcome.wrong_result),
    ("yr[i] = xr[i] * inv * w[i]; if (r == rows - 1 && i == hidden - 1) yr[i + 1] = 0.0f;", Outcome.invalid),
    ("yr[i] = xr[i] * inv * w[i]; if (r == 0 && i == 0) yr[-1] = 0.0f;", Outcome.invalid),
    ("yr[i] = xr[i] * inv * w[i]; if (i == 0) yr[(long)1 << 40] = 1.0f;", Outcome.runtime_error),
    ("for (volatile int spin = 1; spin;) { } yr[i] = 0.0f;", Outcome.timeout),
])
def test_gpu_broken_kernels_are_classified(body, status):
    from kernels import evaluate

    ev = evaluate("rmsnorm", _kernel(body), {}, shape_set="test-small", backend="cuda", launch_plan=ROW_PLAN,
                  timeout_s=30 if status == Outcome.timeout else 120)
    assert ev.status == status, ev.log


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_GPU, reason="needs cupy and an NVIDIA GPU")
def test_gpu_backend_run_times_a_plan_in_process():
    import cupy as cp

    be = CudaBackend()
    params = {"BLOCK_SIZE": 256, "THREADS_PER_ROW": 256, "VEC": 4, "UNROLL": 2, "USE_SMEM": 0}
    art = be.compile(load_template("rmsnorm", "cuda"), format_defines(params))
    shape = {"rows": 512, "hidden": 4096}
    plan = LaunchPlan.from_dict(default_launch_plan("rmsnorm", params), plan_names(RMS, params))
    launches, _ = plan.resolve(plan_env(RMS, shape, params), ["x", "w", "y"])
    inp = RMS.generate(shape, 0)
    bufs = {"x": cp.asarray(inp["x"]), "w": cp.asarray(inp["w"]), "y": cp.empty((512, 4096), cp.float32)}
    samples = be.run(art, launches, bufs, reps=10)
    assert len(samples) == 10 and min(samples) > 0
    y = cp.asnumpy(bufs["y"])
    assert RMS.errors(y, RMS.reference(inp, RMS.attrs)["y"])[1] <= RMS.tolerance
