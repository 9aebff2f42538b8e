"""Operator graphs over named tensors, their binding to kernels, and the executor.

An engine's forward pass is a :class:`Graph`: an ordered list of :class:`Operator` over
named tensors. An operator is either a *workload* of :mod:`kernels` (``rmsnorm``, ``gemm``,
``attention``, ...: exact math, a reference, a C contract, optimisable by the swarm) bound to
a kernel by the plan, or a *glue* step (reshape, split, residual add, KV-cache append, mean
pooling: engine-local NumPy, no kernel to choose). :func:`bind_graph` turns a graph and a
plan into a :class:`Program`, which runs it and can time every operator.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engines._binding import PRODUCTION, BoundKernel, ProductionRegistry, bind
from kernels.workloads import WORKLOADS

# workload -> inputs -> the workload's shape axes (what its C entry point receives as ints):
# each workload's ``shape_of`` (kernels/workloads/<workload>/)
AXES: dict[str, Callable[[Mapping[str, np.ndarray]], dict[str, int]]] = {
    name: wl.shape_of for name, wl in WORKLOADS.items() if wl.shape_of is not None
}

SubCall = tuple[dict[str, np.ndarray], dict[str, np.ndarray]]


@dataclass
class Operator:
    """One step of a graph.

    Attributes:
        name: unique in the graph, e.g. ``"layer0.qkv_proj"``.
        workload: the :mod:`kernels` workload it computes, or None for a glue step.
        inputs: workload ops: ``{argument name: tensor name}``; glue ops: tensor names passed
            positionally to ``fn`` (as a dict whose values are used in order).
        outputs: ``{output name: tensor name}``; glue ops map ``fn``'s results in order.
        attrs: the workload's float attributes (``eps``, ``causal``, ``act``).
        label: breakdown group (operators of all layers with the same label are summed);
            default: ``name`` without its ``layerN.`` prefix.
        fn: glue only: ``fn(*values) -> array | tuple of arrays``.
        split: workload ops that run as several kernel calls (one per sequence of a packed
            batch): ``split(inputs, outputs, env) -> [(sub_inputs, sub_outputs), ...]`` over
            views of the full arrays.
        out_shapes: with ``split``: ``inputs -> {output name: full shape}``.
        shape_hint: a typical shape, for production-kernel lookup and the graph page.
    """

    name: str
    workload: str | None
    inputs: dict[str, str]
    outputs: dict[str, str]
    attrs: dict[str, float] = field(default_factory=dict)
    label: str = ""
    fn: Callable[..., Any] | None = None
    split: Callable[..., list[SubCall]] | None = None
    out_shapes: Callable[[Mapping[str, np.ndarray]], dict[str, tuple[int, ...]]] | None = None
    shape_hint: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.label:
            parts = self.name.split(".", 1)
            self.label = parts[1] if len(parts) == 2 and parts[0].startswith("layer") else self.name
        if self.workload is None and self.fn is None:
            raise ValueError(f"operator {self.name!r}: a glue step needs fn")


@dataclass
class Graph:
    """Operators in execution order plus constant tensors (weights).

    Attributes:
        name: e.g. ``"minilm.encode"``, ``"llama-layer.decode"``.
        ops: operators, in order.
        constants: tensor name -> array (weights, tables), shared by every run.
        outputs: tensor names a run returns.
    """

    name: str
    ops: list[Operator]
    constants: dict[str, Any]
    outputs: tuple[str, ...]

    def workloads(self) -> list[str]:
        """Distinct workloads of the graph, in first-use order."""
        seen: list[str] = []
        for op in self.ops:
            if op.workload and op.workload not in seen:
                seen.append(op.workload)
        return seen


class Profile:
    """Per-operator wall time (perf_counter) accumulated over runs, in seconds."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self.labels: dict[str, str] = {}
        self.workloads: dict[str, str] = {}
        self.runs = 0

    def add(self, op: Operator, dt: float) -> None:
        self.seconds[op.name] = self.seconds.get(op.name, 0.0) + dt
        self.calls[op.name] = self.calls.get(op.name, 0) + 1
        self.labels[op.name] = op.label
        self.workloads[op.name] = op.workload or "glue"

    def breakdown(self) -> list[dict[str, Any]]:
        """Time per label (summed over layers) per run, largest first:
        ``[{"label", "workload", "ms", "share"}]`` (``share`` of the total, 0..1)."""
        per: dict[str, float] = {}
        wl: dict[str, str] = {}
        for name, s in self.seconds.items():
            lab = self.labels[name]
            per[lab] = per.get(lab, 0.0) + s
            wl[lab] = self.workloads[name]
        total = sum(per.values()) or 1.0
        runs = max(self.runs, 1)
        rows = [{"label": k, "workload": wl[k], "ms": 1e3 * v / runs, "share": v / total} for k, v in per.items()]
        return sorted(rows, key=lambda r: -r["ms"])


def _c32(a: np.ndarray) -> np.ndarray:
    if isinstance(a, np.ndarray) and a.dtype == np.float32 and a.flags.c_contiguous:
        return a
    return np.ascontiguousarray(a, dtype=np.float32)


class Program:
    """A graph bound to kernels: ``run(feeds) -> {output: array}``.

    Args:
        graph: the graph.
        kernels: operator name -> bound kernel, for every workload operator.
        buffer_reuse: keep each operator output's buffer across runs (no allocation, no page
            faults after the first run); outputs are then copied out of the buffers.
    """

    def __init__(self, graph: Graph, kernels: dict[str, BoundKernel], *, buffer_reuse: bool = True,
                 blas_threads: int = 0) -> None:
        self.graph, self.kernels, self.buffer_reuse, self.blas_threads = graph, kernels, buffer_reuse, blas_threads
        self._buffers: dict[str, np.ndarray] = {}

    def _alloc(self, tensor: str, shape: tuple[int, ...]) -> np.ndarray:
        if self.buffer_reuse:
            buf = self._buffers.get(tensor)
            if buf is not None and buf.shape == tuple(shape):
                return buf
            buf = self._buffers[tensor] = np.empty(shape, dtype=np.float32)
            return buf
        return np.empty(shape, dtype=np.float32)

    def run(self, feeds: Mapping[str, Any], *, profile: Profile | None = None) -> dict[str, np.ndarray]:
        """Execute every operator in order.

        Args:
            feeds: the graph's runtime inputs (activations, KV caches, positions, ...).
            profile: if given, every operator's wall time is added to it.

        Returns:
            The graph's outputs (owned by the caller: copies when buffers are reused).
        """
        if self.blas_threads:
            with _blas_controller().limit(limits=self.blas_threads, user_api="blas"):
                return self._run(feeds, profile)
        return self._run(feeds, profile)

    def _run(self, feeds: Mapping[str, Any], profile: Profile | None) -> dict[str, np.ndarray]:
        env: dict[str, Any] = {**self.graph.constants, **feeds}
        clock = time.perf_counter
        for op in self.graph.ops:
            t0 = clock() if profile is not None else 0.0
            if op.workload is None:
                res = op.fn(*(env[t] for t in op.inputs.values()))
                if not isinstance(res, tuple):
                    res = (res,)
                for name, value in zip(op.outputs.values(), res):
                    env[name] = value
            else:
                ins = {arg: _c32(env[t]) for arg, t in op.inputs.items()}
                if op.out_shapes is not None:
                    shapes = op.out_shapes(ins)
                else:
                    shapes = self._workload_out_shapes(op.workload, AXES[op.workload](ins))
                outs = {arg: self._alloc(op.outputs[arg], shapes[arg]) for arg in op.outputs}
                kernel = self.kernels[op.name]
                calls = op.split(ins, outs, env) if op.split is not None else [(ins, outs)]
                for sub_in, sub_out in calls:
                    kernel(sub_in, sub_out, AXES[op.workload](sub_in), op.attrs)
                for arg, t in op.outputs.items():
                    env[t] = outs[arg]
            if profile is not None:
                profile.add(op, clock() - t0)
        if profile is not None:
            profile.runs += 1
        out = {}
        for t in self.graph.outputs:
            v = env[t]
            out[t] = v.copy() if self.buffer_reuse and isinstance(v, np.ndarray) and any(
                np.shares_memory(v, b) for b in self._buffers.values()) else v
        return out

    @staticmethod
    def _workload_out_shapes(workload: str, shape: dict[str, int]) -> dict[str, tuple[int, ...]]:
        from kernels.workloads import get_workload  # noqa: PLC0415

        return get_workload(workload).output_shapes(shape)

    def describe(self) -> list[dict[str, Any]]:
        """The operator graph with the kernel bound to each operator (for pages and JSON)."""
        rows = []
        for op in self.graph.ops:
            row = {"name": op.name, "label": op.label, "workload": op.workload, "inputs": list(op.inputs.values()),
                   "outputs": list(op.outputs.values()), "attrs": dict(op.attrs), "shape": dict(op.shape_hint)}
            row["kernel"] = self.kernels[op.name].describe() if op.workload else {"kind": "glue", "note": "engine-local NumPy"}
            rows.append(row)
        return rows


_CONTROLLER = None


def _blas_controller():
    """A cached ``threadpoolctl.ThreadpoolController`` (limiting through it costs ~20 us)."""
    global _CONTROLLER
    if _CONTROLLER is None:
        from threadpoolctl import ThreadpoolController  # noqa: PLC0415

        _CONTROLLER = ThreadpoolController()
    return _CONTROLLER


def bind_graph(graph: Graph, choices: Mapping[str, int], *, target: str = "cpu-x86_64",
               registry: ProductionRegistry | None = None, buffer_reuse: bool = True,
               blas_threads: int = 0) -> Program:
    """Bind every workload operator of ``graph`` to a kernel.

    Args:
        choices: workload -> kernel choice (0 baseline, 1 template, 2 production); a
            workload not listed gets 2 (production, else baseline).
        registry: where production kernels come from.

    Returns:
        The :class:`Program`. Kernels are compiled (or taken from the compile cache) here.
    """
    cache: dict[tuple, BoundKernel] = {}
    kernels: dict[str, BoundKernel] = {}
    for op in graph.ops:
        if op.workload is None:
            continue
        choice = int(choices.get(op.workload, PRODUCTION))
        key = (op.workload, choice, tuple(sorted(op.shape_hint.items())) if choice == PRODUCTION else ())
        if key not in cache:
            cache[key] = bind(op.workload, choice, target=target, shape=op.shape_hint, registry=registry)
        kernels[op.name] = cache[key]
    return Program(graph, kernels, buffer_reuse=buffer_reuse, blas_threads=blas_threads)
