"""FlashInfer Trace definitions and workloads read as shape sets of our workloads.

Layout ``definitions/<op_type>/<name>.json`` and ``workloads/<op_type>/<name>.jsonl`` (see
:mod:`kernels.interchange.flashinfer_trace`, which also exports our candidates and evidence to FlashInfer).
The workload registry (:mod:`kernels.workloads.registry`) adds each mapped definition as a
shape set ``flashinfer-<definition>`` (:func:`with_imported_shape_sets`); nothing here reads the
registry itself: the workloads to check against are passed in.
"""

from __future__ import annotations

import dataclasses
import json
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernels import config
from kernels.restrictions import Restriction, RestrictionError

if TYPE_CHECKING:
    from kernels.workloads.base import Workload

__all__ = [
    "IMPORTED_PREFIX",
    "Definition",
    "FlashInferTraceError",
    "ShapeSetImport",
    "WorkloadEntry",
    "check_index_tensors",
    "definition_map",
    "entry_shape",
    "load_definitions",
    "load_workloads",
    "parse_constraints",
    "read_shape_sets",
    "with_imported_shape_sets",
]

def definition_map(registry: Mapping[str, Workload]) -> dict[str, tuple[str, Mapping[str, str]]]:
    """FlashInfer definition -> (our workload, FlashInfer axis -> our axis, in our axis
    order), from each workload's ``flashinfer`` mapping (defined in its folder), e.g.
    ``{"rmsnorm_h4096": ("rmsnorm", {"batch_size": "rows", "hidden_size": "hidden"})}``.

    Raises:
        FlashInferTraceError: two workloads map the same definition.
    """
    out: dict[str, tuple[str, Mapping[str, str]]] = {}
    for name, wl in registry.items():
        for definition, rename in wl.flashinfer.items():
            if definition in out and out[definition][0] != name:
                raise FlashInferTraceError(f"definition '{definition}' is mapped by both '{out[definition][0]}' "
                                           f"and '{name}'")
            out[definition] = (name, dict(rename))
    return out


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


def _rename(definition: str, registry: Mapping[str, Workload]) -> tuple[str, Mapping[str, str]]:
    mapping = definition_map(registry)
    try:
        return mapping[definition]
    except KeyError:
        raise FlashInferTraceError(
            f"definition '{definition}' has no mapping to our workloads (mapped: {', '.join(mapping)})"
        ) from None


MAX_AXIS = 2**31 - 1  # axes are C ints in the kernels' signatures


def entry_shape(definition: Definition, entry: WorkloadEntry | Mapping[str, Any],
                rename: Mapping[str, str]) -> dict[str, int]:
    """Our shape of one workload entry: the definition's const axes plus the entry's var
    axes, renamed to our axis names by ``rename`` (FlashInfer axis -> our axis, in our axis
    order: the mapping of :func:`definition_map`).

    Example: ``rmsnorm_h4096`` + ``{"batch_size": 7}`` -> ``{"rows": 7, "hidden": 4096}``.

    Raises:
        FlashInferTraceError: an axis missing from the entry, a variable axis that is not an
            integer in [1, 2**31 - 1], or a constant axis the entry sets to another value.
    """
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
        shape = entry_shape(d, e, rename)
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


def _workload_of(entry: WorkloadEntry | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(entry, WorkloadEntry):
        return entry.workload_record()
    wl = entry.get("workload", entry) if isinstance(entry, Mapping) else None
    if not isinstance(wl, Mapping) or "uuid" not in wl or "axes" not in wl:
        raise FlashInferTraceError("workload_entry must be a jsonl line or a workload object with 'uuid' and 'axes'")
    return {"uuid": wl["uuid"], "axes": dict(wl["axes"]), "inputs": dict(wl.get("inputs", {}))}



def read_shape_sets(root: str | os.PathLike[str] | None,
                    registry: Mapping[str, Workload]) -> tuple[dict[str, ShapeSetImport], dict[str, str]]:
    """:func:`kernels.interchange.flashinfer_trace.import_report` against ``registry`` (workload name ->
    :class:`~kernels.workloads.base.Workload`): the shape sets of every mapped definition that
    has workload entries, and the refused definitions.

    Raises:
        FileNotFoundError: no folder.
        FlashInferTraceError: malformed files, or a workload of ``registry`` whose axes differ
            from its ``flashinfer`` mapping (:func:`definition_map`; names both).
    """
    folder = _root(root)
    definitions = load_definitions(folder)
    workloads = load_workloads(folder)
    out: dict[str, ShapeSetImport] = {}
    refused: dict[str, str] = {}
    for name, (ours, rename) in definition_map(registry).items():
        d = definitions.get(name)
        entries = workloads.get(name, [])
        if d is None or not entries:
            continue
        wl = registry.get(ours)
        if wl is not None:
            theirs = {k for shapes in wl.shape_sets.values() for s in shapes for k in s}
            if theirs and theirs != set(rename.values()):
                raise FlashInferTraceError(
                    f"workload '{ours}' has axes {sorted(theirs)} but its flashinfer mapping maps '{name}' to "
                    f"{sorted(rename.values())}: update kernels/workloads/{ours}/"
                )
        try:
            out[name] = _import_one(d, entries, ours, rename, wl, folder)
        except FlashInferTraceError as exc:
            refused[name] = str(exc)
    return out, refused


#: Name of an imported shape set: ``flashinfer-<definition>``, e.g. ``flashinfer-rmsnorm_h4096``.
IMPORTED_PREFIX = "flashinfer-"


def with_imported_shape_sets(registry: Mapping[str, Workload],
                             root: str | os.PathLike[str] | None = None) -> dict[str, Workload]:
    """``registry`` with each imported definition (:func:`kernels.interchange.flashinfer_trace.import_shape_sets`) added to its
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
        imported, refused = read_shape_sets(root, registry)
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
