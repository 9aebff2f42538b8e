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
kernels once it calls it for ``engine:`` goals (the swarm calls it through
:func:`swarm.engine_registry.goals.evaluate_plan`, which passes the production kernels of the
database): validation end to end (``wrong_result`` when it fails), then the
scenarios timed; ``latency_ms`` is the sum of the scenarios' median latencies and
``throughput`` the items per second of the first scenario (sentences/s, tokens/s). Both run
in a sandbox child confined as the evaluator's (:mod:`engines._plan_isolated`): the plan's
production kernels and templates are loaded there, never in the calling (web or worker)
process.

Nothing here imports Django or the swarm: goals are created by
:func:`swarm.engine_registry.goals.create_engine_goal`.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

from engines._binding import NoProduction
from engines._plan import Plan
from engines._plan_isolated import run_plan_isolated
from engines._timing import SCENARIOS
from engines.registry import CONFIGS, engine_class
from kernels import stats
from kernels.evaluation.timing import omp_environment
from kernels.evidence import Evidence
from kernels.outcome import Outcome

PREFIX = "engine:"


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
    cls = engine_class(engine)
    mod = __import__(cls.__module__, fromlist=["PLAN_SPEC"])
    return mod.PLAN_SPEC.space()


def evaluate_plan(workload: str, source: str, params: dict, *, shape_set: str = "", backend: str = "cpu",
                  timeout_s: float = 600.0, bench=None, seed: int | None = None, target: str | None = None,
                  registry=None, reps: int | None = None, **_: Any) -> Evidence:
    """Validate and time one engine plan; the engine-goal counterpart of :func:`kernels.evaluate`.

    Args:
        workload: ``engine:<engine>[:<config>]``.
        source: ignored (a plan has no source).
        params: the plan's parameters.
        shape_set: scenarios joined by ``+`` (default: the engine's first scenario).
        registry: production kernels (:class:`engines._binding.ProductionRegistry`; default
            none: every workload runs its baseline). The swarm passes the database's
            (:func:`swarm.engine_registry.goals.evaluate_plan`).
        reps: timed repetitions per scenario (default 5 from ``bench.min_reps`` or 7).
        timeout_s: wall-clock limit of the plan's sandbox child (s), its set-up included.

    Returns:
        :class:`kernels.Evidence` with ``status`` ``ok``, ``wrong_result`` (validation
        failed), ``invalid`` (a parameter outside the plan space), ``compile_error`` (a
        kernel of the plan does not compile), ``runtime_error`` (the child crashed, exited,
        broke its disk quota, forged its report or reported an error) or ``timeout`` (it
        ran past ``timeout_s``), the reason in ``log``; ``metrics`` (``latency_ms``,
        ``latency_ms[<scenario>]``, ``throughput``, the validation's
        ``cosine_min``/``max_rel_error``/``max_abs_error``), ``samples_ms`` per scenario and
        in ``fingerprint`` the bound kernels (``kernels``: workload -> kind), what the plan
        binds from the registry (``bound``), the child's confinement (``sandbox``),
        ``child_wall_s``, ``compile_s``, ``omp`` and ``blas_threads``.

    Raises:
        KeyError: unknown engine, config or scenario (before any child is started).
    """
    start = time.monotonic()
    name, config = parse_goal_workload(workload)
    scenarios = tuple(s for s in (shape_set or "").split("+") if s) or SCENARIOS[name][:1]
    unknown = [s for s in scenarios if s not in SCENARIOS[name]]
    if unknown:
        raise KeyError(f"engine {name} has no scenario {unknown[0]!r} (known: {', '.join(SCENARIOS[name])})")
    if name != "minilm" and (config or "small") not in CONFIGS[name]:
        raise KeyError(f"engine {name!r} has no config {config!r} (known: {', '.join(CONFIGS[name])})")
    fp = {"engine": name, "config": config, "scenarios": list(scenarios), "target": target or "cpu-x86_64",
          "seed": seed if seed is not None else secrets.randbits(31)}
    try:
        plan = Plan.parse(engine_class(name).plan_spec, params)
    except ValueError as exc:
        return Evidence(status=Outcome.invalid, log=f"bad plan: {exc}", fingerprint=fp, duration_s=time.monotonic() - start)
    n = reps or (bench.min_reps if bench is not None else 7)
    run = run_plan_isolated(name, config, plan, scenarios, reps=max(3, n),
                            registry=registry if registry is not None else NoProduction(), target=fp["target"],
                            timeout_s=timeout_s)
    fp.update(bound=run.kernels, sandbox=run.sandbox or {"error": "the child exited before reporting its sandbox"},
              child_wall_s=run.wall_s, compile_s=run.compile_s, omp=omp_environment("timing"))
    if run.failure is not None:
        tail = f"\n== child stderr ==\n{run.stderr.strip()}" if run.stderr.strip() else ""
        return Evidence(status=run.failure, log=f"== verdict ==\n{run.failure}: {run.reason}{tail}", fingerprint=fp,
                        duration_s=time.monotonic() - start)
    val = run.result["validation"]
    fp["kernels"] = val.get("kernels", {})
    fp["blas_threads"] = run.result.get("blas_threads")
    figures = {k: _number(val[k]) for k in ("cosine_min", "max_rel_error", "max_abs_error") if k in val}
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
    samples = {s: [float(x) for x in run.result["samples_ms"][s]] for s in scenarios}
    metrics = dict(figures)
    total = 0.0
    for s, xs in samples.items():
        med = stats.summarize(xs)["median"]
        metrics[f"latency_ms[{s}]"] = med
        total += med
    metrics["latency_ms"] = total
    first = scenarios[0]
    per_call = {"batch-1": 1, "batch-32": 32, "throughput": 128, "decode": 1}.get(first) or int(run.result["prompt"])
    metrics["throughput"] = per_call / (metrics[f"latency_ms[{first}]"] / 1e3)
    log.append(f"== verdict ==\nok: validated; latency_ms {total:.4g} over {', '.join(scenarios)}")
    return Evidence(status=Outcome.ok, metrics=metrics, samples_ms=samples, cases=[case], log="\n".join(log),
                    fingerprint=fp, duration_s=time.monotonic() - start)


def _number(v) -> float:
    """A figure of the child's JSON result as a float (NaN came as None, infinities as strings)."""
    return float("nan") if v is None else float(v)
