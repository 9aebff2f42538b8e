"""The engine base class: plan space, program cache, kernel bindings."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from engines._binding import NoProduction, ProductionRegistry
from engines._graph import Graph, Program, bind_graph
from engines._plan import Plan, PlanSpec


class Engine:
    """A complete inference pipeline: graphs of operators bound to kernels by a plan.

    Subclasses set :attr:`name`, :attr:`plan_spec` and build their graphs in
    :meth:`build_graph`; one engine instance holds its weights once and keeps one bound
    :class:`~engines._graph.Program` per (mode, plan).

    Args:
        registry: where production kernels come from (default: none, so ``production``
            choices use the baselines).
        target: the target the kernels run on (``cpu-x86_64``).
    """

    name = "engine"
    plan_spec: PlanSpec

    def __init__(self, registry: ProductionRegistry | None = None, target: str = "cpu-x86_64") -> None:
        self.registry = registry or NoProduction()
        self.target = target
        self._programs: dict[tuple, Program] = {}

    def plan(self, params: Mapping[str, Any] | Plan | None = None) -> Plan:
        """A full plan from ``params`` (defaults filled in, checked).

        Raises:
            ValueError: unknown parameter or value (see :meth:`Plan.parse`).
        """
        return params if isinstance(params, Plan) else Plan.parse(self.plan_spec, params)

    def build_graph(self, mode: str, plan: Plan) -> Graph:  # pragma: no cover - abstract
        raise NotImplementedError

    def program(self, mode: str, plan: Plan) -> Program:
        """The bound program of ``mode`` (e.g. ``"prefill"``, ``"decode"``) under ``plan``."""
        key = (mode, plan.key())
        prog = self._programs.get(key)
        if prog is None:
            graph = self.build_graph(mode, plan)
            prog = self._programs[key] = bind_graph(graph, plan.choices(), target=self.target,
                                                    registry=self.registry, buffer_reuse=plan.buffer_reuse,
                                                    blas_threads=plan.blas_threads)
        return prog

    def describe(self, plan: Plan, modes: tuple[str, ...] | None = None) -> dict[str, Any]:
        """The operator graph of every mode with the kernel bound to each operator."""
        return {m: self.program(m, plan).describe() for m in (modes or self.modes)}

    modes: tuple[str, ...] = ()


def glue(name: str, fn: Callable[..., Any], inputs: list[str], outputs: list[str], label: str = ""):
    """A glue :class:`~engines._graph.Operator` (engine-local NumPy step)."""
    from engines._graph import Operator  # noqa: PLC0415

    return Operator(name=name, workload=None, inputs={f"i{j}": t for j, t in enumerate(inputs)},
                    outputs={f"o{j}": t for j, t in enumerate(outputs)}, fn=fn, label=label)


def seg_split(names: tuple[str, ...], outs: tuple[str, ...], seg_key: str = "segments"):
    """``split`` for an operator over a packed batch: one kernel call per sequence
    ``(start, length)`` of ``env[seg_key]``, on row slices (views) with a leading batch axis
    of 1."""

    def split(ins, outputs, env):
        calls = []
        for start, length in env[seg_key]:
            sl = slice(start, start + length)
            sub_in = {k: (v[sl][None] if k in names else v) for k, v in ins.items()}
            sub_out = {k: outputs[k][sl][None] for k in outs}
            calls.append((sub_in, sub_out))
        return calls

    return split


def same_shape(src: str, out: str = "o"):
    """``out_shapes`` giving output ``out`` the shape of input ``src``."""
    return lambda ins: {out: tuple(ins[src].shape)}


def uniform_weights(rng: np.random.Generator, n: int, k: int, scale: float = 1.0) -> np.ndarray:
    """float32 [n, k] weights, ``nn.Linear``'s default init U(-1/sqrt(k), 1/sqrt(k)) times
    ``scale`` (fast for 10^8 elements: :func:`kernels.workloads.gemm.uniform_fast`)."""
    from kernels.workloads.gemm import uniform_fast  # noqa: PLC0415

    return uniform_fast(rng, n * k, scale / np.sqrt(k)).reshape(n, k)
