"""Engine goals in the swarm: create the ``Goal`` searching an engine's plans, and evaluate
its candidates against the production kernels of the database.

The plan space, the ``engine:<engine>[:<config>]`` workloads and the evaluation itself are
:mod:`engines.goals`; this module adds the database: :class:`swarm.models.Goal` rows and
:class:`swarm.engine_registry.registry.DbRegistry` as the registry plans are bound with.
"""

from __future__ import annotations

from typing import Any

from engines import goals as engine_goals
from engines._timing import SCENARIOS
from engines.goals import engine_space, goal_workload, is_engine_workload, parse_goal_workload
from kernels.evidence import Evidence
from swarm.engine_registry.registry import DbRegistry
from swarm.models import Goal

__all__ = ["create_engine_goal", "engine_space", "evaluate_plan", "goal_workload", "is_engine_workload",
           "parse_goal_workload"]


def evaluate_plan(workload: str, source: str, params: dict, *, registry=None, **kwargs: Any) -> Evidence:
    """:func:`engines.goals.evaluate_plan` with the database's production kernels
    (:class:`DbRegistry`) unless ``registry`` is given; same arguments (the signature of
    :func:`kernels.evaluate`) and the same :class:`kernels.Evidence`. The registry is read
    in this process; the kernels the plan binds are passed as entries to the sandbox child
    that validates and times it (:mod:`engines._plan_isolated`), so no kernel is loaded here."""
    return engine_goals.evaluate_plan(workload, source, params, registry=registry if registry is not None else DbRegistry(),
                                      **kwargs)


def create_engine_goal(engine: str, *, config: str | None = None, target: str = "cpu-x86_64",
                       scenarios: tuple[str, ...] | None = None, objective: str = "latency_ms",
                       user=None, name: str | None = None) -> Goal:
    """Create (or return) the swarm ``Goal`` searching ``engine``'s plans.

    Args:
        scenarios: timing scenarios (default: the engine's first one), e.g.
            ``("batch-1", "batch-32")`` for the encoder's latency at batch sizes 1 and 32.
        objective: ``latency_ms`` (minimise) or ``throughput`` (maximise).

    Returns:
        The goal; the orchestrator evaluates its candidates with :func:`evaluate_plan`.

    Raises:
        KeyError: unknown engine or scenario; ValueError: unknown objective.
    """
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
