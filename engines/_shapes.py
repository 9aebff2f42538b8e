"""The shapes an engine's operators run at, as shape sets of the workloads.

:func:`operator_shapes` runs the engine's timing scenarios (:mod:`engines._timing`) once on
the NumPy baselines and records, per workload, every shape its kernel is called with (the
axes of :data:`engines._graph.AXES`) and how often. :func:`register_shape_sets` adds the
heaviest of them to each workload as shape set ``engine-<engine>-<config>``
(:func:`kernels.workloads.add_shape_set`), so a kernel of that workload is evaluated by
:func:`kernels.evaluate` at exactly the engine's shapes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engines._binding import BASELINE, BoundKernel
from engines._graph import AXES

#: Shapes kept per workload: the heaviest by :func:`weight` (a few dominate the time of an
#: engine's operator; each shape costs a timed measurement of every option).
MAX_SHAPES = 6
#: FLOPs per DRAM byte at which a CPU core turns from memory- to compute-bound (a round
#: machine balance of current x86 servers: ~50 GFLOP/s per core over ~6 GB/s per core).
MACHINE_BALANCE = 8.0


def weight(wl, shape: Mapping[str, int], calls: int) -> float:
    """Roofline estimate of the time ``calls`` calls at ``shape`` take, in FLOP units:
    ``calls * max(flops, MACHINE_BALANCE * bytes)``, so memory-bound shapes (a decode GEMM
    with M = 1) rank by their traffic, not their few FLOPs."""
    return calls * max(float(wl.flops(dict(shape))), MACHINE_BALANCE * float(wl.bytes(dict(shape))))


def shape_set_name(engine: str, config: str | None) -> str:
    """``engine-<engine>[-<config>]``, e.g. ``engine-llama-layer-small``."""
    return f"engine-{engine}" + (f"-{config}" if config else "")


class _Recorder(BoundKernel):
    """A bound kernel that counts the shapes it is called with, then calls the real one."""

    def __init__(self, inner: BoundKernel, seen: dict, attrs: dict) -> None:
        super().__init__(inner.workload, inner.kind, inner, inner.spec, inner.note)
        self._seen, self._attrs = seen, attrs

    def __call__(self, inputs, outputs, shape, attrs) -> None:
        key = tuple(sorted((k, int(v)) for k, v in shape.items()))
        per = self._seen.setdefault(self.workload, {})
        per[key] = per.get(key, 0) + 1
        self._attrs.setdefault(self.workload, {}).setdefault(key, dict(attrs))
        self._fn(inputs, outputs, shape, attrs)


def operator_shapes(engine, scenarios: tuple[str, ...] | None = None,
                    max_shapes: int = MAX_SHAPES) -> dict[str, dict[str, Any]]:
    """Shapes of every workload operator of ``engine`` over its timing scenarios.

    Args:
        engine: an :class:`engines._engine.Engine` (its registry is not used: baselines run).
        scenarios: default every scenario of the engine (:data:`engines._timing.SCENARIOS`).
        max_shapes: shapes kept per workload (the heaviest by :func:`weight`).

    Returns:
        ``{workload: {"shapes": [shape, ...], "calls": [n, ...], "attrs": {...},
        "operators": [operator names]}}`` in first-use order; ``attrs`` are those of the
        heaviest shape's calls.
    """
    from engines._timing import SCENARIOS, make_scenario  # noqa: PLC0415
    from kernels.workloads import get_workload  # noqa: PLC0415

    plan = engine.plan({f"KERNEL_{w.upper()}": BASELINE for w in engine.plan_spec.workloads})
    scenarios = tuple(scenarios or SCENARIOS[engine.name])
    saved = dict(engine._programs)
    engine._programs.clear()
    seen: dict[str, dict[tuple, int]] = {}
    attrs: dict[str, dict[tuple, dict]] = {}
    operators: dict[str, list[str]] = {}
    try:
        for s in scenarios:
            make_scenario(engine, plan, s)()  # binds every program the scenario uses
        for prog in engine._programs.values():
            for op in prog.graph.ops:
                if op.workload in AXES:
                    operators.setdefault(op.workload, [])
                    if op.name not in operators[op.workload]:
                        operators[op.workload].append(op.name)
            prog.kernels = {n: _Recorder(k, seen, attrs) for n, k in prog.kernels.items()}
        for s in scenarios:
            make_scenario(engine, plan, s)()
    finally:
        engine._programs.clear()
        engine._programs.update(saved)
    out: dict[str, dict[str, Any]] = {}
    for w in operators:
        if w not in seen:
            continue
        wl = get_workload(w)
        ranked = sorted(seen[w].items(), key=lambda kv: -weight(wl, dict(kv[0]), kv[1]))[:max_shapes]
        out[w] = {"shapes": [dict(k) for k, _ in ranked], "calls": [n for _, n in ranked],
                  "attrs": {k: v for k, v in attrs[w][ranked[0][0]].items() if k in wl.attrs},
                  "operators": operators[w]}
    return out


def register_shape_sets(engine_name: str, config: str | None, shapes: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """Add ``shapes`` (as returned by :func:`operator_shapes`) to the workloads as shape set
    :func:`shape_set_name` in this process; returns ``{workload: shape set}``.

    Raises:
        ValueError: a shape that does not fit its workload (see :func:`kernels.workloads.add_shape_set`).
    """
    from kernels.workloads import add_shape_set  # noqa: PLC0415

    name = shape_set_name(engine_name, config)
    for w, entry in shapes.items():
        add_shape_set(w, name, entry["shapes"], attrs=entry.get("attrs") or None)
    return {w: name for w in shapes}
