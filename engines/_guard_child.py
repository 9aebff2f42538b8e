"""The promotion guard's engine check inside a sandbox child (request mode ``"engine-check"``).

:mod:`kernels.sandbox.child` imports this module by the name the request gives
(``"runner": "engines._guard_child"``) and calls :func:`prepare` in its trusted phase,
before the lockdown; the callable it returns runs after the lockdown (the confinement of every
evaluation child: sandbox user, namespaces, Landlock, seccomp, limits, empty environment).

Trusted phase (no kernel library loaded): import every module the check uses (after the
lockdown the project's ``engines`` package is unreadable), build the engine with its weights,
record the shapes of its kernel calls with NumPy baselines
(:func:`engines._operator_check.record_calls`), generate the operator inputs and their
float64 references, and the timed operators' inputs.

Candidate phase: bind the engine's kernels, which loads the libraries the parent compiled
(``library`` of every production entry and of the candidate; the child cannot run the
compiler), then

* ``"phase": "validate"``: :func:`engines._validate.validate` (end to end and per operator);
  the result holds ``validation`` and ``shapes`` (the candidate workload's call shapes);
* ``"phase": "turns"`` (a turn-taking child, :meth:`kernels.sandbox.spawn.PendingChild.turn`):
  each command byte ``k`` runs item ``k`` once and is timed alone (``perf_counter_ns``):
  an end-to-end scenario (:class:`engines._timing.FreshScenario`) or one kernel call of an
  operator of the candidate's workload at one of its engine shapes. Every call sees input
  contents no earlier call saw (:mod:`engines._fresh`: :data:`FRESH_SETS` input sets
  rotated, two values of a row of every input swapped before the call, undone after, both
  untimed), so a kernel that caches its outputs by its inputs gains nothing. The result
  holds every call's time per item (``samples_ns``).

Request: ``{"mode": "engine-check", "runner", "phase", "side": "incumbent" | "challenger",
"engine", "config", "plan", "target", "production": [entries with "library"],
"candidate": {"workload", "source", "params", "candidate", "hash", "shape_set", "library"},
"items"?: [{"kind": "scenario", "scenario"} | {"kind": "operator", "shape"}],
"reference"?: the encoder's reference embeddings}``.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

FRESH_SETS = 3  # input sets each timed item rotates between (engines._fresh)


def load_modules() -> None:
    """Everything the candidate phase imports, loaded now (the lockdown hides the project)."""
    import scipy.special  # noqa: F401, PLC0415  (GELU baseline)
    import scipy.stats  # noqa: F401, PLC0415
    import threadpoolctl  # noqa: F401, PLC0415

    import engines._baselines  # noqa: F401, PLC0415
    import engines._coverage  # noqa: F401, PLC0415
    import engines._fresh  # noqa: F401, PLC0415
    import engines._operator_check  # noqa: F401, PLC0415
    import engines._reference  # noqa: F401, PLC0415
    import engines._timing  # noqa: F401, PLC0415
    import engines._validate  # noqa: F401, PLC0415
    import engines.kda_layer  # noqa: F401, PLC0415
    import engines.llama  # noqa: F401, PLC0415
    import kernels.backends  # noqa: F401, PLC0415
    import kernels.space  # noqa: F401, PLC0415
    import kernels.workloads  # noqa: F401, PLC0415


def _registry(req: dict):
    from engines._binding import KernelSpec, StaticRegistry  # noqa: PLC0415

    cand = req["candidate"]
    overrides = None
    if req["side"] == "challenger":
        overrides = {cand["workload"]: KernelSpec(
            workload=cand["workload"], source=cand["source"], params=cand.get("params") or {}, origin="candidate",
            candidate=cand.get("candidate"), content_hash=cand.get("hash", ""), shape_set=cand.get("shape_set", ""),
            library=cand["library"])}
    return StaticRegistry(list(req.get("production") or []), target=req["target"], overrides=overrides)


def prepare(req: dict):
    """Trusted phase (see the module); returns the candidate phase.

    Raises:
        KeyError: unknown engine, config, phase or item kind.
    """
    from engines._operator_check import operator_cases, record_calls  # noqa: PLC0415
    from engines._validate import validation_run  # noqa: PLC0415
    from engines.registry import make_engine  # noqa: PLC0415

    environment = dict(os.environ)  # the sandbox's: what the candidate must see, nothing more
    load_modules()
    # threadpoolctl sets KMP_DUPLICATE_LIB_OK on import: the candidate gets the evaluator's environment.
    for name in set(os.environ) - set(environment):
        del os.environ[name]
    phase = req["phase"]
    if phase not in ("validate", "turns"):
        raise KeyError(f"engine check phase must be 'validate' or 'turns', not {phase!r}")
    engine = make_engine(req["engine"], config=req.get("config") or None, registry=_registry(req), target=req["target"])
    plan = engine.plan(req.get("plan") or {})
    workload = req["candidate"]["workload"]
    if req["engine"] == "minilm":
        import engines.minilm  # noqa: F401, PLC0415

        engine.tokenize(["warm the tokenizer"])
    if phase == "validate":
        calls = record_calls(engine, plan, validation_run(engine, plan))
        cases = operator_cases(engine, plan, calls)
        reference = np.asarray(req["reference"], np.float64) if req.get("reference") is not None else None
        shapes = [s for (mode, name), ss in calls.items() for s in ss if _workload_of(engine, plan, mode, name) == workload]
        return lambda: _validate(req, engine, plan, cases, reference, shapes)
    from engines._fresh import Rotation  # noqa: PLC0415
    from kernels.workloads import get_workload  # noqa: PLC0415

    wl = get_workload(workload)
    items = []
    for j, item in enumerate(req["items"]):
        if item["kind"] == "scenario":
            items.append(("scenario", item["scenario"], None))
        elif item["kind"] == "operator":
            shape = {k: int(v) for k, v in item["shape"].items()}
            sets = [wl.generate(shape, 1000 + FRESH_SETS * j + s) for s in range(FRESH_SETS)]
            outs = {n: np.full(s, np.nan, np.float32) for n, s in wl.output_shapes(shape).items()}
            items.append(("operator", shape, (Rotation(sets, 1000 + j), outs, {**wl.attrs, **(item.get("attrs") or {})})))
        else:
            raise KeyError(f"engine check item kind must be 'scenario' or 'operator', not {item['kind']!r}")
    return lambda channel: _turns(channel, engine, plan, workload, items)


def _workload_of(engine, plan, mode: str, name: str) -> str | None:
    for op in engine.build_graph(mode, plan).ops:
        if op.name == name:
            return op.workload
    return None


def _validate(req: dict, engine, plan, cases, reference, shapes) -> dict[str, Any]:
    from engines._coverage import model_axes  # noqa: PLC0415
    from engines._validate import validate  # noqa: PLC0415

    val = validate(req["engine"], engine=engine, plan=plan.to_dict(), cases=cases, reference=reference)
    axes: list[dict] = []
    for s in shapes:
        if model_axes(s) not in axes:
            axes.append(model_axes(s))
    return {"ok": True, "validation": jsonable(val), "shapes": shapes, "model_shapes": axes}


def _operator_kernel(engine, plan, workload: str):
    """The kernel the engine binds for ``workload`` (the first operator of it, prefill first)."""
    for mode in engine.modes:
        prog = engine.program(mode, plan)
        for op in prog.graph.ops:
            if op.workload == workload:
                return prog.kernels[op.name]
    raise KeyError(f"engine {engine.name} has no operator of workload {workload!r}")


class _OperatorCall:
    """One kernel call of an operator on the next of its input sets, salted
    (:class:`engines._fresh.Rotation`): :meth:`before` and :meth:`after` are untimed."""

    def __init__(self, kernel, rotation, outs: dict, shape: dict, attrs: dict) -> None:
        self.kernel, self.rotation, self.outs, self.shape, self.attrs = kernel, rotation, outs, shape, attrs

    def before(self) -> None:
        self.rotation.before()

    def __call__(self) -> None:
        self.kernel(self.rotation.current, self.outs, self.shape, self.attrs)

    def after(self) -> None:
        self.rotation.after()


def _turns(channel: int, engine, plan, workload: str, items) -> dict[str, Any]:
    from engines._timing import FreshScenario  # noqa: PLC0415

    calls = []
    kernel = None
    for j, (kind, what, data) in enumerate(items):
        if kind == "scenario":
            calls.append(FreshScenario(engine, plan, what, sets=FRESH_SETS, seed=2000 + j))
        else:
            kernel = kernel or _operator_kernel(engine, plan, workload)
            rotation, outs, attrs = data
            calls.append(_OperatorCall(kernel, rotation, outs, what, attrs))
    clock = time.perf_counter_ns
    samples: list[list[int]] = [[] for _ in items]
    while True:
        command = os.read(channel, 1)
        if not command:
            break
        k = command[0]
        if k >= len(calls):
            raise ValueError(f"turn command {k} names no item (there are {len(calls)})")
        call = calls[k]
        call.before()  # fresh contents (untimed): repeated inputs would time a cache
        t0 = clock()
        call()
        samples[k].append(clock() - t0)
        call.after()
        os.write(channel, b".")
    kinds = {"kernel": kernel.describe()["kind"]} if kernel is not None else {}
    return {"ok": True, "mode": "engine-check", "samples_ns": samples, **kinds}


def jsonable(obj):
    """``obj`` for the JSON result: NumPy scalars as Python numbers, NaN as None, infinities
    as ``"inf"``/``"-inf"``, dict keys as strings, tuples as lists."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, (np.floating, np.integer, np.bool_)):
        return obj.item()
    if isinstance(obj, float) and not np.isfinite(obj):
        return None if np.isnan(obj) else str(obj)
    return obj
