"""How the pages show stored figures: an evidence fingerprint as grouped rows, metric values
with their units and a few significant digits, and a workload's throughput in GB/s or GFLOP/s."""

from __future__ import annotations

import functools
import math
from typing import Any

import kernels

# Units by key suffix (checked longest first) and by exact key, for fingerprint and metric keys.
_SUFFIX_UNITS = (
    ("_bytes", "bytes"), ("_gbps", "GB/s"), ("_gflops", "GFLOP/s"), ("_ms", "ms"), ("_us", "µs"), ("_s", "s"),
    ("_pct", "%"), ("_kb", "KiB"), ("_mb", "MiB"),
)
_KEY_UNITS = {
    "gbps": "GB/s", "gflops": "GFLOP/s", "latency_ms": "ms", "nproc": "CPUs", "l2_bytes": "bytes",
    "roofline_pct": "%", "duration_s": "s", "margin": "×",
}


def unit_of(key: str) -> str:
    """The unit of a fingerprint or metric key (``latency_ms[rows=32]`` -> ``ms``), or ``""``."""
    base = key.split("[", 1)[0]
    if base in _KEY_UNITS:
        return _KEY_UNITS[base]
    for suffix, unit in _SUFFIX_UNITS:
        if base.endswith(suffix):
            return unit
    return ""


def unit_rules() -> dict[str, Any]:
    """The rules of :func:`unit_of` for the pages' scripts: ``{"suffixes": [[suffix, unit]]
    (checked in order), "keys": {key: unit}}``."""
    return {"suffixes": [list(p) for p in _SUFFIX_UNITS], "keys": dict(_KEY_UNITS)}


def number(v: Any, digits: int = 4) -> str:
    """``v`` with ``digits`` significant digits (``98.27483050000001`` -> ``98.27``), thousands
    kept whole (``12345.6`` -> ``12346``); ints and non-numbers as they are."""
    if isinstance(v, bool) or not isinstance(v, float):
        return str(v)
    if not math.isfinite(v):
        return str(v)
    if v != 0 and abs(v) >= 10 ** digits:
        return f"{v:.0f}"
    if v != 0 and abs(v) < 1e-3:
        return f"{v:.{digits - 1}e}"
    s = f"{v:.{digits}g}"
    return s


def with_unit(key: str, v: Any, digits: int = 4) -> str:
    """``v`` as :func:`number` followed by the unit of ``key`` (bytes in KiB/MiB/GiB)."""
    unit = unit_of(key)
    if unit == "bytes" and isinstance(v, int) and not isinstance(v, bool):
        return _bytes(v)
    text = number(v, digits)
    if not unit or not isinstance(v, (int, float)) or isinstance(v, bool):
        return text
    return f"{text}{unit}" if unit in ("%", "×") else f"{text} {unit}"


def _bytes(n: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{number(n / size, 4)} {unit}"
    return f"{n} bytes"


def _scalar(key: str, v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (list, tuple)):
        return " ".join(str(x) for x in v) if all(not isinstance(x, (dict, list)) for x in v) else str(v)
    return with_unit(key, v)


def fingerprint_groups(fingerprint: dict | None) -> list[dict]:
    """An evidence fingerprint as ``[{"group": title, "rows": [(key, value text)]}]``: the
    top-level scalars first (group ``"environment"``), then one group per nested dict with its
    keys flattened (``a.b``), values with units where the key names one."""
    fp = fingerprint or {}
    top: list[tuple[str, str]] = []
    groups: list[dict] = []
    for key, v in fp.items():
        if isinstance(v, dict):
            rows = list(_flatten(v, ""))
            groups.append({"group": key, "rows": rows or [("", "none")]})
        else:
            top.append((key, _scalar(key, v)))
    return ([{"group": "environment", "rows": top}] if top else []) + groups


def _flatten(d: dict, prefix: str):
    for k, v in d.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            yield from _flatten(v, name + ".")
        else:
            yield name, _scalar(str(k), v)


# A workload is compute-bound when one of its shape sets does at least this many FLOP per byte
# of compulsory DRAM traffic (around a CPU's and GPU's ridge point; RMSNorm does ~0.5, a
# prefill GEMM ~300).
COMPUTE_BOUND_FLOP_PER_BYTE = 8.0
GBPS = {"metric": "gbps", "unit": "GB/s", "bound": "memory"}
GFLOPS = {"metric": "gflops", "unit": "GFLOP/s", "bound": "compute"}


@functools.cache
def throughput(workload: str) -> dict:
    """How a workload's throughput is shown: ``{"metric": "gflops", "unit": "GFLOP/s", "bound":
    "compute"}`` when the workload counts FLOPs and one of its shape sets reaches
    :data:`COMPUTE_BOUND_FLOP_PER_BYTE` (gemm, gemm_bias, attention), else ``gbps`` / ``GB/s`` /
    ``memory`` (also for unknown workloads and replay targets' data sets)."""
    try:
        spec = kernels.get_workload(workload)
    except KeyError:
        return GBPS
    best = 0.0
    for name in spec.shape_sets:
        shapes = spec.shapes(name)
        flops, nbytes = sum(spec.flops(s) for s in shapes), sum(spec.bytes(s) for s in shapes)
        if nbytes:
            best = max(best, flops / nbytes)
    return GFLOPS if best >= COMPUTE_BOUND_FLOP_PER_BYTE else GBPS


def direction(name: str, objectives: list[dict], maximize: frozenset[str]) -> str:
    """``"maximize"`` or ``"minimize"`` for a metric (the goal's objective direction first, then
    ``maximize``, then lower-is-better for times and errors), ``""`` when neither is better."""
    for o in objectives:
        if o.get("metric") == name:
            return o.get("direction", "minimize")
    if name in maximize:
        return "maximize"
    if unit_of(name) in ("ms", "µs", "s") or "error" in name:
        return "minimize"
    return ""


def metric_cells(rows: list[dict], objectives: list[dict], maximize: frozenset[str]) -> list[dict]:
    """:func:`swarm.web.comparison.metric_rows` for the page: per metric ``{"name", "cells":
    [{"text", "delta", "quality"}]}``, values with units and 4 significant digits, deltas
    signed to 1 decimal (``"+3.2%"``), ``quality`` ``"better"`` / ``"worse"`` than the first
    candidate by the metric's :func:`direction` (``""`` for equal, unknown or undirected)."""
    out = []
    for row in rows:
        way = direction(row["name"], objectives, maximize)
        cells = []
        for i, (value, delta) in enumerate(row["cells"]):
            quality = ""
            if i and delta is not None and way and round(delta, 1) != 0:
                quality = "better" if (delta > 0) == (way == "maximize") else "worse"
            cells.append({"text": "—" if value is None else with_unit(row["name"], value),
                          "delta": f"{delta:+.1f}%" if i and delta is not None else "", "quality": quality})
        out.append({"name": row["name"], "cells": cells})
    return out
