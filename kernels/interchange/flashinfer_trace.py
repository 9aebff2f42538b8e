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
Reading and mapping the files is :mod:`kernels.interchange.flashinfer_shapes` (re-exported here), which
the workload registry uses to add each mapped definition as a shape set.

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
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kernels.backends import backend_for_target, capabilities
from kernels.interchange.flashinfer_shapes import (
    IMPORTED_PREFIX,
    Definition,
    FlashInferTraceError,
    ShapeSetImport,
    WorkloadEntry,
    _rename,
    _workload_of,
    check_index_tensors,
    definition_map,
    load_definitions,
    load_workloads,
    parse_constraints,
    read_shape_sets,
    with_imported_shape_sets,
)
from kernels.interchange.flashinfer_shapes import entry_shape as _entry_shape
from kernels.outcome import Outcome
from kernels.space import format_defines
from kernels.workloads import WORKLOADS, Workload

if TYPE_CHECKING:
    from kernels.evidence import Evidence

__all__ = [
    "DEFINITION_MAP",
    "IMPORTED_PREFIX",
    "STATUS_MAP",
    "Definition",
    "FlashInferTraceError",
    "ShapeSetImport",
    "WorkloadEntry",
    "check_index_tensors",
    "definition_map",
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

#: FlashInfer definition -> (our workload, FlashInfer axis -> our axis, in our axis order) of
#: the registered workloads (:func:`kernels.interchange.flashinfer_shapes.definition_map`: each
#: workload's ``flashinfer`` mapping, defined in its folder).
DEFINITION_MAP: Mapping[str, tuple[str, Mapping[str, str]]] = definition_map(WORKLOADS)


def entry_shape(definition: Definition, entry: WorkloadEntry | Mapping[str, Any]) -> dict[str, int]:
    """Our shape of one workload entry: the definition's const axes plus the entry's var
    axes, renamed to our axis names (:data:`DEFINITION_MAP`), in our axis order.

    Example: ``rmsnorm_h4096`` + ``{"batch_size": 7}`` -> ``{"rows": 7, "hidden": 4096}``.

    Raises:
        FlashInferTraceError: unmapped definition, an axis missing from the entry, a variable
            axis that is not an integer in [1, 2**31 - 1], or a constant axis the entry sets
            to another value.
    """
    _, rename = _rename(definition.name, WORKLOADS)
    return _entry_shape(definition, entry, rename)


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
    # stopped before its timing ended: FlashInfer Trace has no status for that; a time limit is the nearest
    Outcome.pruned: "TIMEOUT",
    Outcome.cancelled: "TIMEOUT",
}

# Our target -> FlashInfer ``spec.target_hardware`` names.
_HARDWARE = {"cuda-sm90": ["NVIDIA_H100", "NVIDIA_H200"], "cuda-sm100": ["NVIDIA_B200"]}


def import_report(root: str | os.PathLike[str] | None = None,
                  registry: Mapping[str, Workload] | None = None) -> tuple[dict[str, ShapeSetImport], dict[str, str]]:
    """Shape sets of every mapped definition that has workload entries, and the refused ones,
    checked against ``registry`` (default :data:`kernels.WORKLOADS`).

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
    return read_shape_sets(root, WORKLOADS if registry is None else registry)


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


# -- export ------------------------------------------------------------------------------------

_CUDA_KERNEL = re.compile(r'extern\s+"C"\s+__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+([A-Za-z_]\w*)\s*\(')


def _definition_for(workload: str, definition: str | None) -> str:
    if definition is not None:
        ours, _ = _rename(definition, WORKLOADS)
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
    try:
        source_language = capabilities(backend_for_target(target)).language
    except ValueError:
        source_language = ""
    if source_language == "c":
        language, path, symbol, hardware = "cpp", "kernel.c", workload, ["cpu"]
    elif source_language == "cuda":
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
    _, rename = _rename(definition_name, WORKLOADS)
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
