"""Each operator of an engine judged against its workload's float64 reference at the engine's shapes.

An engine's end-to-end error cannot tell kernels apart: the Llama layer's ``max_rel_error``
is floored by the rounding of its last residual add, so two different ``rmsnorm`` kernels
give bit-identical figures. Here every workload operator's kernel is called alone on
inputs its workload generates (``Workload.generate``) at the shapes the engine calls it
with, and its outputs are compared with the workload's float64 reference
(``Workload.reference``) by the workload's own error measure and tolerance (``errors``,
``tolerance``: the evaluator's criterion).

Two steps, so that the promotion guard's sandbox child can do the first before its
lockdown and the second after:

1. :func:`record_calls` runs the engine once with every workload operator bound to its NumPy
   baseline (no C code is loaded) and records the shape of every kernel call;
   :func:`operator_cases` generates inputs and references for each distinct
   ``(workload, shape, attributes)``.
2. :func:`check_operators` calls the kernels the engine binds (its real program) on those
   inputs and judges them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engines._binding import baseline_kernel
from engines._graph import Program
from engines._plan import Plan


@dataclass
class Case:
    """One distinct kernel call of an engine: inputs, their float64 reference, the operators.

    Attributes:
        workload: workload name; shape: its axes (ints); attrs: float attributes in force.
        ops: ``[(mode, operator name)]`` calling the kernel at this shape.
        inputs: float32 C-contiguous arrays from ``Workload.generate(shape, seed)``.
        reference: float64 arrays from ``Workload.reference(inputs, attrs)``.
    """

    workload: str
    shape: dict[str, int]
    attrs: dict[str, float]
    ops: list[tuple[str, str]] = field(default_factory=list)
    inputs: dict[str, np.ndarray] = field(default_factory=dict)
    reference: dict[str, np.ndarray] = field(default_factory=dict)


class _Recorder:
    def __init__(self, mode: str, op, calls: dict) -> None:
        self.mode, self.op, self.calls = mode, op, calls
        self.inner = baseline_kernel(op.workload)

    def __call__(self, inputs, outputs, shape, attrs) -> None:
        key = (self.mode, self.op.name)
        shapes = self.calls.setdefault(key, [])
        s = {k: int(v) for k, v in shape.items()}
        if s not in shapes:
            shapes.append(s)
        self.inner(inputs, outputs, shape, attrs)


def record_calls(engine, plan: Plan, run: Callable[[], Any]) -> dict[tuple[str, str], list[dict[str, int]]]:
    """``{(mode, operator name): [distinct call shapes]}`` of ``run()`` (which runs ``engine``
    under ``plan`` and any plan derived from it), every workload operator bound to its NumPy
    baseline: no kernel is compiled or loaded, and the engine's own programs are untouched.

    Raises:
        KeyError: a workload without a baseline.
    """
    calls: dict[tuple[str, str], list[dict[str, int]]] = {}
    programs: dict[tuple, Program] = {}

    def program(mode: str, p: Plan) -> Program:
        key = (mode, p.key())
        if key not in programs:
            graph = engine.build_graph(mode, p)
            kernels = {op.name: _Recorder(mode, op, calls) for op in graph.ops if op.workload}
            programs[key] = Program(graph, kernels, buffer_reuse=p.buffer_reuse, blas_threads=p.blas_threads)
        return programs[key]

    engine.program = program  # an instance attribute shadows Engine.program while run() runs
    try:
        run()
    finally:
        del engine.program
    return calls


def operator_cases(engine, plan: Plan, calls: dict[tuple[str, str], list[dict[str, int]]], *,
                   seed: int = 11) -> list[Case]:
    """One :class:`Case` per distinct ``(workload, shape, attributes)`` of ``calls``
    (:func:`record_calls`), with generated inputs and their float64 reference."""
    from kernels.workloads import get_workload  # noqa: PLC0415

    ops = {(mode, op.name): op for mode in engine.modes for op in engine.build_graph(mode, plan).ops if op.workload}
    cases: dict[tuple, Case] = {}
    for (mode, name), shapes in calls.items():
        op = ops.get((mode, name))
        if op is None:
            continue
        wl = get_workload(op.workload)
        attrs = {**wl.attrs, **op.attrs}
        for shape in shapes:
            key = (op.workload, tuple(shape.items()), tuple(sorted(attrs.items())))
            case = cases.get(key)
            if case is None:
                inputs = wl.generate(shape, seed)
                ref = wl.reference(inputs, attrs)
                case = cases[key] = Case(op.workload, dict(shape), attrs, [], inputs,
                                         {k: np.asarray(v, np.float64) for k, v in ref.items()})
            case.ops.append((mode, name))
    return list(cases.values())


def check_operators(engine, plan: Plan, cases: list[Case]) -> list[dict[str, Any]]:
    """Each case's kernel as the engine binds it (``engine.program(mode, plan)``), called on
    the case's inputs (outputs NaN-filled first) and judged against its reference.

    Returns:
        One row per case and bound kernel: ``{"workload", "shape", "ops", "kernel" (kind and
        candidate), "status" ("ok" / "wrong_result"), "max_abs_error", "max_rel_error",
        "tolerance"}``; ``max_rel_error`` is the workload's measure (``Workload.errors``), NaN
        for an output with NaN or inf.
    """
    from kernels.workloads import get_workload  # noqa: PLC0415

    rows = []
    for case in cases:
        wl = get_workload(case.workload)
        by_kernel: dict[int, tuple[Any, list]] = {}
        for mode, name in case.ops:
            k = engine.program(mode, plan).kernels[name]
            by_kernel.setdefault(id(k), (k, []))[1].append(f"{mode}.{name}")
        for kernel, names in by_kernel.values():
            outputs = {n: np.full(s, np.nan, np.float32) for n, s in wl.output_shapes(case.shape).items()}
            inputs = {n: a.copy() for n, a in case.inputs.items()}  # a kernel that writes its inputs spoils no other
            kernel(inputs, outputs, case.shape, case.attrs)
            worst_abs = worst_rel = 0.0
            finite = True
            for n, out in outputs.items():
                if not np.isfinite(out).all():
                    finite = False
                    continue
                a, r = wl.errors(out, case.reference[n])
                worst_abs, worst_rel = max(worst_abs, float(a)), max(worst_rel, float(r))
            ok = finite and worst_rel <= wl.tolerance
            d = kernel.describe()
            rows.append({"workload": case.workload, "shape": dict(case.shape), "ops": names,
                         "kernel": {"kind": d.get("kind"), "candidate": d.get("candidate")},
                         "status": "ok" if ok else "wrong_result",
                         "max_abs_error": worst_abs if finite else float("nan"),
                         "max_rel_error": worst_rel if finite else float("nan"), "tolerance": wl.tolerance})
    return rows


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """``{"status", "worst": the row with the largest relative error, "failed": [rows]}``."""
    failed = [r for r in rows if r["status"] != "ok"]
    worst = max(rows, key=lambda r: (np.nan_to_num(r["max_rel_error"], nan=np.inf)), default=None)
    return {"status": "ok" if not failed else "wrong_result", "worst": worst, "failed": failed}

