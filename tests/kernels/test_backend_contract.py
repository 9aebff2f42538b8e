"""Contract every registered backend meets (:class:`kernels.backends.Backend`).

Parametrised over ``cpu`` and ``replay``, and ``cuda`` where cupy and a GPU are present
(``-m gpu``; skipped otherwise): the backend satisfies the protocol, its fingerprint is a
JSON-serialisable dict, its capabilities are a :class:`Capabilities` readable without
importing the backend, and through the one evaluation pipeline (:func:`kernels.evaluate`) a
correct candidate of its workload is ``ok`` and a wrong one is not (``wrong_result`` for
the measured backends; a replay data set records no wrong results, only failed runs, so its
failing configuration is ``runtime_error``).
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from dataclasses import FrozenInstanceError, dataclass, field
from typing import Any

import pytest

from kernels import BenchSettings, Outcome, config, evaluate
from kernels.backends import (
    BACKENDS,
    CAPABILITIES,
    TARGET_PREFIXES,
    Backend,
    Capabilities,
    backend_for_target,
    capabilities,
    get_backend,
)
from kernels.backends.replay import get_dataset

DATA = config.shared_dataset_dir("tuning-cache")
CONV = "convolution_A100-PCIE-40GB"


def _have_gpu() -> bool:
    try:
        import cupy  # noqa: PLC0415

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001 - no cupy, no driver, no device
        return False


HAVE_GPU = _have_gpu()

RMSNORM_C = r"""
#include <math.h>
void rmsnorm(const float *x, const float *w, float *y, int rows, int hidden, float eps)
{
    for (int r = 0; r < rows; ++r) {
        const float *xr = x + (long)r * hidden;
        float *yr = y + (long)r * hidden;
        double s = 0.0;
        for (int i = 0; i < hidden; ++i) s += (double)xr[i] * xr[i];
        float inv = (float)(1.0 / sqrt(s / hidden + eps));
        for (int i = 0; i < hidden; ++i) yr[i] = OUT;
    }
}
"""

RMSNORM_CU = r"""
extern "C" __global__ void rmsnorm_kernel(const float *x, const float *w, float *y, int rows, int hidden, float eps) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const float *xr = x + (long)r * hidden; float *yr = y + (long)r * hidden;
    float s = 0.0f;
    for (int i = 0; i < hidden; ++i) s += xr[i] * xr[i];
    float inv = rsqrtf(s / hidden + eps);
    for (int i = 0; i < hidden; ++i) { yr[i] = OUT; }
}
"""
ROW_PLAN = {"launches": [{"kernel": "rmsnorm_kernel", "grid": ["(rows + 31) // 32"], "block": ["32"],
                          "args": ["x", "w", "y", "rows", "hidden", "eps"]}]}
QUICK = BenchSettings(warmup_ms=1.0, rep_ms=2.0, min_reps=3, max_reps=5, flush_bytes=1 << 20)


@dataclass(frozen=True)
class Case:
    """One backend's workload: ``evaluate`` keyword arguments of a correct and a wrong
    candidate, and the outcome of the wrong one."""

    backend: str
    target: str
    correct: dict[str, Any]
    wrong: dict[str, Any]
    wrong_status: Outcome = Outcome.wrong_result
    kwargs: dict[str, Any] = field(default_factory=dict)


def _replay_case() -> Case:
    cache = get_dataset(CONV)
    ok = next(k for k in cache.entries if cache.status(k)[0] is Outcome.ok)
    bad = next(k for k in cache.entries if cache.status(k)[0] is Outcome.runtime_error)
    target = f"replay:{CONV}"
    return Case("replay", target,
                dict(workload=cache.kernel_name, source="", params=cache.params_of(ok)),
                dict(workload=cache.kernel_name, source="", params=cache.params_of(bad)),
                Outcome.runtime_error, dict(target=target))


def _cpu_case() -> Case:
    return Case("cpu", f"cpu-{platform.machine()}",
                dict(workload="rmsnorm", source=RMSNORM_C.replace("OUT", "xr[i] * inv * w[i]"), params={}),
                dict(workload="rmsnorm", source=RMSNORM_C.replace("OUT", "xr[i] * inv"), params={}),
                kwargs=dict(shape_set="test-small", bench=QUICK, seed=3))


def _cuda_case() -> Case:
    return Case("cuda", "cuda-sm90",
                dict(workload="rmsnorm", source=RMSNORM_CU.replace("OUT", "xr[i] * inv * w[i]"), params={}),
                dict(workload="rmsnorm", source=RMSNORM_CU.replace("OUT", "xr[i] * inv"), params={}),
                kwargs=dict(shape_set="test-small", launch_plan=ROW_PLAN, timeout_s=120))


needs_data = pytest.mark.skipif(DATA is None, reason="shared/datasets/tuning-cache not found")
needs_gpu = [pytest.mark.gpu, pytest.mark.skipif(not HAVE_GPU, reason="needs cupy and an NVIDIA GPU")]
CASES = [
    pytest.param(_cpu_case, id="cpu"),
    pytest.param(_replay_case, id="replay", marks=needs_data),
    pytest.param(_cuda_case, id="cuda", marks=needs_gpu),
]
NAMES = [pytest.param("cpu", id="cpu"), pytest.param("replay", id="replay"), pytest.param("cuda", id="cuda")]


@pytest.fixture(params=CASES)
def case(request) -> Case:
    return request.param()


# -- without running anything ----------------------------------------------------------------


def test_every_registered_backend_has_capabilities_and_a_target_prefix():
    assert set(CAPABILITIES) == set(BACKENDS) == set(TARGET_PREFIXES)


@pytest.mark.parametrize("name", NAMES)
def test_the_backend_satisfies_the_protocol(name):
    be = get_backend(name)  # the CUDA backend instantiates without cupy
    assert isinstance(be, Backend)
    assert be.name == name
    assert isinstance(be.capabilities, Capabilities) and be.capabilities is capabilities(name)
    assert be.target_prefix == TARGET_PREFIXES[name]
    assert backend_for_target(be.target_prefix + "x") == name
    assert be.supports("not-a-target") is False


@pytest.mark.parametrize("name", NAMES)
def test_the_fingerprint_is_a_json_serialisable_dict(name):
    fp = get_backend(name).fingerprint()
    assert isinstance(fp, dict) and fp["backend"] == name
    assert json.loads(json.dumps(fp, allow_nan=False)) == fp


def test_capabilities_are_frozen_and_consistent():
    for name, caps in CAPABILITIES.items():
        assert isinstance(caps, Capabilities)
        assert caps.language in ("c", "cuda", "")
        assert caps.recorded == (caps.language == ""), name  # recorded evaluations have no source
        assert not (caps.recorded and (caps.paired_turns or caps.static_report or caps.launch_plan)), name
        assert not (caps.host_limits and caps.datasheet_limits), name
    with pytest.raises(FrozenInstanceError):
        CAPABILITIES["cpu"].batchable = True  # type: ignore[misc]


def test_capabilities_and_targets_are_read_without_cupy():
    code = ("import sys, kernels; from kernels.backends import capabilities, backend_for_target; "
            "assert capabilities('cuda').static_report and capabilities('replay').batchable; "
            "assert backend_for_target('cuda-sm90') == 'cuda'; "
            "assert 'cupy' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_unknown_names_and_targets_are_refused():
    with pytest.raises(KeyError, match="known: cpu, cuda, replay"):
        capabilities("opencl")
    with pytest.raises(KeyError, match="known: cpu, cuda, replay"):
        get_backend("opencl")
    with pytest.raises(ValueError, match="expected cpu-\\*, cuda-\\* or replay:<dataset>"):
        backend_for_target("opencl-x")


# -- through the one evaluation pipeline -----------------------------------------------------


@pytest.mark.timeout(300)
def test_the_target_is_supported_and_a_correct_candidate_is_ok(case):
    be = get_backend(case.backend)
    assert be.supports(case.target)
    assert backend_for_target(case.target) == case.backend
    ev = evaluate(**case.correct, backend=case.backend, **case.kwargs)
    assert ev.status == Outcome.ok, ev.log
    json.dumps(ev.to_dict(), allow_nan=False)


@pytest.mark.timeout(300)
def test_a_wrong_candidate_is_not_ok(case):
    ev = evaluate(**case.wrong, backend=case.backend, **case.kwargs)
    assert ev.status == case.wrong_status, ev.log

