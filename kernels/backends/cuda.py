"""CUDA backend: ``extern "C" __global__`` kernels (or PTX) driven through CuPy.

A CUDA candidate is a source plus a :class:`~kernels.evaluation.launch_plan.LaunchPlan` (one or more
launches with grid, block and shared memory as safe expressions over axes, parameters and
attributes, and argument lists; see :mod:`kernels.evaluation.launch_plan`, re-exported here).

- Compile (:meth:`CudaBackend.compile`): ``nvcc -cubin --resource-usage`` is the compile
  gate and the static evidence wherever nvcc exists (no GPU needed, :mod:`kernels.evaluation.static`);
  the module that runs is built by CuPy's ``RawModule`` with NVRTC in the sandbox child
  (``compiler="nvrtc"``, the default), or is nvcc's cubin (``compiler="nvcc"``, needed for
  ``sm_90a``). PTX candidates load through the same plan (``cupy.RawModule(path=...)``; the
  driver JIT-compiles them).
- Run: CUDA-event timing with an L2 flush (a write of 2x the device's L2) before every timed
  repetition (:func:`bench_events`), like Triton's ``do_bench``; limits for the ``invalid``
  check and the roofline come from vendor datasheets (:func:`roofline_for`).
- Evaluate: :func:`kernels.evaluate` with ``backend="cuda"`` runs
  :func:`kernels.evaluation.cuda_pipeline.evaluate_cuda` (parent side) and :mod:`kernels.sandbox.cuda_child`
  (sandbox side).

cupy is imported lazily (:func:`import_cupy`); without it running raises an ImportError that
names cupy, while compiling, static evidence and plan parsing keep working.
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernels import config
from kernels.backends import CAPABILITIES, TARGET_PREFIXES
from kernels.evaluation import static
from kernels.evaluation.launch_plan import (
    Launch,
    LaunchArg,
    LaunchPlan,
    LaunchPlanError,
    ResolvedLaunch,
    plan_env,
    plan_names,
)
from kernels.evaluation.timing import BenchRun, BenchSettings
from kernels.sandbox.toolchain import CompileError

__all__ = [
    "CompileError",
    "CompileOptions",
    "CudaArtifact",
    "CudaBackend",
    "Launch",
    "LaunchArg",
    "LaunchPlan",
    "LaunchPlanError",
    "ResolvedLaunch",
    "Roofline",
    "bench_events",
    "bench_events_run",
    "bind_launches",
    "import_cupy",
    "plan_env",
    "plan_names",
    "roofline_for",
    "target_arch",
]

_TARGET = re.compile(r"^cuda-sm(\d{2,3})(a?)\Z")
DEFAULT_TARGET = "cuda-sm90"
CUPY_HINT = (
    "the cuda backend needs cupy: pip install 'int21-kernel-factory[gpu]' "
    "(cupy-cuda12x) or the cupy wheel matching your CUDA (e.g. cupy-cuda13x)"
)


def import_cupy():
    """``import cupy``, or an ImportError that names cupy and how to install it."""
    try:
        import cupy  # noqa: PLC0415
    except ImportError as exc:
        raise ImportError(f"{CUPY_HINT} ({exc})", name="cupy") from exc
    return cupy


def target_arch(target: str) -> str:
    """The ``sm_XY`` architecture of a ``cuda-smXY`` target (``cuda-sm90a`` -> ``sm_90a``).

    Raises:
        ValueError: not a ``cuda-sm<digits>[a]`` name, or an architecture
            :data:`kernels.evaluation.static.ARCHS` does not know.
    """
    m = _TARGET.match(target or "")
    if not m:
        raise ValueError(f"CUDA target must look like 'cuda-sm90' or 'cuda-sm100', got {target!r}")
    arch = f"sm_{m.group(1)}{m.group(2)}"
    if arch not in static.ARCHS:
        known = ", ".join("cuda-" + a.replace("_", "") for a in static.ARCHS)
        raise ValueError(f"unknown CUDA target {target!r} (known: {known})")
    return arch


# -- compile options and artifacts ------------------------------------------------------------

_OPTION_RE = re.compile(
    r"^(--use_fast_math|-lineinfo|--extra-device-vectorization|--maxrregcount=\d{1,3}|"
    r"--(ftz|prec-div|prec-sqrt|fmad)=(true|false))$"
)


@dataclass(frozen=True)
class CompileOptions:
    """How a CUDA candidate is compiled (the evaluator owns the flags; candidates choose only
    from these).

    Attributes:
        arch: ``sm_90`` (H100/H200), ``sm_100`` (B200), ``sm_90a`` (wgmma/setmaxnreg; needs
            ``compiler="nvcc"``), ... (:data:`kernels.evaluation.static.ARCHS`).
        compiler: ``"nvrtc"`` (CuPy ``RawModule``, compiled in the sandbox child for the
            device's architecture) or ``"nvcc"`` (nvcc's cubin runs as built).
        extra: additional flags from a whitelist: ``--use_fast_math``, ``-lineinfo``,
            ``--extra-device-vectorization``, ``--maxrregcount=N``, ``--ftz=``,
            ``--prec-div=``, ``--prec-sqrt=``, ``--fmad=`` (``true``/``false``).

    Raises:
        ValueError: unknown arch or compiler, a flag outside the whitelist, or ``sm_XXa``
            with NVRTC.
    """

    arch: str = "sm_90"
    compiler: str = "nvrtc"
    extra: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.arch not in static.ARCHS:
            raise ValueError(f"CompileOptions: unknown arch {self.arch!r} (known: {', '.join(static.ARCHS)})")
        if self.compiler not in ("nvrtc", "nvcc"):
            raise ValueError(f"CompileOptions: compiler must be 'nvrtc' or 'nvcc', got {self.compiler!r}")
        if self.arch.endswith("a") and self.compiler == "nvrtc":
            raise ValueError(
                f"CompileOptions: arch {self.arch} (wgmma, setmaxnreg) needs compiler='nvcc': "
                "CuPy's NVRTC path compiles for the device's plain architecture"
            )
        extra = tuple(self.extra)
        bad = [f for f in extra if not isinstance(f, str) or not _OPTION_RE.match(f)]
        if bad:
            raise ValueError(
                f"CompileOptions: flags {bad} not allowed (allowed: --use_fast_math, -lineinfo, "
                "--extra-device-vectorization, --maxrregcount=N, --ftz/--prec-div/--prec-sqrt/--fmad=true|false)"
            )
        object.__setattr__(self, "extra", extra)

    @classmethod
    def parse(cls, d: Mapping[str, Any] | CompileOptions | None, *, arch: str = "sm_90") -> CompileOptions:
        """From ``None`` (defaults for ``arch``), a dict with keys ``arch``, ``compiler``,
        ``extra``, or an instance.

        Raises:
            ValueError: unknown keys or invalid values.
        """
        if isinstance(d, CompileOptions):
            return d
        d = dict(d or {})
        unknown = set(d) - {"arch", "compiler", "extra"}
        if unknown:
            raise ValueError(f"CompileOptions: unknown keys {sorted(unknown)} (allowed: arch, compiler, extra)")
        return cls(arch=d.get("arch", arch), compiler=d.get("compiler", "nvrtc"), extra=tuple(d.get("extra", ())))

    def to_dict(self) -> dict[str, Any]:
        return {"arch": self.arch, "compiler": self.compiler, "extra": list(self.extra)}

    def nvcc_flags(self) -> tuple[str, ...]:
        return tuple(f.replace("--maxrregcount", "-maxrregcount") for f in self.extra)

    def nvrtc_flags(self) -> tuple[str, ...]:
        return self.extra


@dataclass(frozen=True)
class CudaArtifact:
    """A compiled CUDA candidate.

    Attributes:
        path: what the child loads: the ``.cu`` source with defines (NVRTC), nvcc's
            ``.cubin``, or the ``.ptx`` file (driver JIT).
        kind: ``"nvrtc"``, ``"cubin"`` or ``"ptx"``.
        options: the :class:`CompileOptions` used.
        log: nvcc's output (resource usage, warnings); empty on a cache hit.
        key: sha256 hex of source, defines, options and nvcc version.
        cached: True if the static report was reused from the cache.
        static: nvcc's resource report (:func:`kernels.evaluation.static.compile_cubin`): per kernel
            registers, spills, shared memory, barriers; ``{}`` when nvcc is missing.
        language: ``"cuda"`` or ``"ptx"``.
    """

    path: Path
    kind: str
    options: CompileOptions
    log: str
    key: str
    cached: bool
    static: dict[str, Any]
    language: str

    def module_spec(self) -> dict[str, Any]:
        """What the sandbox child needs to load the module (JSON)."""
        return {"kind": self.kind, "path": str(self.path), "options": list(self.options.nvrtc_flags())}


# -- rooflines ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Roofline:
    """Physical limits of one GPU for derived metrics and the ``invalid`` check.

    Attributes:
        device: what the numbers describe.
        peak_gbps: DRAM bandwidth (GB/s, 1e9 bytes/s).
        peak_gflops: float32 CUDA-core rate without tensor cores (GFLOP/s): the roof for
            "% of roofline" of float32 kernels.
        max_gflops: the fastest float32-input rate the chip has (TF32 tensor cores, dense):
            measured above it is physically impossible, hence ``invalid``.
        source: where the numbers come from.
        bf16_gflops: dense BF16 tensor-core rate (GFLOP/s), the roof of bf16 workloads.
    """

    device: str
    peak_gbps: float
    peak_gflops: float
    max_gflops: float
    source: str
    bf16_gflops: float = 0.0


# Vendor datasheets; dense (non-sparse) tensor rates are half the "with sparsity" figures.
_H100_SXM = ("NVIDIA H100 Tensor Core GPU datasheet (SXM5: 3.35 TB/s HBM3, FP32 67 TFLOPS, "
             "TF32 989 and BF16 1,979 TFLOPS with sparsity)")
_H200 = ("NVIDIA H200 Tensor Core GPU datasheet (SXM: 141 GB HBM3e at 4.8 TB/s, FP32 67 TFLOPS, "
         "TF32 989 and BF16 1,979 TFLOPS with sparsity)")
_ROOFLINES: tuple[tuple[str, Roofline], ...] = (
    ("H200", Roofline("H200 SXM", 4800.0, 67_000.0, 494_700.0, _H200, 989_400.0)),
    ("H100 PCIe", Roofline("H100 PCIe", 2000.0, 51_000.0, 378_000.0,
                           "NVIDIA H100 datasheet (PCIe: 2.0 TB/s, FP32 51 TFLOPS, TF32 756 and BF16 1,513 "
                           "TFLOPS with sparsity)", 756_500.0)),
    ("H100 NVL", Roofline("H100 NVL", 3900.0, 60_000.0, 417_500.0,
                          "NVIDIA H100 datasheet (NVL: 3.9 TB/s, FP32 60 TFLOPS, TF32 835 and BF16 1,671 "
                          "TFLOPS with sparsity)", 835_500.0)),
    ("H100", Roofline("H100 SXM", 3350.0, 67_000.0, 494_700.0, _H100_SXM, 989_400.0)),
    ("B200", Roofline("B200", 8000.0, 80_000.0, 1_100_000.0,
                      "NVIDIA HGX B200 datasheet (8 TB/s HBM3e, FP32 80 TFLOPS, TF32 2.2 and BF16 4.5 PFLOPS "
                      "with sparsity); leads, verify", 2_250_000.0)),
    ("A100", Roofline("A100 SXM 80GB", 2039.0, 19_500.0, 156_000.0,
                      "NVIDIA A100 datasheet (SXM 80GB: 2,039 GB/s, FP32 19.5 TFLOPS, TF32 156 and BF16 312 "
                      "TFLOPS dense)", 312_000.0)),
)
# Without a device name: the fastest part of the architecture, so the invalid check never
# fires on a legitimate result.
_ARCH_DEFAULT = {"sm_90": "H200", "sm_90a": "H200", "sm_100": "B200", "sm_100a": "B200", "sm_80": "A100"}


def roofline_for(device_name: str | None, arch: str) -> Roofline:
    """The :class:`Roofline` of a device (by name, e.g. ``"NVIDIA H200"``) or, without one,
    of the fastest known part of ``arch``. ``$KERNELS_CUDA_PEAK_GBPS`` and
    ``$KERNELS_CUDA_PEAK_GFLOPS`` override bandwidth and float32 rate (e.g. with measured
    ceilings: a device-to-device copy, counting bytes read plus written)."""
    chosen = None
    if device_name:
        for key, rl in _ROOFLINES:
            if key.lower() in device_name.lower():
                chosen = rl
                break
    if chosen is None:
        key = _ARCH_DEFAULT.get(arch)
        chosen = next((rl for k, rl in _ROOFLINES if k == key), None)
    if chosen is None:  # unknown part: no invalid check on compute, generous bandwidth
        chosen = Roofline(device_name or arch, 10_000.0, 100_000.0, 5_000_000.0,
                          "no datasheet entry for this device; generous defaults")
    gbps = os.environ.get("KERNELS_CUDA_PEAK_GBPS")
    gflops = os.environ.get("KERNELS_CUDA_PEAK_GFLOPS")
    if gbps or gflops:
        chosen = Roofline(
            chosen.device,
            float(gbps) if gbps else chosen.peak_gbps,
            float(gflops) if gflops else chosen.peak_gflops,
            max(chosen.max_gflops, float(gflops)) if gflops else chosen.max_gflops,
            chosen.source + "; overridden by KERNELS_CUDA_PEAK_GBPS/KERNELS_CUDA_PEAK_GFLOPS",
            chosen.bf16_gflops,
        )
    return chosen


# -- device introspection (needs cupy and a GPU) ----------------------------------------------


def _decode(v: Any) -> Any:
    return v.decode("utf-8", "replace").rstrip("\0") if isinstance(v, bytes) else v


def device_info(cp=None, device: int = 0) -> dict[str, Any]:
    """Stable facts about GPU ``device`` through CuPy: name, compute capability, SM count,
    L2 size (bytes), shared memory limits (bytes), total memory (bytes), driver and runtime
    versions (CUDA's integer form, e.g. 13000), NVRTC version, cupy version.

    Raises:
        ImportError: cupy is missing.
        cupy.cuda.runtime.CUDARuntimeError: no usable GPU.
    """
    cp = cp or import_cupy()
    rt = cp.cuda.runtime
    props = rt.getDeviceProperties(device)
    info: dict[str, Any] = {
        "gpu": _decode(props.get("name", "")),
        "compute_capability": f"{props.get('major')}.{props.get('minor')}",
        "sm_count": props.get("multiProcessorCount"),
        "l2_bytes": props.get("l2CacheSize"),
        "smem_per_block_optin": props.get("sharedMemPerBlockOptin"),
        "smem_per_sm": props.get("sharedMemPerMultiprocessor"),
        "regs_per_sm": props.get("regsPerMultiprocessor"),
        "total_memory_bytes": props.get("totalGlobalMem"),
        "driver_version": rt.driverGetVersion(),
        "runtime_version": rt.runtimeGetVersion(),
        "cupy": getattr(cp, "__version__", None),
    }
    try:
        info["nvrtc_version"] = ".".join(str(v) for v in cp.cuda.nvrtc.getVersion())
    except Exception:  # noqa: BLE001 - optional detail
        info["nvrtc_version"] = None
    return info


def arch_of_device(info: Mapping[str, Any]) -> str:
    """``sm_XY`` of a :func:`device_info` dict (``"9.0"`` -> ``sm_90``)."""
    major, _, minor = str(info.get("compute_capability", "")).partition(".")
    return f"sm_{major}{minor}"


# -- timing ---------------------------------------------------------------------------------


def bench_events_run(
    cp,
    fn: Callable[[], object],
    settings: BenchSettings,
    *,
    prepare: Callable[[], None] | None = None,
    flush: Callable[[], None] | None = None,
) -> BenchRun:
    """Time ``fn`` (which enqueues work on the current stream) with CUDA events.

    Same protocol as :func:`kernels.evaluation.timing.bench_run`, measured on the device: at least 3 and
    up to ``max_reps`` warm-up calls until ``warmup_ms`` of device time, an estimate from the
    faster half of them sizing the timed repetitions to about ``rep_ms`` within
    ``[min_reps, max_reps]``. ``prepare`` (e.g. NaN-fill outputs, rotate inputs) and
    ``flush`` (an L2-evicting write) are enqueued before every timed call, outside its
    events, so each sample is the device time of ``fn`` alone; samples are read after one
    final synchronisation (Triton ``do_bench`` style).

    Args:
        cp: the cupy module.
        fn: enqueues the candidate's launches.
        settings: warm-up and repetition budget (ms) and bounds.
        prepare, flush: untimed work before each call.

    Returns:
        :class:`kernels.evaluation.timing.BenchRun`: the raw samples in ms (one per timed call) and the
        first warm-up call's device time (ms).
    """
    start, end = cp.cuda.Event(), cp.cuda.Event()
    warm: list[float] = []
    spent = 0.0
    while len(warm) < 3 or (spent < settings.warmup_ms and len(warm) < settings.max_reps):
        if prepare is not None:
            prepare()
        start.record()
        fn()
        end.record()
        end.synchronize()
        warm.append(float(cp.cuda.get_elapsed_time(start, end)))
        spent += warm[-1]
    est = max(min(warm[len(warm) // 2:]), 1e-6)
    reps = min(max(math.ceil(settings.rep_ms / est), settings.min_reps), settings.max_reps)
    starts = [cp.cuda.Event() for _ in range(reps)]
    ends = [cp.cuda.Event() for _ in range(reps)]
    for s, e in zip(starts, ends):
        if prepare is not None:
            prepare()
        if flush is not None:
            flush()
        s.record()
        fn()
        e.record()
    ends[-1].synchronize()
    return BenchRun([float(cp.cuda.get_elapsed_time(s, e)) for s, e in zip(starts, ends)], warm[0], len(warm))


def bench_events(
    cp,
    fn: Callable[[], object],
    settings: BenchSettings,
    *,
    prepare: Callable[[], None] | None = None,
    flush: Callable[[], None] | None = None,
) -> list[float]:
    """:func:`bench_events_run`'s timed samples alone (ms, one per timed call)."""
    return bench_events_run(cp, fn, settings, prepare=prepare, flush=flush).samples_ms


def make_l2_flush(cp, l2_bytes: int, min_bytes: int = 0) -> Callable[[], None] | None:
    """A function that writes ``max(2 * l2_bytes, min_bytes)`` bytes of fresh values on the
    device (evicting the L2), or None when that size is 0."""
    n = max(2 * int(l2_bytes or 0), int(min_bytes))
    if n <= 0:
        return None
    import numpy as np  # noqa: PLC0415

    buf = cp.empty(n, dtype=np.uint8)
    counter = [0]

    def flush() -> None:
        counter[0] = (counter[0] + 1) & 0xFF
        buf.fill(counter[0])

    return flush


# -- loading and launching (child side, also used by scripts) ----------------------------------


def load_kernels(cp, spec: Mapping[str, Any], names: Iterable[str]) -> dict[str, Any]:
    """Load a module described by :meth:`CudaArtifact.module_spec` and get its kernels.

    ``kind="nvrtc"`` compiles the source file with ``cupy.RawModule(code=..., backend=
    "nvrtc")`` for the current device; ``"cubin"``/``"ptx"`` load the file with
    ``cupy.RawModule(path=...)``.

    Returns:
        ``{name: cupy.RawKernel}``.

    Raises:
        cupy.cuda.compiler.CompileException: NVRTC rejected the source.
        cupy.cuda.driver.CUDADriverError: a kernel is missing or the module cannot load.
    """
    kind = spec["kind"]
    if kind == "nvrtc":
        code = Path(spec["path"]).read_text()
        module = cp.RawModule(code=code, options=tuple(spec.get("options", ())), backend="nvrtc")
    elif kind in ("cubin", "ptx"):
        module = cp.RawModule(path=str(spec["path"]))
    else:
        raise ValueError(f"unknown module kind {kind!r}")
    return {n: module.get_function(n) for n in names}


def kernel_attributes(kern) -> dict[str, Any]:
    """The driver's view of a loaded kernel: registers, static/local/constant bytes, max
    threads per block, PTX and binary versions (None where cupy lacks an attribute)."""
    out = {}
    for attr in ("num_regs", "shared_size_bytes", "local_size_bytes", "const_size_bytes",
                 "max_threads_per_block", "ptx_version", "binary_version"):
        try:
            out[attr] = int(getattr(kern, attr))
        except Exception:  # noqa: BLE001 - optional attribute
            out[attr] = None
    return out


def prepare_kernels(kernels: Mapping[str, Any], launches: Iterable[ResolvedLaunch], smem_default: int = 48 * 1024) -> None:
    """Raise each kernel's dynamic shared-memory limit to the largest its launches ask for
    when that exceeds the default 48 KiB (``cudaFuncAttributeMaxDynamicSharedMemorySize``)."""
    need: dict[str, int] = {}
    for l in launches:
        need[l.kernel] = max(need.get(l.kernel, 0), l.shared_mem_bytes)
    for name, n in need.items():
        if n > smem_default:
            kernels[name].max_dynamic_shared_size_bytes = n


def bind_launches(kernels: Mapping[str, Any], launches: Iterable[ResolvedLaunch],
                  buffers: Mapping[str, Any]) -> list[tuple[Any, tuple, tuple, tuple, int]]:
    """Pre-build every launch's argument tuple (device arrays, numpy scalars) so that a timed
    call only enqueues kernels.

    Args:
        kernels: ``{name: RawKernel}``.
        launches: resolved launches.
        buffers: ``{name: cupy array}`` for inputs, outputs and scratch (the kernels get their
            data pointers).

    Returns:
        ``[(kernel, grid, block, args, shared_mem_bytes)]`` for :func:`run_bound`.
    """
    import numpy as np  # noqa: PLC0415

    conv = {"int32": np.int32, "int64": np.int64, "uint32": np.uint32, "float32": np.float32, "float64": np.float64}
    bound = []
    for l in launches:
        args = tuple(buffers[v] if k == "buffer" else conv[k](v) for k, v in l.args)
        bound.append((kernels[l.kernel], l.grid, l.block, args, l.shared_mem_bytes))
    return bound


def run_bound(bound: Iterable[tuple[Any, tuple, tuple, tuple, int]]) -> None:
    """Enqueue pre-bound launches (:func:`bind_launches`) in order on the current stream."""
    for kern, grid, block, args, smem in bound:
        kern(grid, block, args, shared_mem=smem)


def launch_all(kernels: Mapping[str, Any], launches: Iterable[ResolvedLaunch], buffers: Mapping[str, Any]) -> None:
    """Enqueue ``launches`` in order on the current stream (binds the arguments each call;
    see :func:`bind_launches` for the timed path)."""
    run_bound(bind_launches(kernels, launches, buffers))


# -- the backend ----------------------------------------------------------------------------


class CudaBackend:
    """Drives ``cuda-smXY`` targets: nvcc for static evidence, CuPy for running.

    Args:
        target: ``cuda-sm90`` (default: ``$KERNELS_CUDA_TARGET`` or ``cuda-sm90``),
            ``cuda-sm100``, ``cuda-sm90a``, ...

    Raises:
        ValueError: an unknown target.
    """

    name = "cuda"
    target_prefix = TARGET_PREFIXES["cuda"]
    capabilities = CAPABILITIES["cuda"]

    def __init__(self, target: str | None = None) -> None:
        self.target = target or os.environ.get("KERNELS_CUDA_TARGET") or DEFAULT_TARGET
        self.arch = target_arch(self.target)

    def supports(self, target: str) -> bool:
        """True for ``cuda-smXY`` targets of a known architecture (:data:`kernels.evaluation.static.ARCHS`).

        Compiling and static evidence work for all of them on any machine with nvcc;
        running needs a GPU of that compute capability (the sandbox child checks and fails
        with a clear message otherwise).
        """
        try:
            target_arch(target)
        except ValueError:
            return False
        return True

    def fingerprint(self) -> dict[str, Any]:
        """Environment that determines the compiled code and its speed: target, arch, nvcc
        path and version, compile flags, and with cupy and a GPU: GPU name, compute
        capability, SM count, L2 size, driver/runtime/NVRTC versions and the cupy version
        (``None`` where unavailable)."""
        return dict(_fingerprint(self.target, self.arch))

    def roofline(self) -> Roofline:
        """Limits of this machine's GPU (by name) or of the target's fastest part."""
        return roofline_for(dict(_fingerprint(self.target, self.arch)).get("gpu"), self.arch)

    def physical_limits(self) -> dict[str, Any]:
        """What the evaluator enforces and the roofline it reports against (same keys as
        :func:`kernels.hostperf.physical_limits`): ``gbps`` and ``gflops`` (a result above
        them is ``invalid``: the datasheet's DRAM bandwidth and its fastest float32-input
        rate, TF32 tensor cores dense; margin 1, datasheet figures are already upper
        bounds), ``copy_gbps`` and ``fma_gflops`` (the roofline of ``roofline_pct``: DRAM
        bandwidth and the float32 CUDA-core rate), ``source``, ``margin``, ``device``."""
        rl = self.roofline()
        return {"gbps": rl.peak_gbps, "gflops": rl.max_gflops, "margin": 1.0, "copy_gbps": rl.peak_gbps,
                "fma_gflops": rl.peak_gflops, "bf16_gflops": rl.bf16_gflops, "source": rl.source,
                "device": rl.device}

    def compile(self, source: str, defines: str = "", options: CompileOptions | Mapping[str, Any] | None = None) -> CudaArtifact:
        """Compile a CUDA C or PTX candidate.

        With nvcc available the source is compiled to a cubin with ``--resource-usage`` (the
        compile gate and the static evidence); the module that runs is that cubin
        (``compiler="nvcc"``), the PTX file, or the source recompiled by NVRTC in the
        sandbox child (``compiler="nvrtc"``, the default). Without nvcc, NVRTC candidates
        compile only in the child (a failure there is still ``compile_error``) and
        ``static`` is empty.

        Args:
            source: CUDA C with ``extern "C" __global__`` kernels, or PTX.
            defines: ``#define`` lines prepended to CUDA C (not to PTX).
            options: :class:`CompileOptions` or its dict; default for this target's arch.

        Returns:
            A :class:`CudaArtifact`.

        Raises:
            CompileError: nvcc rejected the source or timed out (``.log`` has its output),
                or ``compiler="nvcc"`` without nvcc.
            ValueError: invalid ``options``.
        """
        opts = CompileOptions.parse(options, arch=self.arch)
        ptx_in = static.is_ptx(source)
        text = source if ptx_in else defines + source
        report: dict[str, Any] = {}
        cubin: Path | None = None
        if static.nvcc_path() is not None:
            cubin, report = static.compile_cubin(source, defines, arch=opts.arch, options=opts.nvcc_flags())
        elif opts.compiler == "nvcc":
            raise CompileError("nvcc not found", "compiler='nvcc' needs nvcc: set KERNELS_NVCC or put nvcc on PATH")
        h = hashlib.sha256()
        for part in (text, repr(opts.to_dict()), str(static.nvcc_version())):
            h.update(part.encode())
            h.update(b"\0")
        key = h.hexdigest()
        if ptx_in:
            kind, suffix = "ptx", ".ptx"
        elif opts.compiler == "nvcc":
            kind, suffix = "cubin", ".cubin"
        else:
            kind, suffix = "nvrtc", ".cu"
        if kind == "cubin":
            assert cubin is not None
            path = cubin
        else:
            d = config.cache_dir() / "cuda"
            d.mkdir(parents=True, exist_ok=True)
            path = d / f"{key}{suffix}"
            if not path.is_file():
                static.atomic_write(path, text.encode())
        log = "" if report.get("cached") else report.get("log", "")
        return CudaArtifact(path, kind, opts, log, key, bool(report.get("cached")), report,
                            "ptx" if ptx_in else "cuda")

    def run(
        self,
        artifact: CudaArtifact,
        launches: list[ResolvedLaunch],
        buffers: Mapping[str, Any],
        *,
        reps: int = 20,
        warmup: int = 3,
        flush: bool = True,
    ) -> list[float]:
        """Time the launches on device buffers in this process (trusted code: scripts,
        baselines; candidates are evaluated in the sandbox by :func:`kernels.evaluate`).

        Args:
            artifact: from :meth:`compile`.
            launches: resolved with :meth:`LaunchPlan.resolve`.
            buffers: ``{name: cupy array}``.
            reps: timed repetitions.
            warmup: untimed calls first.
            flush: write 2x the L2 before each repetition.

        Returns:
            ``reps`` samples in ms (CUDA events).

        Raises:
            ImportError: cupy is missing.
        """
        cp = import_cupy()
        kernels = load_kernels(cp, artifact.module_spec(), {l.kernel for l in launches})
        prepare_kernels(kernels, launches)
        l2 = device_info(cp).get("l2_bytes") or 0
        fl = make_l2_flush(cp, l2) if flush else None
        settings = BenchSettings(warmup_ms=0.0, rep_ms=0.0, min_reps=reps, max_reps=max(reps, warmup, 3))
        bound = bind_launches(kernels, launches, buffers)
        return bench_events(cp, lambda: run_bound(bound), settings, flush=fl)[:reps]


@functools.cache
def _fingerprint(target: str, arch: str) -> tuple[tuple[str, Any], ...]:
    nvcc = static.nvcc_path()
    fp: dict[str, Any] = {
        "backend": "cuda",
        "target": target,
        "arch": arch,
        "nvcc": nvcc,
        "nvcc_version": static.nvcc_version(),
        "flags": ["-cubin", f"-arch={arch}", "--resource-usage", "-Xptxas", "-v"],
        "gpu": None,
        "compute_capability": None,
        "cupy": None,
    }
    try:
        cp = import_cupy()
        fp["cupy"] = getattr(cp, "__version__", None)
        fp.update(device_info(cp))
    except ImportError:
        pass
    except Exception as exc:  # noqa: BLE001 - no GPU here: describe what there is
        fp["gpu_error"] = f"{type(exc).__name__}: {exc}"[:300]
    return tuple(fp.items())
