"""CUDA backend: ``extern "C" __global__`` kernels (or PTX) driven through CuPy.

A CUDA candidate is a source plus a :class:`LaunchPlan`: one or more launches, each naming a
kernel, its grid and block as safe expressions over the shape's axes, the design-space
parameters and the workload's attributes (:class:`kernels.restrictions.Expression`, never
``eval``), a dynamic shared-memory size and an argument list naming buffers, axes and
attributes. Multi-kernel algorithms (split-K, two-pass softmax) add float32 ``scratch``
buffers.

- Compile: ``nvcc -cubin --resource-usage`` gives static evidence wherever nvcc exists (no GPU
  needed) and is the compile gate; the module that runs is built by CuPy's ``RawModule``
  (NVRTC, the default, ``compiler="nvrtc"``) in the sandboxed child, or is nvcc's cubin
  (``compiler="nvcc"``, needed for ``sm_90a``). PTX candidates load through the same plan
  (``cupy.RawModule(path=...)``, the driver JIT-compiles them).
- Run: CUDA-event timing with an L2 flush (a write of 2x the device's L2) before every
  timed repetition (:func:`bench_events`), like Triton's ``do_bench``.

cupy is imported lazily; without it :meth:`CudaBackend.run` and the evaluation raise an
ImportError naming cupy, while compile, static evidence and plan parsing keep working.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernels import config, static
from kernels.backends.cpu import CompileError
from kernels.restrictions import Expression, RestrictionError

if TYPE_CHECKING:
    from kernels.timing import BenchSettings

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
    "import_cupy",
    "roofline_for",
    "target_arch",
]

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TARGET = re.compile(r"^cuda-sm(\d{2,3})(a?)$")
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
            :data:`kernels.static.ARCHS` does not know.
    """
    m = _TARGET.match(target or "")
    if not m:
        raise ValueError(f"CUDA target must look like 'cuda-sm90' or 'cuda-sm100', got {target!r}")
    arch = f"sm_{m.group(1)}{m.group(2)}"
    if arch not in static.ARCHS:
        known = ", ".join("cuda-" + a.replace("_", "") for a in static.ARCHS)
        raise ValueError(f"unknown CUDA target {target!r} (known: {known})")
    return arch


# -- launch plans ---------------------------------------------------------------------------


class LaunchPlanError(ValueError):
    """A launch plan is malformed or cannot be resolved at a shape; the message names the
    offending part (``launches[0].grid[1]: ...``) and how to fix it."""


_ARG_DTYPES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1),
               "uint32": (0, 2**32 - 1), "float32": None, "float64": None}


@dataclass(frozen=True)
class LaunchArg:
    """One kernel argument.

    Attributes:
        expr: a buffer name (input, output or scratch: passed as a device pointer) or a safe
            expression over axes, parameters and attributes (passed by value).
        dtype: C type of a by-value argument: ``int32`` (``int``), ``int64`` (``long long``),
            ``uint32``, ``float32`` (``float``), ``float64`` (``double``); None infers
            ``int32`` for integer values and ``float32`` otherwise. Ignored for buffers.
    """

    expr: str
    dtype: str | None = None

    def to_json(self) -> str | dict[str, str]:
        return self.expr if self.dtype is None else {"expr": self.expr, "dtype": self.dtype}


@dataclass(frozen=True)
class Launch:
    """One kernel launch of a plan.

    Attributes:
        kernel: name of an ``extern "C" __global__`` function of the source.
        grid, block: 1 to 3 safe expressions (x, y, z; missing ones are 1), e.g.
            ``("(rows + ROWS_PER_BLOCK - 1) // ROWS_PER_BLOCK",)`` and ``("BLOCK_SIZE",)``.
        shared_mem_bytes: dynamic shared memory per block (bytes), a safe expression.
        args: the kernel's arguments in order.
    """

    kernel: str
    grid: tuple[str, ...]
    block: tuple[str, ...]
    shared_mem_bytes: str = "0"
    args: tuple[LaunchArg, ...] = ()


@dataclass(frozen=True)
class ResolvedLaunch:
    """A :class:`Launch` evaluated at one shape: concrete sizes and arguments.

    Attributes:
        kernel: kernel name.
        grid, block: 3 ints each.
        shared_mem_bytes: dynamic shared memory per block (bytes).
        args: ``("buffer", name)`` or ``(dtype, value)`` per argument.
    """

    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem_bytes: int
    args: tuple[tuple[str, Any], ...]

    @property
    def block_threads(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    def to_json(self) -> dict[str, Any]:
        return {"kernel": self.kernel, "grid": list(self.grid), "block": list(self.block),
                "shared_mem_bytes": self.shared_mem_bytes, "args": [list(a) for a in self.args]}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ResolvedLaunch:
        return cls(str(d["kernel"]), tuple(int(v) for v in d["grid"]), tuple(int(v) for v in d["block"]),  # type: ignore[arg-type]
                   int(d["shared_mem_bytes"]), tuple((str(k), v) for k, v in d["args"]))


@functools.lru_cache(maxsize=4096)
def _expression(text: str, names: frozenset[str]) -> Expression:
    return Expression(text, names)


def _names_in(text: str) -> frozenset[str]:
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, RecursionError, MemoryError, ValueError):
        return frozenset()
    return frozenset(n.id for n in ast.walk(tree) if isinstance(n, ast.Name))


def _expr_text(v: Any, where: str) -> str:
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise LaunchPlanError(f"{where}: must be an integer or an expression string, got {v!r}")
    return str(v)


@dataclass(frozen=True)
class LaunchPlan:
    """How to launch a CUDA candidate: one or more launches, run in order on one stream.

    Build it with :meth:`from_dict` from JSON such as::

        {"launches": [{"kernel": "rmsnorm_kernel",
                       "grid": ["(rows + ROWS_PER_BLOCK - 1) // ROWS_PER_BLOCK"],
                       "block": ["BLOCK_SIZE"],
                       "shared_mem_bytes": "0",
                       "args": ["x", "w", "y", "rows", "hidden", "eps"]}],
         "scratch": {"partial": "SPLIT_K * M * N"}}

    Attributes:
        launches: the launches in order.
        scratch: ``(name, expression)`` pairs: float32 device buffers of that many elements
            (allocated by the evaluator, NaN-filled before every call), for intermediate
            results of multi-kernel algorithms. Kernels must initialise what they read.
    """

    launches: tuple[Launch, ...]
    scratch: tuple[tuple[str, str], ...] = ()

    # -- parsing -----------------------------------------------------------------------------

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | LaunchPlan, names: Iterable[str] | None = None) -> LaunchPlan:
        """Parse and validate a plan.

        Args:
            d: ``{"launches": [...], "scratch": {name: expression}}`` (see the class doc); a
                :class:`LaunchPlan` is accepted and re-validated.
            names: identifiers expressions may use besides scratch names: axes, parameters,
                attributes and the workload's buffer names (:func:`plan_names`). None checks
                syntax only; names are then checked by :meth:`resolve`.

        Raises:
            LaunchPlanError: structure, expression syntax, disallowed constructs or unknown
                names, with the path of the offending entry.
        """
        if isinstance(d, LaunchPlan):
            d = d.to_dict()
        if not isinstance(d, Mapping):
            raise LaunchPlanError("launch plan must be an object with 'launches' (a list of launches)")
        unknown = set(d) - {"launches", "scratch"}
        if unknown:
            raise LaunchPlanError(f"launch plan: unknown keys {sorted(unknown)} (allowed: launches, scratch)")
        raw = d.get("launches")
        if not isinstance(raw, (list, tuple)) or not raw:
            raise LaunchPlanError("launch plan needs 'launches': a non-empty list of {kernel, grid, block, args}")
        scratch_raw = d.get("scratch", {}) or {}
        if not isinstance(scratch_raw, Mapping):
            raise LaunchPlanError("launch plan 'scratch' must be an object {name: element-count expression}")
        scratch = []
        for name, expr in scratch_raw.items():
            if not isinstance(name, str) or not _IDENT.match(name):
                raise LaunchPlanError(f"scratch buffer name {name!r} must be an identifier")
            scratch.append((name, _expr_text(expr, f"scratch.{name}")))
        launches = tuple(cls._parse_launch(i, item) for i, item in enumerate(raw))
        plan = cls(launches, tuple(scratch))
        plan._check(None if names is None else frozenset(names))
        return plan

    @staticmethod
    def _parse_launch(i: int, item: Any) -> Launch:
        where = f"launches[{i}]"
        if not isinstance(item, Mapping):
            raise LaunchPlanError(f"{where}: must be an object with kernel, grid, block, args")
        unknown = set(item) - {"kernel", "grid", "block", "shared_mem_bytes", "args"}
        if unknown:
            raise LaunchPlanError(f"{where}: unknown keys {sorted(unknown)} (allowed: kernel, grid, block, shared_mem_bytes, args)")
        kernel = item.get("kernel")
        if not isinstance(kernel, str) or not _IDENT.match(kernel):
            raise LaunchPlanError(f'{where}.kernel: must name an extern "C" __global__ function, got {kernel!r}')
        dims = {}
        for key in ("grid", "block"):
            v = item.get(key)
            if isinstance(v, (int, str)) and not isinstance(v, bool):
                v = [v]
            if not isinstance(v, (list, tuple)) or not 1 <= len(v) <= 3:
                raise LaunchPlanError(f"{where}.{key}: must be a list of 1 to 3 expressions (x, y, z), got {v!r}")
            dims[key] = tuple(_expr_text(e, f"{where}.{key}[{j}]") for j, e in enumerate(v))
        smem = _expr_text(item.get("shared_mem_bytes", "0"), f"{where}.shared_mem_bytes")
        raw_args = item.get("args", [])
        if not isinstance(raw_args, (list, tuple)):
            raise LaunchPlanError(f"{where}.args: must be a list of buffer names or expressions")
        args = []
        for j, a in enumerate(raw_args):
            w = f"{where}.args[{j}]"
            if isinstance(a, Mapping):
                if set(a) - {"expr", "dtype"} or "expr" not in a:
                    raise LaunchPlanError(f"{w}: an object argument needs 'expr' and optional 'dtype'")
                dtype = a.get("dtype")
                if dtype is not None and dtype not in _ARG_DTYPES:
                    raise LaunchPlanError(f"{w}: dtype {dtype!r} not one of {', '.join(_ARG_DTYPES)}")
                args.append(LaunchArg(_expr_text(a["expr"], w), dtype))
            else:
                args.append(LaunchArg(_expr_text(a, w)))
        return Launch(kernel, dims["grid"], dims["block"], smem, tuple(args))

    def _expressions(self) -> Iterable[tuple[str, str]]:
        for name, expr in self.scratch:
            yield f"scratch.{name}", expr
        for i, launch in enumerate(self.launches):
            for key in ("grid", "block"):
                for j, e in enumerate(getattr(launch, key)):
                    yield f"launches[{i}].{key}[{j}]", e
            yield f"launches[{i}].shared_mem_bytes", launch.shared_mem_bytes
            for j, a in enumerate(launch.args):
                yield f"launches[{i}].args[{j}]", a.expr

    def _check(self, names: frozenset[str] | None) -> None:
        scratch = frozenset(n for n, _ in self.scratch)
        for where, text in self._expressions():
            allowed = _names_in(text) if names is None else names | scratch
            try:
                _expression(text, frozenset(allowed))
            except RestrictionError as exc:
                raise LaunchPlanError(f"{where}: {exc}") from None

    def to_dict(self) -> dict[str, Any]:
        """JSON form accepted by :meth:`from_dict`."""
        d: dict[str, Any] = {
            "launches": [
                {"kernel": l.kernel, "grid": list(l.grid), "block": list(l.block),
                 "shared_mem_bytes": l.shared_mem_bytes, "args": [a.to_json() for a in l.args]}
                for l in self.launches
            ]
        }
        if self.scratch:
            d["scratch"] = dict(self.scratch)
        return d

    @property
    def kernels(self) -> tuple[str, ...]:
        """Distinct kernel names in launch order."""
        return tuple(dict.fromkeys(l.kernel for l in self.launches))

    # -- resolution --------------------------------------------------------------------------

    def resolve(
        self,
        env: Mapping[str, int | float],
        buffers: Iterable[str],
        *,
        arch: str = "sm_90",
    ) -> tuple[list[ResolvedLaunch], dict[str, int]]:
        """Evaluate every expression at one point.

        Args:
            env: values of axes, parameters and attributes, e.g. ``{"rows": 7, "hidden":
                4099, "BLOCK_SIZE": 256, "eps": 1e-5}``.
            buffers: names of the workload's input and output arrays.
            arch: architecture whose per-block limits apply (shared memory opt-in limit).

        Returns:
            ``(launches, scratch)``: the resolved launches and ``{scratch name: float32
            element count}``.

        Raises:
            LaunchPlanError: an unknown name, a non-integer or out-of-range grid/block/shared
                memory size (block > 1024 threads, grid y/z > 65535, shared memory above the
                architecture's opt-in limit), a scratch name clashing with a buffer, or a
                by-value argument outside its dtype's range.
        """
        lim = static.arch_limits(arch)
        bufs = set(buffers)
        scratch_names = {n for n, _ in self.scratch}
        clash = bufs & scratch_names | (set(env) & (bufs | scratch_names))
        if clash:
            raise LaunchPlanError(f"names used twice (buffer, scratch, axis or parameter): {sorted(clash)}")
        names = frozenset(env)

        def value(where: str, text: str) -> int | float | bool:
            try:
                return _expression(text, names).value(env)
            except RestrictionError as exc:
                raise LaunchPlanError(f"{where}: {exc}") from None

        def integer(where: str, text: str, lo: int, hi: int) -> int:
            v = value(where, text)
            if isinstance(v, bool) or not isinstance(v, int):
                raise LaunchPlanError(f"{where} '{text}' = {v!r}: must be an integer (use // for integer division)")
            if not lo <= v <= hi:
                raise LaunchPlanError(f"{where} '{text}' = {v}: must be in [{lo}, {hi}]")
            return v

        scratch = {n: integer(f"scratch.{n}", e, 0, 2**34) for n, e in self.scratch}
        all_bufs = bufs | scratch_names
        out = []
        for i, l in enumerate(self.launches):
            w = f"launches[{i}]"
            gmax = (2**31 - 1, 65535, 65535)
            bmax = (lim.max_threads_per_block, lim.max_threads_per_block, 64)
            grid = [integer(f"{w}.grid[{j}]", e, 1, gmax[j]) for j, e in enumerate(l.grid)]
            block = [integer(f"{w}.block[{j}]", e, 1, bmax[j]) for j, e in enumerate(l.block)]
            grid += [1] * (3 - len(grid))
            block += [1] * (3 - len(block))
            threads = block[0] * block[1] * block[2]
            if threads > lim.max_threads_per_block:
                raise LaunchPlanError(f"{w}.block {block}: {threads} threads per block exceed {lim.max_threads_per_block}")
            smem = integer(f"{w}.shared_mem_bytes", l.shared_mem_bytes, 0, lim.smem_per_block_optin)
            args: list[tuple[str, Any]] = []
            for j, a in enumerate(l.args):
                if a.expr in all_bufs:
                    args.append(("buffer", a.expr))
                    continue
                v = value(f"{w}.args[{j}]", a.expr)
                if isinstance(v, bool):
                    v = int(v)
                dtype = a.dtype or ("int32" if isinstance(v, int) else "float32")
                rng = _ARG_DTYPES[dtype]
                if rng is not None:
                    if not isinstance(v, int):
                        raise LaunchPlanError(f"{w}.args[{j}] '{a.expr}' = {v!r}: dtype {dtype} needs an integer")
                    if not rng[0] <= v <= rng[1]:
                        raise LaunchPlanError(f"{w}.args[{j}] '{a.expr}' = {v}: out of range for {dtype}")
                elif not math.isfinite(float(v)):
                    raise LaunchPlanError(f"{w}.args[{j}] '{a.expr}' = {v}: not finite")
                args.append((dtype, v if rng is not None else float(v)))
            out.append(ResolvedLaunch(l.kernel, tuple(grid), tuple(block), smem, tuple(args)))  # type: ignore[arg-type]
        return out, scratch


def plan_env(workload, shape: Mapping[str, int], params: Mapping[str, Any]) -> dict[str, int | float]:
    """Names a launch plan may use at ``shape``: the shape's axes, the workload's attributes
    (e.g. ``eps``) and the parameter values.

    Raises:
        LaunchPlanError: a parameter has the name of an axis or attribute.
    """
    env: dict[str, int | float] = {k: int(v) for k, v in shape.items()}
    for k, v in workload.attrs.items():
        env[k] = float(v)
    clash = set(params) & set(env)
    if clash:
        raise LaunchPlanError(f"parameters {sorted(clash)} shadow axes or attributes of workload '{workload.name}'")
    env.update(params)
    return env


def plan_names(workload, params: Iterable[str]) -> frozenset[str]:
    """All identifiers a plan for ``workload`` may use (besides its own scratch names): the
    axes of every shape set, the attributes, the parameter names and the input and output
    buffer names."""
    axes = {k for shapes in workload.shape_sets.values() for s in shapes for k in s}
    axes |= {k for shapes in workload.validation_shapes.values() for s in shapes for k in s}
    buffers = set(workload.inputs) | set(workload.outputs)
    return frozenset(axes) | frozenset(workload.attrs) | frozenset(params) | frozenset(buffers)


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
            ``compiler="nvcc"``), ... (:data:`kernels.static.ARCHS`).
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
        static: nvcc's resource report (:func:`kernels.static.compile_cubin`): per kernel
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
    """

    device: str
    peak_gbps: float
    peak_gflops: float
    max_gflops: float
    source: str


# Vendor datasheets; dense (non-sparse) tensor rates are half the "with sparsity" figures.
_H100_SXM = "NVIDIA H100 Tensor Core GPU datasheet (SXM5: 3.35 TB/s HBM3, FP32 67 TFLOPS, TF32 989 TFLOPS with sparsity)"
_H200 = "NVIDIA H200 Tensor Core GPU datasheet (SXM: 4.8 TB/s HBM3e, FP32 67 TFLOPS, TF32 989 TFLOPS with sparsity)"
_ROOFLINES: tuple[tuple[str, Roofline], ...] = (
    ("H200", Roofline("H200 SXM", 4800.0, 67_000.0, 494_700.0, _H200)),
    ("H100 PCIe", Roofline("H100 PCIe", 2000.0, 51_000.0, 378_000.0,
                           "NVIDIA H100 datasheet (PCIe: 2.0 TB/s, FP32 51 TFLOPS, TF32 756 TFLOPS with sparsity)")),
    ("H100 NVL", Roofline("H100 NVL", 3900.0, 60_000.0, 417_500.0,
                          "NVIDIA H100 datasheet (NVL: 3.9 TB/s, FP32 60 TFLOPS, TF32 835 TFLOPS with sparsity)")),
    ("H100", Roofline("H100 SXM", 3350.0, 67_000.0, 494_700.0, _H100_SXM)),
    ("B200", Roofline("B200", 8000.0, 80_000.0, 1_100_000.0,
                      "NVIDIA HGX B200 datasheet (8 TB/s HBM3e, FP32 80 TFLOPS, TF32 2.2 PFLOPS with sparsity); leads, verify")),
    ("A100", Roofline("A100 SXM 80GB", 2039.0, 19_500.0, 156_000.0,
                      "NVIDIA A100 datasheet (SXM 80GB: 2,039 GB/s, FP32 19.5 TFLOPS, TF32 156 TFLOPS)")),
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
        )
    return chosen


def roofline_metrics(workload, shapes: Iterable[Mapping[str, int]], latency_ms: Mapping[str, float],
                     roofline: Roofline) -> dict[str, float]:
    """Percent of roofline per shape and over the set.

    The attainable time of a shape is ``max(bytes / peak_gbps, flops / peak_gflops)``
    (Williams et al., "Roofline", CACM 2009, doi:10.1145/1498765.1498785); the percentage is
    attainable over measured time.

    Args:
        workload: the :class:`~kernels.workloads.Workload` (``bytes``, ``flops``).
        shapes: the timed shapes.
        latency_ms: median latency (ms) per shape label.
        roofline: the device's limits.

    Returns:
        ``pct_roofline`` (sum of attainable over sum of measured, %), ``pct_roofline[<label>]``,
        ``pct_peak_gbps`` and ``pct_peak_gflops`` (whole-set GB/s and GFLOP/s against the
        peaks, %).
    """
    from kernels.workloads import shape_label  # noqa: PLC0415

    out: dict[str, float] = {}
    total_t = total_att = total_bytes = total_flops = 0.0
    for shape in shapes:
        label = shape_label(shape)
        t = latency_ms.get(label)
        if not t or t <= 0:
            continue
        b, f = workload.bytes(shape), workload.flops(shape)
        att_ms = max(b / (roofline.peak_gbps * 1e9), f / (roofline.peak_gflops * 1e9)) * 1e3
        out[f"pct_roofline[{label}]"] = 100.0 * att_ms / t
        total_t += t
        total_att += att_ms
        total_bytes += b
        total_flops += f
    if total_t > 0:
        out["pct_roofline"] = 100.0 * total_att / total_t
        out["pct_peak_gbps"] = 100.0 * total_bytes / (total_t * 1e-3) / 1e9 / roofline.peak_gbps
        out["pct_peak_gflops"] = 100.0 * total_flops / (total_t * 1e-3) / 1e9 / roofline.peak_gflops
    return out


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


def bench_events(
    cp,
    fn: Callable[[], object],
    settings: BenchSettings,
    *,
    prepare: Callable[[], None] | None = None,
    flush: Callable[[], None] | None = None,
) -> list[float]:
    """Time ``fn`` (which enqueues work on the current stream) with CUDA events.

    Same protocol as :func:`kernels.timing.bench`, measured on the device: at least 3 and up
    to ``max_reps`` warm-up calls until ``warmup_ms`` of device time, an estimate from the
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
        Raw samples in ms, one per timed call.
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
    return [float(cp.cuda.get_elapsed_time(s, e)) for s, e in zip(starts, ends)]


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


def launch_all(kernels: Mapping[str, Any], launches: Iterable[ResolvedLaunch], buffers: Mapping[str, Any]) -> None:
    """Enqueue ``launches`` in order on the current stream.

    Args:
        kernels: ``{name: RawKernel}``.
        launches: resolved launches.
        buffers: ``{name: cupy array}`` for inputs, outputs and scratch.
    """
    import numpy as np  # noqa: PLC0415

    conv = {"int32": np.int32, "int64": np.int64, "uint32": np.uint32, "float32": np.float32, "float64": np.float64}
    for l in launches:
        args = tuple(buffers[v] if k == "buffer" else conv[k](v) for k, v in l.args)
        kernels[l.kernel](l.grid, l.block, args, shared_mem=l.shared_mem_bytes)


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

    def __init__(self, target: str | None = None) -> None:
        self.target = target or os.environ.get("KERNELS_CUDA_TARGET") or DEFAULT_TARGET
        self.arch = target_arch(self.target)

    def supports(self, target: str) -> bool:
        """True for ``cuda-smXY`` targets of a known architecture (:data:`kernels.static.ARCHS`).

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
        return roofline_for(_fingerprint(self.target, self.arch).get("gpu"), self.arch)

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
                static._atomic_write(path, text.encode())
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
        from kernels.timing import BenchSettings  # noqa: PLC0415

        cp = import_cupy()
        kernels = load_kernels(cp, artifact.module_spec(), {l.kernel for l in launches})
        prepare_kernels(kernels, launches)
        l2 = device_info(cp).get("l2_bytes") or 0
        fl = make_l2_flush(cp, l2) if flush else None
        settings = BenchSettings(warmup_ms=0.0, rep_ms=0.0, min_reps=reps, max_reps=max(reps, warmup, 3))
        return bench_events(cp, lambda: launch_all(kernels, launches, buffers), settings, flush=fl)[:reps]


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
