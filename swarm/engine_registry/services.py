"""Registering production engines and recording their benchmarks into the history (called by
``manage.py engine register|bench --record``, the demo's set-up and plan tunings)."""

from __future__ import annotations

import statistics
from typing import Any

from engines._bench import bench_corpus
from engines._graph import Profile
from engines._plan import Plan
from engines._timing import SCENARIOS, default_prompt, make_scenario, time_plans
from engines._validate import validate
from engines.llama import residual_stream
from engines.registry import CONFIGS, engine_class, make_engine
from swarm.engine_registry.models import EngineBenchmark, ProductionEngine
from swarm.engine_registry.registry import registry_for


def check_config(engine: str, config: str) -> None:
    """Check that ``engine`` is known and has the size config ``config`` ("" is its default).

    Raises:
        KeyError: unknown engine, or a config it does not have (the message lists the known ones).
    """
    engine_class(engine)
    if config and config not in CONFIGS[engine]:
        known = ", ".join(CONFIGS[engine]) or "none: it has one size"
        raise KeyError(f"engine {engine} has no config {config!r} (known: {known})")


def full_plan(engine: str, plan: dict | None) -> dict:
    """``plan`` completed with the engine's defaults.

    Raises:
        KeyError: unknown engine; ValueError: a plan parameter outside the engine's space.
    """
    if plan is not None and not isinstance(plan, dict):
        raise ValueError(f"a plan is a JSON object of parameters (got {type(plan).__name__})")
    return Plan.parse(engine_class(engine).plan_spec, plan or {}).to_dict()


def register_engine(engine: str, *, config: str = "", target: str = "cpu-x86_64", plan: dict | None = None,
                    name: str | None = None, user=None):
    """Make ``engine`` a production engine on ``target`` (created, or updated and re-activated).

    Returns:
        ``(ProductionEngine, created)``.

    Raises:
        KeyError: unknown engine or config; ValueError: a plan outside the engine's space.
    """
    from django.utils import timezone  # noqa: PLC0415

    check_config(engine, config)
    full = full_plan(engine, plan)
    label = name or f"{engine}{'-' + config if config else ''}/{target}"
    defaults = dict(engine=engine, config=config or (CONFIGS[engine][0] if CONFIGS[engine] else ""), target=target,
                    plan=full, active=True, updated_at=timezone.now())
    pe, created = ProductionEngine.objects.get_or_create(name=label, defaults={**defaults, "created_by": user})
    if not created:
        for k, v in defaults.items():
            setattr(pe, k, v)
        pe.save()
    return pe, created


def record_benchmark(production_engine, *, trigger: str = "manual", reps: int = 7, label: str = "",
                     registry=None, into=None) -> Any:
    """Validate, time (every scenario) and profile ``production_engine`` in this process with
    the current production kernels; store an :class:`~swarm.engine_registry.models.EngineBenchmark`.

    Production kernels and templates only run here (trusted, see :mod:`engines._binding`);
    the default registry is :func:`swarm.engine_registry.registry.registry_for` (the engine's measured
    template points included). ``into``: an existing row of ``production_engine`` (a
    benchmark requested from the engines page) to fill in and save instead of a new one.
    """
    pe = production_engine
    eng = make_engine(pe.engine, config=pe.config or None, registry=registry or registry_for(pe), target=pe.target)
    plan = eng.plan(pe.plan)
    val = validate(pe.engine, engine=eng, plan=plan.to_dict())
    scenarios = SCENARIOS[pe.engine]
    samples = time_plans(eng, {"p": plan}, scenarios, reps=reps)["p"] if val["status"] == "ok" else {}
    metrics: dict[str, Any] = {f"{s}_ms": statistics.median(v) for s, v in samples.items()}
    metrics.update({k: val[k] for k in ("cosine_min", "max_abs_error", "max_rel_error") if k in val})
    breakdown = {}
    for s in scenarios:
        prof = Profile()
        make_scenario(eng, plan, s)()  # warm
        _profiled(eng, plan, s, prof)
        breakdown[s] = prof.breakdown()
    graph = eng.describe(plan)
    for rows in graph.values():
        for r in rows:
            r.get("kernel", {}).pop("source", None)
    fields = dict(status=val["status"], plan=plan.to_dict(), validation=val, metrics=metrics, samples=samples,
                  breakdown=breakdown, kernels=val.get("kernels", {}), graph=graph)
    if into is not None:
        for k, v in fields.items():
            setattr(into, k, v)
        into.save(update_fields=list(fields))
        return into
    return EngineBenchmark.objects.create(engine=pe, trigger=trigger, label=label or "as in production", **fields)


def _profiled(eng, plan, scenario: str, prof) -> None:
    """Run ``scenario`` once more with per-operator timing into ``prof``."""
    import numpy as np  # noqa: PLC0415

    if eng.name == "minilm":
        texts = bench_corpus()
        n, bs = {"batch-1": (1, 1), "batch-32": (32, 32)}.get(scenario, (len(texts), plan.batch_size))
        eng.encode(texts[:n], eng.plan({**plan.to_dict(), "BATCH_SIZE": bs}), profile=prof)
        return
    prompt = default_prompt(eng)
    x = residual_stream(np.random.default_rng(0), prompt + 1, eng.cfg.hidden)
    state = eng.new_cache(1, prompt + 1) if eng.name == "llama-layer" else eng.new_state(1)
    eng.prefill(x[None, :prompt], plan, state, profile=prof if scenario == "prefill" else None)
    if scenario == "decode":
        eng.decode(x[prompt][None], state, plan, profile=prof)
