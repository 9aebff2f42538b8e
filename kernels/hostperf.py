"""This host's measured memory bandwidth and float32 FMA throughput, measured once and cached.

They serve two purposes:

- **Physical limits.** A timing that implies more than ``roofline_margin()`` (default 4)
  times the measured copy bandwidth, or that many times the measured FMA throughput, cannot
  be a real execution of the kernel (it skipped work, or the clock was fooled) and is
  classified ``invalid``. The margin is generous on purpose: a kernel's output writes can
  land in cache and be written back after the timer stops, hardware prefetch and turbo help
  it, and the copy measurement is a sustained figure below the theoretical peak. Setting
  ``KERNELS_CPU_PEAK_GBPS`` replaces the measured bandwidth limit by a fixed value.
- **Roofline.** ``% of roofline`` = achieved GFLOP/s over ``min(fma_gflops,
  arithmetic intensity * copy_gbps)`` (Williams, Waterman, Patterson, "Roofline: an insightful
  visual performance model for multicore architectures", CACM 52(4), 2009,
  doi:10.1145/1498765.1498785).

Method: a C kernel compiled with the CPU backend's compiler and flags runs in a separate
(trusted) Python process with ``OMP_NUM_THREADS`` = CPU count and the evaluator's OpenMP
settings. Copy bandwidth follows STREAM's "Copy" convention (McCalpin, "Memory bandwidth and
machine balance in current high performance computers", IEEE TCCA Newsletter, 1995): 2 x the
bytes of a 128 MiB float64 array copied per second (read + write, write-allocate traffic not
counted), best of 10 after a first touch, with all OpenMP threads and with one thread (numpy
``copyto``), keeping the larger (a competing process on a small host delays one OpenMP thread
and makes the parallel figure too low; measured here: 14.5 GB/s parallel under load against
41 GB/s for one thread). FMA throughput: independent vector FMA chains per thread
(``a = a * m + c``, 2 FLOP per lane), best of 5, all threads or one thread times the thread
count, whichever is larger. The result is cached as JSON in the
compile cache directory, keyed on CPU model, CPU count, compiler version and flags; a file
lock keeps concurrent workers from measuring at the same time (they would halve each other's
figure).
"""

from __future__ import annotations

import datetime
import fcntl
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass

from kernels import config
from kernels.backends.cpu import CompileError, CpuBackend
from kernels.evaluation.timing import omp_environment
from kernels.sandbox.spawn import child_env

__all__ = ["HostLimits", "HostPerfError", "host_limits", "physical_limits"]

SOURCE = r"""
#include <omp.h>
void copy_f64(const double *restrict a, double *restrict b, long n)
{
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; ++i)
        b[i] = a[i];
}
#ifdef __AVX512F__
#define WIDTH 64
#define NACC 12
#else
#define WIDTH 32
#define NACC 8
#endif
typedef float vec __attribute__((vector_size(WIDTH)));
#define LANES (WIDTH / 4)
int fma_lanes(void) { return LANES * NACC; }
int max_threads(void) { return omp_get_max_threads(); }
float fma_loop(long iters)
{
    float total = 0.0f;
#pragma omp parallel reduction(+ : total)
    {
        vec acc[NACC], m, c;
        for (int l = 0; l < LANES; ++l) { m[l] = 0.99999f; c[l] = 1e-6f * (float)(l + 1); }
        for (int j = 0; j < NACC; ++j)
            for (int l = 0; l < LANES; ++l) acc[j][l] = (float)(j + l + omp_get_thread_num());
        for (long i = 0; i < iters; ++i) {
#pragma GCC unroll 16
            for (int j = 0; j < NACC; ++j) acc[j] = acc[j] * m + c;
        }
        for (int j = 0; j < NACC; ++j)
            for (int l = 0; l < LANES; ++l) total += acc[j][l];
    }
    return total;
}
"""

_RUNNER = r"""
import ctypes, json, sys, time
import numpy as np
lib = ctypes.CDLL(sys.argv[1])
lib.copy_f64.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long]
lib.fma_loop.argtypes = [ctypes.c_long]
lib.fma_loop.restype = ctypes.c_float
lib.omp_set_num_threads.argtypes = [ctypes.c_int]
threads = lib.max_threads()

def best_of(fn, n):
    best = float("inf")
    for _ in range(n):
        t0 = time.perf_counter(); fn(); best = min(best, time.perf_counter() - t0)
    return best

n = 16 * 2**20  # 128 MiB of float64 per array, well above any last-level cache
a = np.empty(n); b = np.empty(n)
lib.copy_f64(b.ctypes.data, a.ctypes.data, n)  # first touch by the OpenMP threads
a[:] = 1.0
omp_copy = 2 * a.nbytes / best_of(lambda: lib.copy_f64(a.ctypes.data, b.ctypes.data, n), 10) / 1e9
one_copy = 2 * a.nbytes / best_of(lambda: np.copyto(b, a), 5) / 1e9
iters = 2_000_000
lib.fma_loop(iters // 10)
omp_fma = 2.0 * lib.fma_lanes() * iters * threads / best_of(lambda: lib.fma_loop(iters), 5) / 1e9
lib.omp_set_num_threads(1)
one_fma = 2.0 * lib.fma_lanes() * iters / best_of(lambda: lib.fma_loop(iters), 3) / 1e9
print(json.dumps({"copy_gbps": max(omp_copy, one_copy), "fma_gflops": max(omp_fma, one_fma * threads),
                  "threads": threads, "detail": {"omp_copy_gbps": omp_copy, "one_thread_copy_gbps": one_copy,
                  "omp_fma_gflops": omp_fma, "one_thread_fma_gflops": one_fma}}))
"""


class HostPerfError(RuntimeError):
    """The measurement could not run (no compiler, the runner failed); message says why."""


@dataclass(frozen=True)
class HostLimits:
    """Measured capabilities of this host.

    Attributes:
        copy_gbps: sustained copy bandwidth in GB/s (STREAM Copy convention).
        fma_gflops: float32 FMA throughput in GFLOP/s, all CPUs.
        threads: OpenMP threads used.
        key: cache key (CPU model, CPU count, compiler version, flags).
        measured_at: ISO 8601 UTC time of the measurement.
    """

    copy_gbps: float
    fma_gflops: float
    threads: int
    key: str
    measured_at: str

    def to_dict(self) -> dict:
        return asdict(self)


def _key() -> str:
    fp = CpuBackend().fingerprint()
    blob = json.dumps({k: fp[k] for k in ("compiler_version", "flags", "cpu_model", "nproc", "machine")}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _measure(key: str) -> HostLimits:
    try:
        artifact = CpuBackend().compile(SOURCE, "")
    except CompileError as exc:
        raise HostPerfError(f"cannot compile the host measurement: {exc}\n{exc.log}") from None
    try:
        proc = subprocess.run(
            [sys.executable, "-I", "-c", _RUNNER, str(artifact.path)],
            capture_output=True, text=True, timeout=120, env={**child_env(omp_environment())},
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise HostPerfError(f"host measurement failed: {exc}") from None
    try:
        data = json.loads(proc.stdout.strip().splitlines()[-1])
        copy, fma, threads = float(data["copy_gbps"]), float(data["fma_gflops"]), int(data["threads"])
    except (IndexError, ValueError, KeyError, TypeError):
        raise HostPerfError(f"host measurement failed (rc={proc.returncode}): {proc.stderr[-2000:]}") from None
    if not (copy > 0 and fma > 0):
        raise HostPerfError(f"host measurement gave non-positive figures: {data}")
    now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    return HostLimits(copy, fma, threads, key, now)


def host_limits(*, refresh: bool = False) -> HostLimits:
    """This host's :class:`HostLimits`, measured on first use (about 1 s) and cached.

    Args:
        refresh: measure again even if a cached figure exists.

    Raises:
        HostPerfError: the measurement could not run.
    """
    key = _key()
    cache = config.cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / f"hostperf-{key}.json"
    with open(cache / f"hostperf-{key}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one measurement at a time per host
        if not refresh:
            try:
                data = json.loads(path.read_text())
                return HostLimits(**data)
            except (OSError, ValueError, TypeError):
                pass
        limits = _measure(key)
        fd, tmp = tempfile.mkstemp(prefix=".hostperf-", dir=cache)
        with os.fdopen(fd, "w") as f:
            json.dump(limits.to_dict(), f)
        os.replace(tmp, path)  # atomic: readers see the old or the new file, never half
        return limits


def physical_limits() -> dict:
    """The limits the evaluator enforces, with where they come from.

    Returns:
        ``{"gbps": float | None, "gflops": float | None, "source": str, "margin": float,
        "copy_gbps": float | None, "fma_gflops": float | None}``; a limit is None when it
        cannot be determined (the measurement failed and no override is set), with the
        reason in ``source``.
    """
    margin = config.roofline_margin()
    fixed = config.cpu_peak_gbps()
    try:
        hl = host_limits()
    except HostPerfError as exc:
        return {"gbps": fixed, "gflops": None, "margin": margin, "copy_gbps": None, "fma_gflops": None,
                "source": "KERNELS_CPU_PEAK_GBPS" if fixed else f"unavailable: {exc}"}
    return {
        "gbps": fixed if fixed else margin * hl.copy_gbps,
        "gflops": margin * hl.fma_gflops,
        "margin": margin,
        "copy_gbps": hl.copy_gbps,
        "fma_gflops": hl.fma_gflops,
        "source": "KERNELS_CPU_PEAK_GBPS" if fixed else f"measured {hl.measured_at}",
    }
