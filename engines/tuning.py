"""Engine plan tuning: measure every operator's options at the engine's own shapes, then the
plan's engine-level choices, and keep what was measured fastest.

Two stages, each a list of measurements done one :func:`step` at a time (so a worker can run
one measurement per task and a page can show the progress):

1. **Operators.** Per workload of the engine, at the shapes its operators run at (shape set
   ``engine-<engine>-<config>``, :mod:`engines._shapes`):

   * the NumPy/BLAS baseline (:data:`engines._baselines.BASELINES`), timed in this process
     with the candidates' protocol (:func:`kernels.baselines.time_shape_set`: NumPy only, no
     candidate code);
   * template points: the repository's C template at its defaults and at
     ``template_points - 1`` points sampled from its design space
     (:func:`kernels.templates.default_space`), each compiled, validated and timed by the
     sandboxed evaluator (:func:`kernels.evaluate`);
   * the production kernel, when the registry has one, evaluated the same way.

   The option with the lowest ``latency_ms`` (sum over the shape set of per-shape median
   latencies, ms) among those that passed becomes the workload's kernel choice (plan
   parameter ``KERNEL_<WORKLOAD>``: 0 baseline, 1 template point, 2 production), with the
   figures that decided it as its reason.
2. **Plan.** With those kernels, the plan at its defaults and with one engine-level choice
   changed at a time (each fusion flag, ``BLAS_THREADS``, each other ``BATCH_SIZE``), up to
   ``plan_variants`` plans, each validated end to end and timed over every scenario of the
   engine in a sandbox child (:func:`engines.goals.evaluate_plan`, which binds the chosen
   kernels there through :class:`TunedRegistry`); the fastest plan that passed is kept.

The state is one JSON-serialisable dict (:func:`new_state`), so it can be stored between
steps. :class:`TunedRegistry` turns its kernel choices into bindings: an engine bound through
it runs the chosen template point, production kernel or baseline per operator, and
``describe`` gives each operator's reason.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from engines._binding import BASELINE, PRODUCTION, TEMPLATE, NoProduction
from engines._tuned import TunedRegistry

KINDS = {"baseline": BASELINE, "template": TEMPLATE, "production": PRODUCTION}
#: A light timing protocol for tuning (a demo must finish in minutes on two cores); the
#: ranking it gives is what promotions re-check with the full protocol.
TUNING_BENCH = {"warmup_ms": 5.0, "rep_ms": 30.0, "min_reps": 5, "max_reps": 60, "flush": "evict"}


def new_state(engine: str, config: str | None = None, *, target: str = "cpu-x86_64", template_points: int = 3,
              plan_variants: int = 6, seed: int = 0, bench: Mapping[str, Any] | None = None,
              plan_reps: int = 5) -> dict[str, Any]:
    """The starting state of a tuning of ``engine`` (``config``: a layer's size).

    Args:
        template_points: template points measured per workload (its defaults first).
        plan_variants: plans measured in stage 2 (the defaults with the chosen kernels first).
        bench: timing protocol of stage 1 (:class:`kernels.BenchSettings` fields; default
            :data:`TUNING_BENCH`).
        plan_reps: timed repetitions per scenario of each plan.

    Raises:
        KeyError: unknown engine or config; ValueError: a budget below 1.
    """
    from engines.registry import CONFIGS, engine_class  # noqa: PLC0415

    engine_class(engine)
    if config and config not in CONFIGS[engine]:
        raise KeyError(f"engine {engine!r} has no config {config!r} (known: {', '.join(CONFIGS[engine]) or 'none'})")
    if template_points < 1 or plan_variants < 1 or plan_reps < 1:
        raise ValueError("template_points, plan_variants and plan_reps must be at least 1")
    return {"engine": engine, "config": config or (CONFIGS[engine][0] if CONFIGS[engine] else None), "target": target,
            "template_points": int(template_points), "plan_variants": int(plan_variants), "seed": int(seed),
            "bench": dict(bench or TUNING_BENCH), "plan_reps": int(plan_reps), "phase": "shapes", "shapes": {},
            "shape_set": "", "queue": [], "options": {}, "choices": {}, "plan_queue": [], "plans": [], "plan": None,
            "done_steps": 0, "total_steps": None}


def baseline_latency_ms(workload: str, shape_set: str, bench=None) -> float:
    """Latency (ms) of the engine baseline of ``workload`` on ``shape_set``: sum of per-shape
    median latencies with the candidates' timing protocol (NumPy in this process).

    Raises:
        KeyError: unknown workload or shape set, or no engine baseline for the workload.
    """
    from engines._baselines import BASELINES  # noqa: PLC0415
    from kernels.baselines import time_shape_set  # noqa: PLC0415
    from kernels.workloads import get_workload  # noqa: PLC0415

    wl = get_workload(workload)
    fn = BASELINES[workload]
    attrs = wl.attrs_for(shape_set)

    def make_call(shape: dict, seed: int):
        inputs = wl.generate(shape, seed)
        outputs = {k: np.empty(s, dtype=np.float32) for k, s in wl.output_shapes(shape).items()}
        return (lambda: fn(inputs, outputs, shape, attrs)), [*inputs.values(), *outputs.values()]

    return time_shape_set(workload, shape_set, bench, make_call)


def _option_queue(state: dict, registry) -> list[dict]:
    from kernels.templates import default_space, load_template  # noqa: PLC0415

    rng = np.random.default_rng(state["seed"])
    queue: list[dict] = []
    for w, entry in state["shapes"].items():
        queue.append({"workload": w, "kind": "baseline", "params": {}})
        try:
            load_template(w, "cpu")
            space = default_space(w, "cpu")
        except KeyError:
            space = None
        if space is not None:
            # {} is the template as written (its own #define defaults), what an unplanned binding runs.
            points = [{}] + space.sample(rng, state["template_points"] - 1)
            queue += [{"workload": w, "kind": "template", "params": dict(p)} for p in points]
        if _production(registry, w, state["target"], entry["shapes"][0]) is not None:
            queue.append({"workload": w, "kind": "production", "params": {}})
    return queue


def _production(registry, workload: str, target: str, shape: Mapping[str, int]):
    """The registry's preferred production kernel of ``workload``, whatever shape set it was
    promoted for: measuring it at the engine's shape set is what validates and benchmarks it
    there (:mod:`engines._coverage`), so the tuning may choose it."""
    specs = getattr(registry, "specs", None)
    found = specs(workload, target) if callable(specs) else None
    return found[0] if found else registry.lookup(workload, target, shape)


def _measure(item: dict, state: dict, registry, evaluate: Callable, time_baseline: Callable) -> dict:
    from kernels.evaluation.timing import BenchSettings  # noqa: PLC0415

    w, kind, shape_set = item["workload"], item["kind"], state["shape_set"]
    bench = BenchSettings(**state["bench"])
    row: dict[str, Any] = {"kind": kind, "params": dict(item["params"])}
    if kind == "baseline":
        row.update(status="ok", latency_ms=float(time_baseline(w, shape_set, bench)), note="NumPy float32 + BLAS")
        return row
    if kind == "template":
        from kernels.templates import load_template  # noqa: PLC0415

        source, params = load_template(w, "cpu"), dict(item["params"])
    else:
        spec = _production(registry, w, state["target"], state["shapes"][w]["shapes"][0])
        if spec is None:
            return {**row, "status": "gone", "latency_ms": None, "note": "no production kernel any more"}
        source, params = spec.source, dict(spec.params)
        row.update(params=params, candidate=spec.candidate)
    ev = evaluate(w, source, params, shape_set=shape_set, bench=bench, seed=state["seed"], target=state["target"])
    status = str(getattr(ev.status, "value", ev.status))
    lat = ev.metrics.get("latency_ms") if status == "ok" else None
    row.update(status=status, latency_ms=float(lat) if lat is not None else None,
               note="sandboxed evaluation" if status == "ok" else (ev.log or "").strip().splitlines()[-1:][0] if ev.log else status)
    return row


def _fmt(params: Mapping[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items()) or "defaults"


def choose(workload: str, options: list[dict], shape_set: str,
           shapes: list[Mapping[str, int]] = ()) -> dict[str, Any]:
    """The fastest option that passed, as a choice ``{choice, kind, params, latency_ms,
    shape_set, why, candidate, shapes}`` (``shapes``: those of ``shape_set`` it was measured
    at); the baseline when nothing passed (it always runs)."""
    passed = [o for o in options if o.get("status") == "ok" and o.get("latency_ms") is not None]
    if not passed:
        return {"choice": BASELINE, "kind": "baseline", "params": {}, "latency_ms": None, "shape_set": shape_set,
                "why": f"baseline: no option of {workload} passed at {shape_set}"}
    best = min(passed, key=lambda o: o["latency_ms"])

    def label(o: dict) -> str:
        return {"baseline": "baseline", "production": f"production #{o.get('candidate')}",
                "template": f"template {_fmt(o['params'])}"}[o["kind"]]

    others = sorted((o for o in passed if o is not best), key=lambda o: o["latency_ms"])
    vs = "; ".join(f"{label(o)} {o['latency_ms']:.4g} ms" for o in others[:3]) or "no other option passed"
    failed = [o for o in options if o.get("status") != "ok"]
    tail = f"; {len(failed)} failed" if failed else ""
    no_prod = "" if any(o["kind"] == "production" for o in options) else "; no production kernel"
    what = {"baseline": "baseline", "template": f"template point {_fmt(best['params'])}",
            "production": f"production kernel #{best.get('candidate')}"}[best["kind"]]
    why = f"{what}: fastest of {len(options)} measured at {shape_set} ({best['latency_ms']:.4g} ms; {vs}{tail}{no_prod})"
    return {"choice": KINDS[best["kind"]], "kind": best["kind"], "params": dict(best["params"]),
            "latency_ms": best["latency_ms"], "shape_set": shape_set, "why": why, "candidate": best.get("candidate"),
            "shapes": [dict(x) for x in shapes]}


def _plan_queue(state: dict) -> list[dict]:
    from engines.registry import engine_class  # noqa: PLC0415

    spec = engine_class(state["engine"]).plan_spec
    from engines._plan import Plan, kernel_param  # noqa: PLC0415

    kernels = {kernel_param(w): int(c["choice"]) for w, c in state["choices"].items() if w in spec.workloads}
    base = Plan.parse(spec, kernels).to_dict()
    variants = [base]
    flips = [(f, 1 - base[f]) for f in spec.fusions] + [("BLAS_THREADS", 1 - base["BLAS_THREADS"])]
    flips += [("BATCH_SIZE", b) for b in spec.batch_sizes if b != base["BATCH_SIZE"]]
    for k, v in flips:
        variants.append({**base, k: v})
    return variants[: state["plan_variants"]]


def step(state: dict, *, registry=None, evaluate: Callable | None = None, time_baseline: Callable | None = None,
         evaluate_plan: Callable | None = None) -> dict:
    """Do the next measurement of ``state`` (updated in place and returned).

    Args:
        registry: production kernels (default none).
        evaluate: the sandboxed evaluator (default :func:`kernels.evaluate`).
        time_baseline: ``(workload, shape_set, bench) -> ms`` (default :func:`baseline_latency_ms`).
        evaluate_plan: ``(workload, source, params, shape_set=, registry=, reps=) -> Evidence``
            (default :func:`engines.goals.evaluate_plan`).

    Returns:
        ``state``; ``state["phase"]`` is ``"done"`` once ``state["plan"]`` holds the chosen
        plan and ``state["choices"]`` the kernel of every workload.
    """
    from engines._shapes import operator_shapes, register_shape_sets, shape_set_name  # noqa: PLC0415

    registry = registry if registry is not None else NoProduction()
    if evaluate is None:
        from kernels import evaluate  # noqa: PLC0415
    if evaluate_plan is None:
        from engines.goals import evaluate_plan  # noqa: PLC0415
    time_baseline = time_baseline or baseline_latency_ms
    phase = state["phase"]
    if phase == "shapes":
        from engines.registry import make_engine  # noqa: PLC0415

        eng = make_engine(state["engine"], config=state["config"], target=state["target"])
        state["shapes"] = operator_shapes(eng)
        state["shape_set"] = shape_set_name(state["engine"], state["config"])
        register_shape_sets(state["engine"], state["config"], state["shapes"])
        state["queue"] = _option_queue(state, registry)
        state["options"] = {w: [] for w in state["shapes"]}
        state["total_steps"] = 1 + len(state["queue"]) + state["plan_variants"]
        state["phase"] = "operators"
    elif phase == "operators":
        register_shape_sets(state["engine"], state["config"], state["shapes"])  # this process may be new
        if state["queue"]:
            item = state["queue"].pop(0)
            state["options"][item["workload"]].append(_measure(item, state, registry, evaluate, time_baseline))
        if not state["queue"]:
            state["choices"] = {w: choose(w, opts, state["shape_set"], state["shapes"][w]["shapes"])
                                for w, opts in state["options"].items()}
            state["plan_queue"] = _plan_queue(state)
            state["total_steps"] = state["done_steps"] + 1 + len(state["plan_queue"])
            state["phase"] = "plan"
    elif phase == "plan":
        from engines._timing import SCENARIOS  # noqa: PLC0415
        from engines.goals import goal_workload  # noqa: PLC0415

        if state["plan_queue"]:
            params = state["plan_queue"].pop(0)
            ev = evaluate_plan(goal_workload(state["engine"], state["config"]), "", params,
                               shape_set="+".join(SCENARIOS[state["engine"]]), target=state["target"],
                               registry=TunedRegistry(registry, state["choices"]), reps=state["plan_reps"])
            status = str(getattr(ev.status, "value", ev.status))
            state["plans"].append({"params": params, "status": status,
                                   "latency_ms": ev.metrics.get("latency_ms") if status == "ok" else None,
                                   "metrics": {k: v for k, v in ev.metrics.items() if k.startswith("latency_ms")}})
        if not state["plan_queue"]:
            ok = [p for p in state["plans"] if p["status"] == "ok" and p["latency_ms"] is not None]
            best = min(ok, key=lambda p: p["latency_ms"]) if ok else state["plans"][0]
            state["plan"] = dict(best["params"])
            state["phase"] = "done"
    elif phase != "done":
        raise ValueError(f"unknown tuning phase {phase!r}")
    state["done_steps"] += 1
    return state


def tune(engine: str, config: str | None = None, *, registry=None, on_step: Callable[[dict], None] | None = None,
         **kw) -> dict:
    """Run every step of a tuning (:func:`new_state` arguments in ``kw``; ``evaluate``,
    ``time_baseline``, ``evaluate_plan`` as in :func:`step`); returns the final state."""
    hooks = {k: kw.pop(k) for k in ("evaluate", "time_baseline", "evaluate_plan") if k in kw}
    state = new_state(engine, config, **kw)
    while state["phase"] != "done":
        step(state, registry=registry, **hooks)
        if on_step:
            on_step(state)
    return state
