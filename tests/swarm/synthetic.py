"""A goal over the synthetic landscape of the agent contract, evaluated in-process.

The evaluator stands in for ``kernels.evaluate`` with an exact, known landscape, so that the
orchestrator's logic (credit, insights, directions) is tested deterministically and fast.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from swarm.models import Goal
from swarm.runs import orchestrator
from tests.contracts.agent_contract import SPACE, landscape


@dataclass
class FakeEvidence:
    status: str
    metrics: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"status": self.status, "metrics": self.metrics, "log": f"synthetic {self.status}"}


def synthetic_evaluate(workload, source, params, **kwargs) -> FakeEvidence:
    status, metrics = landscape(params)
    return FakeEvidence(status, metrics)


def synthetic_goal(**overrides) -> Goal:
    fields = dict(
        name="synthetic", workload="rmsnorm", target="cpu-x86_64", shape_set="synthetic",
        objectives=[{"metric": "latency_ms", "direction": "minimize"}], constraints=[],
        space=SPACE.to_dict(), source="/* synthetic */",
    )
    fields.update(overrides)
    return Goal.objects.create(**fields)


def drive(run, pending, evaluate=synthetic_evaluate, max_generations: int = 1000) -> None:
    for _ in range(max_generations):
        if not pending:
            return
        for c in pending:
            orchestrator.evaluate_candidate(c.pk, evaluate=evaluate)
        pending = orchestrator.advance(run.pk)
