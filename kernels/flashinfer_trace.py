"""FlashInfer Trace interchange: import definitions and workloads, export solutions and traces.

Schema: FlashInfer-Bench's "FlashInfer Trace" (Definition / Workload / Solution / Trace),
as modelled by ``flashinfer_bench.data`` 0.1.2 (pydantic models ``Definition``, ``Workload``,
``Solution``/``BuildSpec``/``SourceFile``, ``Trace``/``Evaluation``/``Correctness``/
``Performance``/``Environment``) and the files in ``shared/datasets/flashinfer-trace/``
(layout ``definitions/<op_type>/<name>.json``, ``workloads/<op_type>/<name>.jsonl``).

Import: the definitions that match our workloads become shape sets (lists of our shapes)::

    gemm_n4096_k4096, gemm_n6144_k4096 -> gemm               {M, N, K}   (N, K const)
    rmsnorm_h4096                      -> rmsnorm            {rows: batch_size, hidden: hidden_size}
    fused_add_rmsnorm_h4096            -> fused_add_rmsnorm  {rows: batch_size, hidden: hidden_size}

FlashInfer's dtypes (fp16 GEMM, bf16 RMSNorm) are kept in :attr:`ShapeSetImport.dtypes`;
our CPU workloads compute in float32, so the import carries the shapes, not the dtypes.
A definition's ``constraints`` that parse as restrictions over its axes (``M % 2 == 0``)
are enforced on the entries' shapes; the rest (prose, tensor contents) are kept and flagged
as not enforced. A definition with index tensors (``kv_indptr``) that no recorded blob
supplies is refused, naming the tensor.

Export mapping (our term -> FlashInfer field), documented on each function:

- candidate -> ``Solution``: ``spec.language`` ``"cpp"`` for C (``cpu-*``; FlashInfer has no
  ``"c"``) or ``"cuda"``, ``target_hardware`` from the target, ``entry_point``
  ``"<file>::<symbol>"``, ``destination_passing_style`` true (our kernels write
  preallocated outputs), ``sources`` = one file with the ``#define`` lines prepended.
- evidence -> ``Trace.evaluation``: status via :data:`STATUS_MAP`, ``correctness``
  (max relative/absolute error), ``performance.latency_ms`` (our median for that shape),
  ``environment`` (hardware, libs) from the evidence fingerprint.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import re
import dataclasses
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernels import config
from kernels.outcome import Outcome
from kernels.restrictions import Restriction, RestrictionError
from kernels.space import format_defines

if TYPE_CHECKING:  # the registry imports this module: nothing here may import the registry at load
    from kernels.evidence import Evidence
    from kernels.workloads.base import Workload

__all__ = [
    "DEFINITION_MAP",
    "IMPORTED_PREFIX",
    "STATUS_MAP",
    "Definition",
    "FlashInferTraceError",
    "ShapeSetImport",
    "WorkloadEntry",
    "check_index_tensors",
    "entry_shape",
    "export_solution",
    "export_trace",
    "import_report",
    "import_shape_sets",
    "parse_constraints",
    "with_imported_shape_sets",
    "load_definitions",
    "load_workloads",
]

# FlashInfer definition -> (our workload, FlashInfer axis -> our axis, in our axis order).
DEFINITION_MAP: Mapping[str, tuple[str, Mapping[str, str]]] = {
    "gemm_n4096_k4096": ("gemm", {"M": "M", "N": "N", "K": "K"}),
    "gemm_n6144_k4096": ("gemm", {"M": "M", "N": "N", "K": "K"}),
    "rmsnorm_h4096": ("rmsnorm", {"batch_size": "rows", "hidden_size": "hidden"}),
    "fused_add_rmsnorm_h4096": ("fused_add_rmsnorm", {"batch_size": "rows", "hidden_size": "hidden"}),
}

# Our outcome -> FlashInfer ``EvaluationStatus``. FlashInfer has no "broke a rule" status:
# ``invalid`` (wrote past an output, modified an input, bad parameters, faster than the
# physical limit) becomes RUNTIME_ERROR, with our outcome named in the log; nor one for
# inputs whose reference is unusable: ``invalid_input`` becomes RUNTIME_ERROR the same way.
STATUS_MAP: Mapping[Outcome, str] = {
    Outcome.ok: "PASSED",
    Outcome.wrong_result: "INCORRECT_NUMERICAL",
    Outcome.compile_error: "COMPILE_ERROR",
    Outcome.runtime_error: "RUNTIME_ERROR",
    Outcome.timeout: "TIMEOUT",
    Outcome.invalid: "RUNTIME_ERROR",
    Outcome.invalid_input: "RUNTIME_ERROR",
}

# Our target -> FlashInfer ``spec.target_hardware`` names.
_HARDWARE = {"cuda-sm90": ["NVIDIA_H100", "NVIDIA_H200"], "cuda-sm100": ["NVIDIA_B200"]}


class FlashInferTraceError(ValueError):
    """A FlashInfer Trace file or record is malformed, or cannot be mapped; says why."""


@dataclass(frozen=True)
class Definition:
    """A FlashInfer Definition (``definitions/<op_type>/<name>.json``).

    Attributes:
        name: e.g. ``"rmsnorm_h4096"``.
        op_type: e.g. ``"rmsnorm"``.
        axes: axis -> ``{"type": "const", "value": int}`` or ``{"type": "var"}``.
        inputs, outputs: tensor name -> ``{"shape": [axis, ...], "dtype": str}``.
        reference: PyTorch source of ``run(...)`` (the executable math spec; needs torch).
        tags, description: as recorded.
        constraints: the definition's ``constraints`` as written, e.g.
            ``("len_indptr == batch_size + 1", "num_kv_indices == kv_indptr[-1].item()")``;
            see :func:`parse_constraints` for which are enforced.
        raw: the whole JSON object.
    """

    name: str
    op_type: str
    axes: Mapping[str, Mapping[str, Any]]
    inputs: Mapping[str, Mapping[str, Any]]
    outputs: Mapping[str, Mapping[str, Any]]
    reference: str = ""
    tags: tuple[str, ...] = ()
    description: str = ""
    constraints: tuple[str, ...] = ()
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @property
    def const_axes(self) -> dict[str, int]:
        """Constant axes and their values, e.g. ``{"hidden_size": 4096}``."""
        return {k: int(v["value"]) for k, v in self.axes.items() if v.get("type") == "const"}

    @property
    def var_axes(self) -> tuple[str, ...]:
        """Variable axes, set per workload entry, e.g. ``("batch_size",)``."""
        return tuple(k for k, v in self.axes.items() if v.get("type") == "var")


@dataclass(frozen=True)
class WorkloadEntry:
    """One line of ``workloads/<op_type>/<definition>.jsonl`` (a workload-only Trace).

    Attributes:
        definition: the Definition's name.
        uuid: the workload's id.
        axes: var axis -> int, e.g. ``{"batch_size": 7}``.
        inputs: input name -> descriptor (``{"type": "random"}``, ``scalar``, ``safetensors``).
        raw: the whole JSON line.
    """

    definition: str
    uuid: str
    axes: Mapping[str, int]
    inputs: Mapping[str, Any]
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)

    def workload_record(self) -> dict[str, Any]:
        """The FlashInfer ``Workload`` object ``{"uuid", "axes", "inputs"}``."""
        return {"uuid": self.uuid, "axes": dict(self.axes), "inputs": dict(self.inputs)}


@dataclass(frozen=True)
class ShapeSetImport:
    """A FlashInfer definition's workloads as one of our shape sets.

    Attributes:
        definition: FlashInfer definition name (also the shape set's name).
        workload: our workload name, e.g. ``"gemm"``.
        shapes: distinct shapes in our axis names, sorted by the var axes, e.g.
            ``({"M": 1, "N": 4096, "K": 4096}, ...)``.
        uuids: our shape label (``"M=1,N=4096,K=4096"``) -> FlashInfer workload uuids.
        dtypes: FlashInfer tensor name -> dtype (``"float16"``, ``"bfloat16"``).
        registered: True if ``workload`` is registered in :data:`kernels.WORKLOADS` (its
            axis names were then checked against this mapping).
        constants: the definition's constant axes in our axis names, e.g. ``{"hidden": 4096}``.
        enforced: the definition's constraints that parse as restrictions over its axes
            (:class:`kernels.restrictions.Restriction`), e.g. ``("M % 2 == 0",)``; every
            shape meets them.
        not_enforced: the other constraints (prose, or ones over tensor contents such as
            ``kv_indptr[-1].item()``) -> why they cannot be checked; kept, not enforced.
        excluded: our label of a workload entry's shape left out -> the enforced constraint
            it breaks, e.g. ``{"M=7,N=4096,K=4096": "M % 2 == 0"}``.
    """

    definition: str
    workload: str
    shapes: tuple[dict[str, int], ...]
    uuids: Mapping[str, tuple[str, ...]]
    dtypes: Mapping[str, str]
    registered: bool
    constants: Mapping[str, int] = field(default_factory=dict)
    enforced: tuple[str, ...] = ()
    not_enforced: Mapping[str, str] = field(default_factory=dict)
    excluded: Mapping[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.definition


def _root(root: str | os.PathLike[str] | None) -> Path:
    if root is not None:
        return Path(root).expanduser()
    found = config.flashinfer_trace_dir()
    if found is None:
        raise FileNotFoundError("no FlashInfer Trace folder: set KERNELS_FLASHINFER_TRACE_DIR or pass root=")
    return found


def load_definitions(root: str | os.PathLike[str] | None = None) -> dict[str, Definition]:
    """All definitions under ``<root>/definitions/<op_type>/*.json``, by name.

    Args:
        root: FlashInfer Trace folder; default :func:`kernels.config.flashinfer_trace_dir`.

    Raises:
        FileNotFoundError: no folder.
        FlashInferTraceError: a file is not JSON, lacks ``name``/``axes``/``inputs``/
            ``outputs``, or two files define the same name.
    """
    out: dict[str, Definition] = {}
    for path in sorted((_root(root) / "definitions").glob("*/*.json")):
        try:
            d = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise FlashInferTraceError(f"{path}: not a JSON definition: {exc}") from None
        missing = [k for k in ("name", "axes", "inputs", "outputs") if not isinstance(d, dict) or k not in d]
        if missing:
            raise FlashInferTraceError(f"{path}: definition lacks {', '.join(missing)}")
        if d["name"] in out:
            raise FlashInferTraceError(f"{path}: definition '{d['name']}' is defined twice")
        constraints = d.get("constraints") or []
        if not isinstance(constraints, list) or not all(isinstance(c, str) for c in constraints):
            raise FlashInferTraceError(f"{path}: 'constraints' must be a list of strings, got {constraints!r}")
        out[d["name"]] = Definition(
            name=d["name"], op_type=d.get("op_type", path.parent.name), axes=d["axes"], inputs=d["inputs"],
            outputs=d["outputs"], reference=d.get("reference", ""), tags=tuple(d.get("tags", ())),
            description=d.get("description", ""), constraints=tuple(constraints), raw=d,
        )
    return out


def load_workloads(root: str | os.PathLike[str] | None = None) -> dict[str, list[WorkloadEntry]]:
    """All workload entries under ``<root>/workloads/<op_type>/*.jsonl``, by definition name.

    Raises:
        FileNotFoundError: no folder.
        FlashInferTraceError: a line is not JSON or lacks ``definition`` / ``workload.uuid`` /
            ``workload.axes`` (the message gives file and line).
    """
    out: dict[str, list[WorkloadEntry]] = {}
    for path in sorted((_root(root) / "workloads").glob("*/*.jsonl")):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                wl = rec["workload"]
                entry = WorkloadEntry(definition=rec["definition"], uuid=wl["uuid"],
                                      axes=dict(wl["axes"]),
                                      inputs=wl.get("inputs", {}), raw=rec)
            except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
                raise FlashInferTraceError(f"{path}:{n}: not a workload entry: {exc!r}") from None
            out.setdefault(entry.definition, []).append(entry)
    return out


def _rename(definition: str) -> tuple[str, Mapping[str, str]]:
    try:
        return DEFINITION_MAP[definition]
    except KeyError:
        raise FlashInferTraceError(
            f"definition '{definition}' has no mapping to our workloads (mapped: {', '.join(DEFINITION_MAP)})"
        ) from None


MAX_AXIS = 2**31 - 1  # axes are C ints in the kernels' signatures


def entry_shape(definition: Definition, entry: WorkloadEntry | Mapping[str, Any]) -> dict[str, int]:
    """Our shape of one workload entry: the definition's const axes plus the entry's var
    axes, renamed to our axis names, in our axis order.

    Example: ``rmsnorm_h4096`` + ``{"batch_size": 7}`` -> ``{"rows": 7, "hidden": 4096}``.

    Raises:
        FlashInferTraceError: unmapped definition, an axis missing from the entry, a variable
            axis that is not an integer in [1, 2**31 - 1], or a constant axis the entry sets
            to another value.
    """
    _, rename = _rename(definition.name)
    axes = entry.axes if isinstance(entry, WorkloadEntry) else _workload_of(entry)["axes"]
    values = dict(definition.const_axes)
    for k, v in axes.items():
        if k in values:
            if v != values[k]:
                raise FlashInferTraceError(f"workload entry of '{definition.name}' sets constant axis {k} to {v!r}, "
                                           f"the definition fixes it at {values[k]}")
            continue
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_AXIS:
            raise FlashInferTraceError(f"workload entry of '{definition.name}': axis {k} = {v!r} is not an integer "
                                       f"in [1, {MAX_AXIS}]")
        values[k] = v
    missing = [k for k in rename if k not in values]
    if missing:
        raise FlashInferTraceError(f"workload entry of '{definition.name}' lacks axes {', '.join(missing)}")
    return {ours: values[theirs] for theirs, ours in rename.items()}


def _label(shape: Mapping[str, int]) -> str:
    return ",".join(f"{k}={int(v)}" for k, v in shape.items())


def parse_constraints(definition: Definition) -> tuple[tuple[Restriction, ...], dict[str, str]]:
    """Split a definition's constraints into enforceable restrictions and the rest.

    A constraint is enforced when it parses as a :class:`kernels.restrictions.Restriction`
    over the definition's axis names (const and var), e.g. ``"M % 2 == 0"``,
    ``"len_indptr == batch_size + 1"``. Prose (``"M must be even"``), constraints over
    tensor contents (``"num_kv_indices == kv_indptr[-1].item()"``) and unknown names cannot
    be checked on a shape.

    Returns:
        (the restrictions, in the definition's order; constraint -> why it is not enforced).
    """
    names = frozenset(definition.axes)
    enforced: list[Restriction] = []
    not_enforced: dict[str, str] = {}
    for text in definition.constraints:
        try:
            enforced.append(Restriction(text, names))
        except RestrictionError as exc:
            not_enforced[text] = f"not enforced: {exc}"
    return tuple(enforced), not_enforced


_INT_DTYPES = ("int", "uint")


def _is_index_tensor(spec: Mapping[str, Any]) -> bool:
    """An integer tensor (offsets, indices, counts): random values are not valid ones."""
    return str(spec.get("dtype", "")).startswith(_INT_DTYPES) and bool(spec.get("shape"))


def check_index_tensors(definition: Definition, entries: list[WorkloadEntry], root: Path) -> None:
    """Refuse a definition whose index tensors cannot be generated validly.

    An index tensor is an integer input with a shape (``kv_indptr``, ``kv_indices``,
    ``cu_seqlens``): its values must be non-decreasing offsets or ids in range, which
    random integers are not, and no shape determines them. Each workload entry must
    therefore give it as a ``safetensors`` blob that is present under ``root``.

    Raises:
        FlashInferTraceError: names the definition, the tensor, its dtype and shape, and
            the first workload entry (uuid) that gives it otherwise or whose blob is absent.
    """
    for tensor, spec in definition.inputs.items():
        if not isinstance(spec, Mapping) or not _is_index_tensor(spec):
            continue
        for e in entries:
            desc = e.inputs.get(tensor) if isinstance(e.inputs, Mapping) else None
            kind = desc.get("type") if isinstance(desc, Mapping) else None
            if kind == "safetensors" and isinstance(desc.get("path"), str) and (root / desc["path"]).is_file():
                continue
            given = (f"gives it as '{kind}'" if kind not in (None, "safetensors")
                     else f"refers to a blob that is absent ({desc.get('path')!r})" if kind == "safetensors"
                     else "does not give it")
            raise FlashInferTraceError(
                f"definition '{definition.name}': index tensor '{tensor}' ({spec.get('dtype')} "
                f"{list(spec.get('shape') or ())}) cannot be generated validly: workload entry {e.uuid} {given}; "
                "random integers are not valid offsets or indices, so it needs a recorded safetensors blob"
            )


def _import_one(d: Definition, entries: list[WorkloadEntry], ours: str, rename: Mapping[str, str],
                wl: Workload | None, root: Path) -> ShapeSetImport:
    """One mapped definition as a shape set (see :func:`import_report`).

    Raises:
        FlashInferTraceError: index tensors that cannot be generated, a bad entry, or every
            entry breaking an enforced constraint.
    """
    check_index_tensors(d, entries, root)
    restrictions, not_enforced = parse_constraints(d)
    uuids: dict[str, list[str]] = {}
    shapes: dict[str, dict[str, int]] = {}
    excluded: dict[str, str] = {}
    for e in entries:
        shape = entry_shape(d, e)
        label = _label(shape)
        theirs = {**d.const_axes, **e.axes}
        broken = next((r.text for r in restrictions if not r(theirs)), None)
        if broken is not None:
            excluded.setdefault(label, broken)
            continue
        shapes.setdefault(label, shape)
        uuids.setdefault(label, []).append(e.uuid)
    if not shapes:
        raise FlashInferTraceError(
            f"definition '{d.name}': every workload entry breaks a constraint "
            f"({', '.join(f'{k}: {v}' for k, v in list(excluded.items())[:3])})"
        )
    var = [rename[a] for a in d.var_axes if a in rename]
    order = sorted(shapes.values(), key=lambda s: tuple(s[a] for a in var))
    dtypes = {t: spec.get("dtype", "") for t, spec in {**d.inputs, **d.outputs}.items()}
    constants = {rename[k]: v for k, v in d.const_axes.items() if k in rename}
    return ShapeSetImport(d.name, ours, tuple(order), {k: tuple(v) for k, v in uuids.items()},
                          dtypes, wl is not None, constants, tuple(r.text for r in restrictions),
                          not_enforced, excluded)


def import_report(root: str | os.PathLike[str] | None = None,
                  registry: Mapping[str, Workload] | None = None) -> tuple[dict[str, ShapeSetImport], dict[str, str]]:
    """Shape sets of every mapped definition that has workload entries, and the refused ones.

    Shapes are de-duplicated (several uuids may share axes) and sorted by the var axes.
    Entries whose axes break an enforced constraint (:func:`parse_constraints`) are left
    out (:attr:`ShapeSetImport.excluded`). A definition is refused when its index tensors
    cannot be generated validly (:func:`check_index_tensors`), an entry's axes are bad
    (:func:`entry_shape`) or no entry meets its constraints.

    Returns:
        (definition name -> :class:`ShapeSetImport`, definition name -> why it was refused).

    Raises:
        FileNotFoundError: no folder.
        FlashInferTraceError: malformed files, or a registered workload whose axes differ
            from :data:`DEFINITION_MAP` (names both).
    """
    if registry is None:
        from kernels.workloads import WORKLOADS as registry  # noqa: PLC0415  (see the imports above)
    folder = _root(root)
    definitions = load_definitions(folder)
    workloads = load_workloads(folder)
    out: dict[str, ShapeSetImport] = {}
    refused: dict[str, str] = {}
    for name, (ours, rename) in DEFINITION_MAP.items():
        d = definitions.get(name)
        entries = workloads.get(name, [])
        if d is None or not entries:
            continue
        wl = registry.get(ours)
        if wl is not None:
            theirs = {k for shapes in wl.shape_sets.values() for s in shapes for k in s}
            if theirs and theirs != set(rename.values()):
                raise FlashInferTraceError(
                    f"workload '{ours}' has axes {sorted(theirs)} but DEFINITION_MAP maps '{name}' to "
                    f"{sorted(rename.values())}: update kernels/flashinfer_trace.py"
                )
        try:
            out[name] = _import_one(d, entries, ours, rename, wl, folder)
        except FlashInferTraceError as exc:
            refused[name] = str(exc)
    return out, refused


def import_shape_sets(root: str | os.PathLike[str] | None = None,
                      registry: Mapping[str, Workload] | None = None) -> dict[str, ShapeSetImport]:
    """Shape sets of every mapped definition that has workload entries, by definition name
    (:func:`import_report`), refusing the folder when a definition is refused.

    Raises:
        FileNotFoundError: no folder.
        FlashInferTraceError: malformed files, a registered workload whose axes differ from
            :data:`DEFINITION_MAP`, or a refused definition (the message says why).
    """
    out, refused = import_report(root, registry)
    if refused:
        raise FlashInferTraceError("; ".join(refused.values()))
    return out


#: Name of an imported shape set: ``flashinfer-<definition>``, e.g. ``flashinfer-rmsnorm_h4096``.
IMPORTED_PREFIX = "flashinfer-"


def with_imported_shape_sets(registry: Mapping[str, Workload],
                             root: str | os.PathLike[str] | None = None) -> dict[str, Workload]:
    """``registry`` with each imported definition (:func:`import_shape_sets`) added to its
    workload as shape set ``flashinfer-<definition>``, so that evaluation, tuning, goals and
    the web forms can use the recorded serving shapes like any other set.

    The odd shapes validated with it and the attributes in force (e.g. ``eps``) are those of
    the workload's first own shape set whose shapes agree with the definition's constant axes
    (``gemm_n4096_k4096`` -> ``llama3-8b-o-decode``, ``rmsnorm_h4096`` -> ``llama3-8b``), else
    the odd shapes of ``test-small`` and the default attributes.

    Never raises: without a FlashInfer Trace folder the registry comes back unchanged, a
    malformed one is reported with :func:`warnings.warn` and left out, and so is each refused
    definition (the others are imported). Shapes left out by a constraint and constraints
    that are not enforced are reported the same way.
    """
    out = dict(registry)
    try:
        if root is None and config.flashinfer_trace_dir() is None:
            return out
        imported, refused = import_report(root, registry)
    except Exception as exc:  # noqa: BLE001  (any malformed file: the registry must still load)
        warnings.warn(f"FlashInfer Trace shape sets not imported: {type(exc).__name__}: {exc}", stacklevel=2)
        return out
    for name, why in refused.items():
        warnings.warn(f"FlashInfer Trace definition '{name}' not imported: {why}", stacklevel=2)
    for name, imp in imported.items():
        for text, why in imp.not_enforced.items():
            warnings.warn(f"FlashInfer Trace definition '{name}': constraint {text!r} {why}", stacklevel=2)
        if imp.excluded:
            left = ", ".join(f"{label} ({c})" for label, c in imp.excluded.items())
            warnings.warn(f"FlashInfer Trace definition '{name}': shapes breaking its constraints left out: {left}",
                          stacklevel=2)
        wl = out.get(imp.workload)
        if wl is None:
            continue
        own = next((s for s, shapes in wl.shape_sets.items()
                    if shapes and all(all(shape.get(k) == v for k, v in imp.constants.items()) for shape in shapes)),
                   None)
        label = f"{IMPORTED_PREFIX}{name}"
        odd = wl.validation_shapes.get(own if own is not None else "test-small", ())
        attrs = dict(wl.shape_set_attrs.get(own, {})) if own is not None else {}
        out[imp.workload] = dataclasses.replace(
            wl,
            shape_sets={**wl.shape_sets, label: imp.shapes},
            validation_shapes={**wl.validation_shapes, label: tuple(odd)},
            shape_set_attrs={**wl.shape_set_attrs, **({label: attrs} if attrs else {})},
        )
    return out


# -- export ------------------------------------------------------------------------------------

_CUDA_KERNEL = re.compile(r'extern\s+"C"\s+__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+([A-Za-z_]\w*)\s*\(')


def _definition_for(workload: str, definition: str | None) -> str:
    if definition is not None:
        ours, _ = _rename(definition)
        if ours != workload:
            raise FlashInferTraceError(f"definition '{definition}' maps to workload '{ours}', not '{workload}'")
        return definition
    names = [d for d, (ours, _) in DEFINITION_MAP.items() if ours == workload]
    if len(names) != 1:
        known = ", ".join(names) if names else f"none (mapped workloads: {', '.join(sorted({w for w, _ in DEFINITION_MAP.values()}))})"
        raise FlashInferTraceError(f"workload '{workload}' maps to definitions {known}: pass definition=")
    return names[0]


def export_solution(
    workload: str,
    source: str,
    params: Mapping[str, int | float],
    *,
    name: str,
    author: str,
    target: str,
    definition: str | None = None,
    description: str | None = None,
) -> dict[str, Any]:
    """A FlashInfer ``Solution`` record of one candidate.

    Fields: ``name``, ``definition``, ``author``, ``description``, ``spec`` (``language``:
    ``"cpp"`` for ``cpu-*`` targets (our C source; FlashInfer has no ``"c"``) or
    ``"cuda"`` for ``cuda-*``; ``target_hardware``: ``cuda-sm90`` -> ``NVIDIA_H100``,
    ``NVIDIA_H200``, ``cuda-sm100`` -> ``NVIDIA_B200``, ``cpu-*`` -> ``cpu``;
    ``entry_point``: ``"kernel.c::<workload>"`` or ``"kernel.cu::<first extern "C"
    __global__ kernel>"``; ``dependencies``: ``[]``; ``destination_passing_style``: true),
    ``sources``: one file, ``#define`` lines of ``params`` prepended (self-contained).

    Our ABI is not FlashInfer's binding: the C entry point takes float32 raw pointers and
    int axes (docs/design.md candidate contract), the definitions use fp16/bf16 tensors, and
    CUDA candidates are ``__global__`` kernels plus a launch plan, not a host launcher. The
    record carries the exact source for exchange and provenance; running it under
    FlashInfer-Bench needs a tvm-ffi/torch wrapper. The description says so.

    Args:
        workload: our workload name, e.g. ``"rmsnorm"``.
        source: candidate source (C or CUDA C).
        params: parameter values (become ``#define`` lines).
        name: solution name (unique, e.g. ``"int21-rmsnorm-<hash12>"``).
        author: person or agent that produced it.
        target: ``cpu-<arch>`` or ``cuda-sm<NN>``.
        definition: FlashInfer definition; default the only one mapped to ``workload``.
        description: free text prepended to the generated description.

    Returns:
        A JSON-serialisable dict.

    Raises:
        FlashInferTraceError: replay or unknown target, unmapped or ambiguous workload
            (``gemm`` maps to two definitions: pass ``definition=``), empty name/author/source.
        SpaceError: a parameter name is not a C identifier or a value is not a finite number.
    """
    if not name or not author:
        raise FlashInferTraceError("a FlashInfer Solution needs a non-empty name and author")
    if not isinstance(source, str) or not source.strip():
        raise FlashInferTraceError("a FlashInfer Solution needs non-empty source")
    if target.startswith("cpu-"):
        language, path, symbol, hardware = "cpp", "kernel.c", workload, ["cpu"]
    elif target.startswith("cuda-"):
        m = _CUDA_KERNEL.search(source)
        language, path, symbol = "cuda", "kernel.cu", m.group(1) if m else workload
        hardware = _HARDWARE.get(target, [target])
    else:
        raise FlashInferTraceError(f"target {target!r} has no FlashInfer Solution (expected cpu-* or cuda-*; replay data has no source)")
    def_name = _definition_for(workload, definition)
    content = format_defines(params) + source
    note = (f"INT21 Kernel Factory candidate for workload '{workload}' on target '{target}', "
            f"parameters {json.dumps(dict(params), sort_keys=True)}. Entry point uses the INT21 "
            "C ABI (float32 raw pointers, int axes), not a FlashInfer binding: wrap before running "
            "under FlashInfer-Bench.")
    return {
        "name": name,
        "definition": def_name,
        "author": author,
        "description": f"{description.rstrip()} {note}" if description else note,
        "spec": {
            "language": language,
            "target_hardware": hardware,
            "entry_point": f"{path}::{symbol}",
            "dependencies": [],
            "destination_passing_style": True,
        },
        "sources": [{"path": path, "content": content}],
    }


def _workload_of(entry: WorkloadEntry | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(entry, WorkloadEntry):
        return entry.workload_record()
    wl = entry.get("workload", entry) if isinstance(entry, Mapping) else None
    if not isinstance(wl, Mapping) or "uuid" not in wl or "axes" not in wl:
        raise FlashInferTraceError("workload_entry must be a jsonl line or a workload object with 'uuid' and 'axes'")
    return {"uuid": wl["uuid"], "axes": dict(wl["axes"]), "inputs": dict(wl.get("inputs", {}))}


def _parse_label(label: str) -> dict[str, int] | None:
    try:
        return {k: int(v) for k, v in (part.split("=", 1) for part in label.split(","))}
    except ValueError:
        return None


def _finite(v: Any) -> float | str:
    """A float for JSON; NaN/inf as FlashInfer's pydantic writes them (``"NaN"``, ``"Infinity"``)."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return "NaN"
    if math.isnan(f):
        return "NaN"
    if math.isinf(f):
        return "Infinity" if f > 0 else "-Infinity"
    return f


def export_trace(
    definition_name: str,
    workload_entry: WorkloadEntry | Mapping[str, Any],
    solution_name: str,
    evidence: Evidence,
    *,
    hardware: str | None = None,
    timestamp: str | None = None,
) -> dict[str, Any]:
    """A FlashInfer ``Trace`` record: one solution on one workload entry, from our evidence.

    Mapping:

    - ``evaluation.status``: :data:`STATUS_MAP` (``invalid`` and ``invalid_input`` ->
      ``RUNTIME_ERROR``, log says ``int21 outcome: invalid`` / ``invalid_input``).
    - ``evaluation.correctness`` (PASSED and INCORRECT_NUMERICAL only, as FlashInfer
      requires): ``max_relative_error`` / ``max_absolute_error``, the worst over our
      validation cases of this entry's shape (else over all cases); NaN written as
      ``"NaN"`` like FlashInfer's own serialisation.
    - ``evaluation.performance`` (PASSED only): ``latency_ms`` = our median latency of this
      entry's shape (``latency_ms[<label>]``; FlashInfer reports a mean);
      ``reference_latency_ms`` and ``speedup_factor`` are 0.0 (not measured here).
    - ``evaluation.environment``: ``hardware`` = ``hardware`` or the fingerprint's
      ``device_name`` / ``gpu_name`` / ``cpu_model``; ``libs`` = fingerprint fields ending in
      ``_version`` (strings).
    - ``evaluation.log`` = our log; ``evaluation.timestamp`` = ``timestamp`` or now (UTC ISO 8601).

    Args:
        definition_name: FlashInfer definition (mapped in :data:`DEFINITION_MAP`).
        workload_entry: a :class:`WorkloadEntry`, a jsonl line dict, or its ``workload`` object.
        solution_name: the exported Solution's ``name``.
        evidence: our evaluation of that solution (on a shape set containing the entry's shape).

    Returns:
        A JSON-serialisable dict ``{"definition", "solution", "workload", "evaluation"}``.

    Raises:
        FlashInferTraceError: unmapped definition, malformed entry, or a passed evidence
            without timing for the entry's shape.
    """
    _, rename = _rename(definition_name)
    wl = _workload_of(workload_entry)
    status = STATUS_MAP[Outcome(evidence.status)]
    want = {rename[k]: int(v) for k, v in wl["axes"].items() if k in rename}
    labels = [lab for lab in evidence.samples_ms if (s := _parse_label(lab)) and all(s.get(k) == v for k, v in want.items())]
    label = labels[0] if labels else None
    evaluation: dict[str, Any] = {"status": status}
    if status in ("PASSED", "INCORRECT_NUMERICAL"):
        cases = [c for c in evidence.cases if label is None or c.get("label") == label] or list(evidence.cases)
        errs = [(c.get("max_abs_error"), c.get("max_rel_error")) for c in cases if c.get("max_rel_error") is not None]
        if errs:
            max_abs = max((float(a) for a, _ in errs if a is not None), default=math.nan)
            max_rel = max(float(r) for _, r in errs)
        else:
            max_abs = evidence.metrics.get("max_abs_error", math.nan)
            max_rel = evidence.metrics.get("max_rel_error", math.nan)
        evaluation["correctness"] = {"max_relative_error": _finite(max_rel), "max_absolute_error": _finite(max_abs)}
    if status == "PASSED":
        latency = evidence.metrics.get(f"latency_ms[{label}]") if label else None
        if latency is None:
            raise FlashInferTraceError(
                f"evidence has no latency for {want} (timed: {', '.join(evidence.samples_ms) or 'nothing'}); "
                f"evaluate on a shape set that contains it"
            )
        evaluation["performance"] = {"latency_ms": float(latency), "reference_latency_ms": 0.0, "speedup_factor": 0.0}
    fp = evidence.fingerprint or {}
    hw = hardware or fp.get("device_name") or fp.get("gpu_name") or fp.get("cpu_model") or fp.get("backend") or "unknown"
    libs = {k[: -len("_version")]: str(v) for k, v in fp.items() if k.endswith("_version") and v is not None}
    outcome = Outcome(evidence.status)
    named = outcome in (Outcome.invalid, Outcome.invalid_input)  # RUNTIME_ERROR in FlashInfer's words
    log = f"int21 outcome: {outcome}\n{evidence.log}" if named else evidence.log
    evaluation["environment"] = {"hardware": str(hw), "libs": libs}
    evaluation["timestamp"] = timestamp or _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    evaluation["log"] = log
    return {"definition": definition_name, "solution": solution_name, "workload": wl, "evaluation": evaluation}
