"""Engine goals: engine plans as swarm candidates.

An engine goal is a swarm ``Goal`` whose ``workload`` is ``engine:<engine>[:<config>]``
(e.g. ``engine:minilm``, ``engine:llama-layer:small``), whose ``shape_set`` lists the
timing scenarios joined by ``+`` (``batch-1+batch-32``; :data:`engines._timing.SCENARIOS`),
whose design space is the engine's plan space (:meth:`engines._plan.PlanSpec.space`: fusions
on/off, batch size, buffer reuse, kernel per workload) and whose ``source`` is empty (a
candidate is a plan: parameter values only). Agents that propose parameters (random, forest, gp,
evolutionary, optuna, local) search it unchanged; LLM agents, which write source, do not apply.

:func:`evaluate_plan` has the signature of :func:`kernels.evaluate` and returns a
:class:`kernels.Evidence`, so the orchestrator stores, ranks and promotes plans exactly like
kernels once it calls it for ``engine:`` goals (the hook the lead wires, see
``docs`` in the report): validation end to end (``wrong_result`` when it fails), then the
scenarios timed; ``latency_ms`` is the sum of the scenarios' median latencies and
``throughput`` the items per second of the first scenario (sentences/s, tokens/s).

Nothing here imports Django except :func:`create_engine_goal`.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

from kernels.evidence import Evidence
from kernels.outcome import Outcome

from engines._timing import SCENARIOS

PREFIX = "engine:"
_ENGINES: dict[tuple, Any] = {}


def goal_workload(engine: str, config: str | None = None) -> str:
    """``engine:<engine>[:<config>]``."""
    return PREFIX + engine + (f":{config}" if config else "")


def parse_goal_workload(workload: str) -> tuple[str, str | None]:
    """``(engine, config)`` of an ``engine:`` workload.

    Raises:
        ValueError: not an engine workload.
    """
    if not workload.startswith(PREFIX):
        raise ValueError(f"{workload!r} is not an engine workload (engine:<name>[:<config>])")
    name, _, config = workload[len(PREFIX):].partition(":")
    return name, config or None


def is_engine_workload(workload: str) -> bool:
    return workload.startswith(PREFIX)


def engine_space(engine: str):
    """The plan space of ``engine`` as a :class:`kernels.DesignSpace`."""
    from engines.registry import engine_class  # noqa: PLC0415

    cls = engine_class(engine)
    mod = __import__(cls.__module__, fromlist=["PLAN_SPEC"])
    return mod.PLAN_SPEC.space()


def _engine(name: str, config: str | None, registry):
    from engines.registry import make_engine  # noqa: PLC0415

    key = (name, config)
    eng = _ENGINES.get(key)
    if eng is None:
        eng = _ENGINES[key] = make_engine(name, config=config, registry=registry)
    # Weights are kept; bindings are redone, so a plan always runs today's production kernels.
    from engines._binding import NoProduction  # noqa: PLC0415

    eng.registry = registry if registry is not None else NoProduction()
    eng._programs.clear()
    return eng


def _default_registry():
    """Production kernels from the database when Django is configured, else none."""
    try:
        from django.conf import settings  # noqa: PLC0415

        if settings.configured and "engines.web.apps.EnginesWebConfig" in settings.INSTALLED_APPS:
            from engines.web.registry import DbRegistry  # noqa: PLC0415

            return DbRegistry()
    except ImportError:
        pass
    return None


def evaluate_plan(workload: str, source: str, params: dict, *, shape_set: str = "", backend: str = "cpu",
                  timeout_s: float = 600.0, bench=None, seed: int | None = None, target: str | None = None,
                  registry=None, reps: int | None = None, **_: Any) -> Evidence:
    """Validate and time one engine plan; the engine-goal counterpart of :func:`kernels.evaluate`.

    Args:
        workload: ``engine:<engine>[:<config>]``.
        source: ignored (a plan has no source).
        params: the plan's parameters.
        shape_set: scenarios joined by ``+`` (default: the engine's first scenario).
        registry: production kernels (default: the database's when Django is set up).
        reps: timed repetitions per scenario (default 5 from ``bench.min_reps`` or 7).

    Returns:
        :class:`kernels.Evidence` with ``status`` ``ok``, ``wrong_result`` (validation
        failed) or ``invalid`` (a parameter outside the plan space), ``metrics``
        (``latency_ms``, ``latency_ms[<scenario>]``, ``throughput``, the validation's
        ``cosine_min``/``max_rel_error``/``max_abs_error``), ``samples_ms`` per scenario and
        the bound kernels in ``fingerprint``.
    """
    from engines._timing import time_plans  # noqa: PLC0415
    from engines._validate import validate  # noqa: PLC0415

    start = time.monotonic()
    name, config = parse_goal_workload(workload)
    scenarios = tuple(s for s in (shape_set or "").split("+") if s) or SCENARIOS[name][:1]
    unknown = [s for s in scenarios if s not in SCENARIOS[name]]
    if unknown:
        raise KeyError(f"engine {name} has no scenario {unknown[0]!r} (known: {', '.join(SCENARIOS[name])})")
    eng = _engine(name, config, registry if registry is not None else _default_registry())
    fp = {"engine": name, "config": config, "scenarios": list(scenarios), "target": target or "cpu-x86_64",
          "seed": seed if seed is not None else secrets.randbits(31)}
    try:
        plan = eng.plan(params)
    except ValueError as exc:
        return Evidence(status=Outcome.invalid, log=f"bad plan: {exc}", fingerprint=fp, duration_s=time.monotonic() - start)
    val = validate(name, engine=eng, plan=plan.to_dict())
    fp["kernels"] = val.get("kernels", {})
    figures = {k: float(val[k]) for k in ("cosine_min", "max_rel_error", "max_abs_error") if k in val}
    if "cosine_min" in figures:
        figures["max_rel_error"] = max(0.0, 1.0 - figures["cosine_min"])  # the goal's usual constraint metric
    case = {"kind": "validation", "label": "end-to-end", "shape": {}, "seed": 0, "passed": val["status"] == "ok",
            "reason": val.get("reference", ""), "verdict": None if val["status"] == "ok" else "wrong_result",
            "max_abs_error": figures.get("max_abs_error"), "max_rel_error": figures.get("max_rel_error")}
    log = [f"== validation ==\n{ {k: v for k, v in val.items() if k not in ('tokens', 'plan')} }"]
    if val["status"] != "ok":
        log.append("== verdict ==\nwrong_result: end-to-end validation failed")
        return Evidence(status=Outcome.wrong_result, metrics=figures, cases=[case], log="\n".join(log), fingerprint=fp,
                        duration_s=time.monotonic() - start)
    n = reps or (bench.min_reps if bench is not None else 7)
    samples = time_plans(eng, {"plan": plan}, scenarios, reps=max(3, n))["plan"]
    from kernels import stats  # noqa: PLC0415

    metrics = dict(figures)
    total = 0.0
    for s, xs in samples.items():
        med = stats.summarize(xs)["median"]
        metrics[f"latency_ms[{s}]"] = med
        total += med
    metrics["latency_ms"] = total
    first = scenarios[0]
    from engines._timing import default_prompt  # noqa: PLC0415

    per_call = {"batch-1": 1, "batch-32": 32, "throughput": 128, "decode": 1}.get(first) or default_prompt(eng)
    metrics["throughput"] = per_call / (metrics[f"latency_ms[{first}]"] / 1e3)
    log.append(f"== verdict ==\nok: validated; latency_ms {total:.4g} over {', '.join(scenarios)}")
    return Evidence(status=Outcome.ok, metrics=metrics, samples_ms=samples, cases=[case], log="\n".join(log),
                    fingerprint=fp, duration_s=time.monotonic() - start)


def create_engine_goal(engine: str, *, config: str | None = None, target: str = "cpu-x86_64",
                       scenarios: tuple[str, ...] | None = None, objective: str = "latency_ms",
                       user=None, name: str | None = None):
    """Create (or return) the swarm ``Goal`` searching ``engine``'s plans.

    Args:
        scenarios: timing scenarios (default: the engine's first one), e.g.
            ``("batch-1", "batch-32")`` for the encoder's latency at batch sizes 1 and 32.
        objective: ``latency_ms`` (minimise) or ``throughput`` (maximise).

    Returns:
        The goal; its candidates are evaluated by :func:`evaluate_plan` (orchestrator hook).

    Raises:
        KeyError: unknown engine or scenario; ValueError: unknown objective.
    """
    from swarm.models import Goal  # noqa: PLC0415

    scenarios = tuple(scenarios or SCENARIOS[engine][:1])
    for s in scenarios:
        if s not in SCENARIOS[engine]:
            raise KeyError(f"engine {engine} has no scenario {s!r} (known: {', '.join(SCENARIOS[engine])})")
    if objective not in ("latency_ms", "throughput"):
        raise ValueError(f"objective must be latency_ms or throughput, not {objective!r}")
    direction = "minimize" if objective == "latency_ms" else "maximize"
    constraint = ({"metric": "cosine_min", "op": ">=", "value": 0.9999} if engine == "minilm"
                  else {"metric": "max_rel_error", "op": "<=", "value": 1e-4})
    workload = goal_workload(engine, config)
    shape_set = "+".join(scenarios)
    name = name or f"{workload} / {target} / {shape_set}: {direction} {objective}"
    goal, _ = Goal.objects.get_or_create(
        name=name, workload=workload, target=target, shape_set=shape_set,
        defaults=dict(objectives=[{"metric": objective, "direction": direction}], constraints=[constraint],
                      space=engine_space(engine).to_dict(), source="", created_by=user),
    )
    return goal
