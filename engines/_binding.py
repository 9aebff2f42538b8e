"""Binding an operator to the kernel that runs it: a baseline, a template or a production kernel.

Trust decision (documented here because it is the one place candidate code enters a
process): a C kernel is loaded with ``ctypes`` (:func:`c_kernel`) into the process that
binds it. Which processes bind which code:

* **sandbox children only**, confined as the evaluator's (:func:`kernels.sandbox.spawn.start_child`:
  sandbox user, namespaces, Landlock, seccomp, limits, disk quota, empty environment), for
  what the swarm evaluates or checks automatically:

  - an **engine plan** (an engine goal's candidate, :func:`engines.goals.evaluate_plan`,
    also each plan a tuning measures, :mod:`engines.tuning`): validated and timed in
    :mod:`engines._plan_child`, its production kernels and templates compiled by the parent
    (:mod:`engines._plan_isolated`) and loaded from those libraries (``library``);
  - a **candidate not yet promoted** (the promotion guard re-validating and re-benchmarking
    production engines with it): :mod:`engines._isolated` / :mod:`engines._guard_child`;

  so the web and worker processes never load a kernel for either.
* **the process itself**, where a person runs an engine deliberately with kernels already
  trusted: serving it (``manage.py engine serve``, :mod:`engines.serve`), the command line
  (``python -m engines validate|bench|describe``) and recording a production engine's
  benchmark (:func:`swarm.engine_registry.services.record_benchmark`: ``manage.py engine
  bench --record``, and the benchmark recorded when a plan tuning is adopted). The kernels
  bound there are

  - **production kernels**: candidates that passed the sandboxed evaluation
    (:func:`kernels.evaluate`: confined child, guard regions, fresh-seed validation, timing
    re-validation) *and* were promoted by an approver after the extended re-validation of
    :mod:`swarm.production.promotion`; or
  - **templates** of this repository (``kernels/workloads/*/template.c`` at default or tuned
    parameters): code reviewed and versioned with the project, like NumPy itself.

  Production kernels have no sandbox there: a promoted kernel is as trusted as the
  engine's own code, which is why promotion demands evidence and an approver.

The in-process kernel is compiled by the CPU backend's ``compile`` (same flags, same
content-addressed cache as the evaluator) and called with the workload's C signature.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from engines._baselines import BASELINES

# Kernel choices of a plan (``KERNEL_<WORKLOAD>`` parameters of an engine's design space).
BASELINE, TEMPLATE, PRODUCTION = 0, 1, 2
CHOICE_NAMES = {BASELINE: "baseline", TEMPLATE: "template", PRODUCTION: "production"}


@dataclass(frozen=True)
class KernelSpec:
    """A C kernel for one workload: source plus the parameter values prepended as #defines.

    Attributes:
        workload: registered workload name (its C entry point).
        source: C source text.
        params: ``#define`` values.
        origin: ``"production"``, ``"template"`` or ``"candidate"`` (a candidate under a
            promotion guard, only ever run in a child process).
        candidate: swarm candidate id of a production kernel or candidate, if any.
        content_hash: the candidate's content hash, if any.
        shape_set: the shape set it was promoted for.
        evidence: a summary of its evidence (metrics, status), shown on engine pages.
        validated_shapes: further shapes it was validated and benchmarked at (by a passed
            promotion guard check of an engine); see :mod:`engines._coverage`.
        library: path of its compiled shared library, loaded as it is (the promotion
            guard's sandbox child, which cannot run the compiler); empty: compile ``source``.
    """

    workload: str
    source: str
    params: Mapping[str, Any] = field(default_factory=dict)
    origin: str = "template"
    candidate: int | None = None
    content_hash: str = ""
    shape_set: str = ""
    evidence: Mapping[str, Any] = field(default_factory=dict)
    validated_shapes: tuple[Mapping[str, int], ...] = ()
    library: str = ""

    def describe(self) -> dict[str, Any]:
        return {"origin": self.origin, "workload": self.workload, "params": dict(self.params),
                "candidate": self.candidate, "hash": self.content_hash, "shape_set": self.shape_set,
                "evidence": dict(self.evidence), "validated_shapes": [dict(s) for s in self.validated_shapes]}


class ProductionRegistry(Protocol):
    """Where production kernels come from (the swarm's Promotion table, a JSON export, ...).

    ``specs`` lists every production kernel of a workload in order of preference; the
    binding takes the first covered at the operator's shape (:func:`engines._coverage.choose`).
    A registry with only ``lookup`` has its one kernel checked the same way.
    """

    def lookup(self, workload: str, target: str, shape: Mapping[str, int]) -> KernelSpec | None:
        """The production kernel for ``workload`` on ``target`` covered at ``shape``, or None."""


class NoProduction:
    """A registry with nothing in production: every ``production`` choice falls back to the
    baseline."""

    def specs(self, workload: str, target: str) -> list[KernelSpec]:
        return []

    def lookup(self, workload: str, target: str, shape: Mapping[str, int]) -> KernelSpec | None:
        return None


class StaticRegistry:
    """Production kernels given as a mapping ``workload -> KernelSpec`` or a list of
    ``/api/production/`` JSON objects (``workload``, ``target``, ``source``, ``params``, ...).

    Several entries of one workload (promotions for different shape sets) are kept in order,
    the last given first; a JSON entry may carry ``validated_shapes`` and ``library`` (see
    :class:`KernelSpec`). ``overrides`` (``workload -> KernelSpec``) win over the production
    entries: the promotion guard uses them to put a candidate in place of the production kernel.
    """

    def __init__(self, entries: Mapping[str, KernelSpec] | list[dict] | None = None, target: str | None = None,
                 overrides: Mapping[str, KernelSpec] | None = None) -> None:
        self._by_workload: dict[str, list[KernelSpec]] = {}
        if isinstance(entries, Mapping):
            for w, spec in entries.items():
                self._by_workload[w] = [spec]
        for e in entries if isinstance(entries, list) else []:
            if target and e.get("target") not in (None, target):
                continue
            self._by_workload.setdefault(e["workload"], []).insert(0, spec_from_entry(e))
        for w, spec in (overrides or {}).items():
            self._by_workload[w] = [spec]

    def specs(self, workload: str, target: str) -> list[KernelSpec]:
        return list(self._by_workload.get(workload, ()))

    def lookup(self, workload: str, target: str, shape: Mapping[str, int]) -> KernelSpec | None:
        from engines._coverage import choose  # noqa: PLC0415

        return choose(self.specs(workload, target), shape)[0]


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def entry_problem(e: Any) -> str | None:
    """What is wrong with ``e`` as an ``/api/production/``-like JSON object, completing
    "entry N ...", or None when :func:`spec_from_entry` can build a kernel from it.

    Checked: an object with a string ``workload`` and ``source``; if present, ``params`` an
    object of ``#define`` values (C identifiers, finite numbers), ``evidence`` an object,
    ``validated_shapes`` a list of objects whose values are integers (not bools),
    ``candidate`` an integer, and ``target``, ``library``, ``hash``, ``shape_set`` strings
    (``null`` counts as absent). Whether the source compiles is not checked here.
    """
    from kernels.space import SpaceError, format_defines  # noqa: PLC0415

    if not isinstance(e, dict):
        return "is not an object"
    for key in ("workload", "source"):
        if not isinstance(e.get(key), str):
            return f"has no string {key!r}"
    params = e.get("params") or {}
    if params:
        if not isinstance(params, dict):
            return "has 'params' that are not an object"
        try:
            format_defines(params)
        except SpaceError as exc:
            return f"has 'params' that are not #define values: {exc}"
    if not isinstance(e.get("evidence") or {}, dict):
        return "has 'evidence' that is not an object"
    shapes = e.get("validated_shapes")
    if shapes is not None:
        if not isinstance(shapes, list):
            return "has 'validated_shapes' that are not a list"
        for j, shape in enumerate(shapes):
            if not isinstance(shape, dict):
                return f"has validated_shapes[{j}] that is not an object"
            bad = next((k for k, v in shape.items() if not _is_int(v)), None)
            if bad is not None:
                return f"has validated_shapes[{j}] with {bad}={shape[bad]!r}, not an integer"
    if e.get("candidate") is not None and not _is_int(e["candidate"]):
        return "has a 'candidate' that is not an integer"
    for key in ("target", "library", "hash", "shape_set"):
        if e.get(key) is not None and not isinstance(e[key], str):
            return f"has a {key!r} that is not a string"
    return None


def spec_from_entry(e: Mapping[str, Any]) -> KernelSpec:
    """A production :class:`KernelSpec` from an ``/api/production/``-like JSON object.

    Raises:
        ValueError: the object is malformed (:func:`entry_problem` says how).
    """
    problem = entry_problem(e)
    if problem:
        raise ValueError(f"production entry {problem}")
    ev = e.get("evidence") or {}
    return KernelSpec(workload=e["workload"], source=e["source"], params=e.get("params") or {}, origin="production",
                      candidate=e.get("candidate"), content_hash=e.get("hash") or "", shape_set=e.get("shape_set") or "",
                      evidence={"status": ev.get("status"), "metrics": ev.get("metrics", {})},
                      validated_shapes=tuple(dict(s) for s in e.get("validated_shapes") or ()),
                      library=e.get("library") or "")


def template_spec(workload: str) -> KernelSpec:
    """The repository's CPU template of ``workload`` at its default parameters."""
    from kernels.templates import load_template  # noqa: PLC0415

    return KernelSpec(workload=workload, source=load_template(workload, "cpu"), params={}, origin="template")


class BoundKernel:
    """A callable kernel: ``kernel(inputs, outputs, shape, attrs)`` with named float32 arrays.

    Attributes:
        workload: workload name.
        kind: ``"baseline"``, ``"template"``, ``"production"`` or ``"candidate"``.
        spec: the C kernel's :class:`KernelSpec` (None for a baseline).
        note: why this binding was chosen (e.g. "no production kernel: baseline").
    """

    def __init__(self, workload: str, kind: str, fn, spec: KernelSpec | None = None, note: str = "") -> None:
        self.workload, self.kind, self._fn, self.spec, self.note = workload, kind, fn, spec, note

    def __call__(self, inputs: Mapping[str, np.ndarray], outputs: dict[str, np.ndarray],
                 shape: Mapping[str, int], attrs: Mapping[str, float]) -> None:
        self._fn(inputs, outputs, shape, attrs)

    def describe(self) -> dict[str, Any]:
        d = {"kind": self.kind, "workload": self.workload, "note": self.note}
        if self.spec is not None:
            d.update(self.spec.describe())
            d["kind"] = self.kind
        return d


def baseline_kernel(workload: str, note: str = "") -> BoundKernel:
    """The NumPy/BLAS baseline of ``workload``.

    Raises:
        KeyError: no baseline for the workload.
    """
    try:
        fn = BASELINES[workload]
    except KeyError:
        raise KeyError(f"no baseline implementation of workload '{workload}' (known: {', '.join(sorted(BASELINES))})") from None
    return BoundKernel(workload, "baseline", fn, None, note or "NumPy float32 + BLAS")


_LIBS: dict[str, ctypes.CDLL] = {}
_LIBS_LOCK = threading.Lock()


def _prepare_openmp_env() -> None:
    """Sleeping (not spinning) OpenMP threads, unless the user chose otherwise: in an engine
    the C kernels alternate with BLAS calls whose threads would otherwise fight spinning
    OpenMP workers for the same cores (see :mod:`kernels.evaluation.timing` for the measurements that
    made PASSIVE the evaluator's timing default too). Read by libgomp when it is first loaded."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def c_kernel(spec: KernelSpec, *, kind: str | None = None, note: str = "") -> BoundKernel:
    """Compile ``spec`` with the CPU backend (cached) and bind its entry point with ctypes.

    Only production kernels and templates are bound in a process that is not a sandbox child,
    and only where a person runs an engine deliberately (module docstring).

    Raises:
        kernels.backends.cpu.CompileError: the source does not compile (or the compiler timed
            out); its message is one line naming the kernel's kind and workload and, where the
            compiler printed one, its first error line; ``.log`` has the whole output.
        kernels.space.SpaceError: ``spec.params`` are not ``#define`` values.
        KeyError: unknown workload.
    """
    from kernels.backends import get_backend  # noqa: PLC0415
    from kernels.backends.cpu import CompileError  # noqa: PLC0415
    from kernels.space import format_defines  # noqa: PLC0415
    from kernels.workloads import get_workload  # noqa: PLC0415

    wl = get_workload(spec.workload)
    if spec.library:
        path, how = spec.library, "loaded from its library"
    else:
        try:
            artifact = get_backend("cpu").compile(spec.source, format_defines(dict(spec.params)))
        except CompileError as exc:
            first = next((ln.strip() for ln in exc.log.splitlines() if " error: " in f" {ln}"), "")
            raise CompileError(f"the {kind or spec.origin} kernel of {spec.workload} does not compile: {exc}"
                               + (f": {first}" if first else ""), exc.log) from exc
        path, how = str(artifact.path), f"compiled {'from cache' if artifact.cached else 'now'}"
    with _LIBS_LOCK:
        lib = _LIBS.get(path)
        if lib is None:
            _prepare_openmp_env()
            lib = _LIBS[path] = ctypes.CDLL(path)
    cfn = getattr(lib, wl.entry_point)
    types = {"in": ctypes.c_void_p, "out": ctypes.c_void_p, "int": ctypes.c_int, "float": ctypes.c_float}
    cfn.argtypes = [types[a.kind] for a in wl.args]
    cfn.restype = None
    args_spec = tuple((a.name, a.kind) for a in wl.args)

    def call(inputs, outputs, shape, attrs):
        argv = []
        for name, k in args_spec:
            if k == "in":
                arr = inputs[name]
                if arr.dtype != np.float32 or not arr.flags.c_contiguous:
                    raise ValueError(f"{spec.workload}: input '{name}' must be C-contiguous float32 "
                                     f"(got {arr.dtype}, contiguous={arr.flags.c_contiguous})")
                argv.append(arr.ctypes.data)
            elif k == "out":
                arr = outputs[name]
                if arr.dtype != np.float32 or not arr.flags.c_contiguous or not arr.flags.writeable:
                    raise ValueError(f"{spec.workload}: output '{name}' must be writable C-contiguous float32")
                argv.append(arr.ctypes.data)
            elif k == "int":
                argv.append(int(shape[name]))
            else:
                argv.append(float(attrs[name]))
        cfn(*argv)

    return BoundKernel(spec.workload, kind or spec.origin, call, spec, note or f"C kernel ({spec.origin}), {how}")


def production_spec(registry: ProductionRegistry, workload: str, target: str,
                    shape: Mapping[str, int]) -> tuple[KernelSpec | None, str]:
    """The production kernel of ``workload`` covered at the operator shape ``shape``
    (:mod:`engines._coverage`) and why; ``(None, why)`` when there is none, ``why`` saying
    what the production kernels were promoted for."""
    from engines._coverage import choose, covers  # noqa: PLC0415

    specs = getattr(registry, "specs", None)
    if specs is not None:
        found = specs(workload, target)
        if not found:
            return None, f"no production kernel for {workload} on {target}"
        spec, why = choose(found, shape)
    else:
        spec = registry.lookup(workload, target, shape)
        if spec is None:
            return None, f"no production kernel for {workload} on {target}"
        ok, why = covers(spec, shape)
        spec = spec if ok else None
    if spec is None:
        return None, f"no production kernel of {workload} on {target} covers this operator ({why})"
    return spec, why


def bind(workload: str, choice: int, *, target: str = "cpu-x86_64", shape: Mapping[str, int] | None = None,
         registry: ProductionRegistry | None = None) -> BoundKernel:
    """The kernel for ``workload`` under a plan's ``choice``.

    Args:
        choice: :data:`BASELINE`, :data:`TEMPLATE` (the registry's measured template point
            when it has one, else the template's defaults; the baseline when the workload
            has no CPU template) or :data:`PRODUCTION` (the registry's kernel for
            ``(workload, target)`` covered at ``shape``, :func:`production_spec`; the
            baseline when there is none, its note saying why).

    Raises:
        ValueError: unknown choice.
    """
    bound = _bind(workload, choice, target, shape or {}, registry or NoProduction())
    # A registry that measured the choice (engines.tuning.TunedRegistry) says why it was made.
    why = getattr(registry, "why", None)
    reason = why(workload, choice) if callable(why) else None
    if reason:
        bound.note = f"{reason} ({bound.note})" if bound.note else reason
    return bound


def _bind(workload: str, choice: int, target: str, shape: Mapping[str, int], registry) -> BoundKernel:
    if choice == BASELINE:
        return baseline_kernel(workload)
    if choice == TEMPLATE:
        # A registry may hold a measured point of the template (engines.tuning.TunedRegistry).
        point = getattr(registry, "template_point", None)
        spec = point(workload, target, shape) if callable(point) else None
        if spec is None:
            try:
                spec = template_spec(workload)
            except KeyError:
                return baseline_kernel(workload, "no CPU template: NumPy baseline")
        return c_kernel(spec, kind="template")
    if choice == PRODUCTION:
        spec, why = production_spec(registry or NoProduction(), workload, target, shape or {})
        if spec is None:
            return baseline_kernel(workload, f"{why}: NumPy baseline")
        return c_kernel(spec, kind=spec.origin, note=f"C kernel ({spec.origin}), {why}")
    raise ValueError(f"kernel choice must be 0 (baseline), 1 (template) or 2 (production), not {choice!r}")
