"""One engine plan's evaluation inside a sandbox child (an engine goal's candidate).

:mod:`kernels.sandbox.child` imports this module by the name the request gives
(``"mode": "engine-check", "runner": "engines._plan_child"``) and calls :func:`prepare` in
its trusted phase, before the lockdown; the callable it returns runs after the lockdown (the
confinement of every evaluation child: sandbox user, namespaces, Landlock, seccomp, resource
limits, disk quota, empty environment). The parent is :mod:`engines._plan_isolated`.

Trusted phase (no kernel library loaded): import every project module the evaluation uses
(at this module's import: after the lockdown the project's ``engines`` package is
unreadable), build the engine with its weights and the plan's kernels
(:class:`engines._plan_registry.PlanRegistry`: the production kernels and templates the
parent compiled, each bound from its ``library``; the child cannot run the compiler), record
the shapes of its kernel calls with NumPy baselines and make the operator cases with their
float64 references (:mod:`engines._operator_check`).

Candidate phase: the BLAS behind the baselines gets every CPU of the child (what an
unconfined process starts with; the sandbox starts the child with one BLAS thread so that it
locks down single-threaded, and the threads made now are confined), then the plan is
validated end to end and operator by operator (:func:`engines._validate.validate`, which
binds the kernels and so loads their libraries) and, when it validated, its scenarios are
timed (:func:`engines._timing.time_plans`: two warm-up calls, then ``reps`` timed calls per
scenario, ms).

Request: ``{"mode": "engine-check", "runner", "engine", "config", "plan" (every parameter),
"target", "scenarios": [names], "reps", "kernels": :func:`engines._plan_registry.plan_kernels`
with a ``library`` in every spec, "reference"?: the encoder's reference embeddings}``.

Result: ``{"ok": true, "validation": the validation's dict, "samples_ms": {scenario: [ms]}
or null (not validated), "blas_threads", "prompt": the layers' scenario prompt (tokens)}``.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

# Every project module the candidate phase uses, imported now (after the lockdown the project
# is unreadable; third-party packages stay readable, so SciPy's GELU is imported on first use).
import engines._baselines  # noqa: F401
import engines._bench  # noqa: F401  (the encoder scenarios' corpus)
import engines._coverage  # noqa: F401
import engines._reference  # noqa: F401
import engines.kda_layer  # noqa: F401
import engines.llama  # noqa: F401
import engines.minilm  # noqa: F401  (its tokenizer and sentences)
import kernels.backends  # noqa: F401
import kernels.space  # noqa: F401
import kernels.workloads  # noqa: F401
from engines._graph import _blas_controller
from engines._guard_child import jsonable
from engines._operator_check import operator_cases, record_calls
from engines._plan_registry import PlanRegistry
from engines._timing import SCENARIOS, default_prompt, time_plans
from engines._validate import validate, validation_run
from engines.registry import make_engine


def prepare(req: dict):
    """Trusted phase (see the module); returns the candidate phase.

    Raises:
        KeyError: unknown engine, config or scenario; ValueError: a plan outside the
        engine's space.
    """
    environment = dict(os.environ)  # the sandbox's: what the kernels must see, nothing more
    import threadpoolctl  # noqa: F401, PLC0415  (the BLAS controller's; imported here for the line below)

    # threadpoolctl sets KMP_DUPLICATE_LIB_OK on import: the kernels get the evaluator's environment.
    for name in set(os.environ) - set(environment):
        del os.environ[name]
    name = req["engine"]
    scenarios = tuple(req["scenarios"])
    for s in scenarios:
        if s not in SCENARIOS[name]:
            raise KeyError(f"engine {name} has no scenario {s!r} (known: {', '.join(SCENARIOS[name])})")
    engine = make_engine(name, config=req.get("config") or None, registry=PlanRegistry(req.get("kernels") or {}),
                         target=req["target"])
    plan = engine.plan(req.get("plan") or {})
    if name == "minilm":
        engine.tokenize(["warm the tokenizer"])
    cases = operator_cases(engine, plan, record_calls(engine, plan, validation_run(engine, plan)))
    reference = np.asarray(req["reference"], np.float64) if req.get("reference") is not None else None
    controller = _blas_controller()  # inspects the loaded BLAS now: after the lockdown it could not
    reps = max(1, int(req.get("reps") or 7))
    return lambda: _evaluate(req, engine, plan, cases, reference, scenarios, reps, controller)


def _evaluate(req: dict, engine, plan, cases, reference, scenarios: tuple[str, ...], reps: int,
              controller) -> dict[str, Any]:
    threads = len(os.sched_getaffinity(0))
    controller.limit(limits=threads, user_api="blas")  # kept: a plan's BLAS_THREADS=1 narrows it per call
    val = validate(req["engine"], engine=engine, plan=plan.to_dict(), cases=cases, reference=reference)
    samples = None
    if val["status"] == "ok":
        samples = time_plans(engine, {"plan": plan}, scenarios, reps=reps)["plan"]
    prompt = default_prompt(engine) if hasattr(engine, "cfg") else None
    return {"ok": True, "validation": jsonable(val), "samples_ms": samples, "blas_threads": threads, "prompt": prompt}
