"""Launch plans of CUDA candidates: which kernels to launch, with what sizes and arguments.

A plan is JSON (docs/design.md, candidate contract): one or more launches, each naming an
``extern "C" __global__`` kernel, its grid and block as 1-3 safe expressions over the shape's
axes, the design-space parameters and the workload's attributes, a dynamic shared-memory
size and an argument list naming buffers (inputs, outputs, scratch) or by-value expressions;
plus optional float32 ``scratch`` buffers for multi-kernel algorithms (split-K, two-pass
reductions). Expressions use :class:`kernels.restrictions.Expression` (a whitelisted AST
walk, never ``eval``). :meth:`LaunchPlan.resolve` turns a plan into concrete
:class:`ResolvedLaunch` objects at one shape, checking the hardware limits of the target
architecture (:data:`kernels.evaluation.static.ARCHS`).

Framework-free and import-light: usable by the web forms to validate a plan without cupy.
"""

from __future__ import annotations

import ast
import functools
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kernels.evaluation import static
from kernels.restrictions import Expression, RestrictionError

__all__ = [
    "Launch",
    "LaunchArg",
    "LaunchPlan",
    "LaunchPlanError",
    "ResolvedLaunch",
    "plan_env",
    "plan_names",
]

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")  # \Z: "$" would admit a trailing newline


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
