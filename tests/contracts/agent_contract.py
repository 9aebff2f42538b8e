"""Contract every agent must meet (Optuna's BasicSamplerTestCase, for agents).

Subclass :class:`AgentContract` and provide an ``agent_kind`` (and optionally ``settings``).
The landscape is synthetic and exact, so the tests are deterministic and fast.
"""

from __future__ import annotations

import math

from kernels import DesignSpace
from swarm.agents import Observation, RunView, make_agent

SPACE = DesignSpace.from_dict({
    "parameters": [
        {"name": "BX", "values": [16, 32, 64, 128, 256]},
        {"name": "BY", "values": [1, 2, 4, 8, 16]},
        {"name": "TILE", "values": [1, 2, 4, 8]},
        {"name": "UNROLL", "values": [0, 1]},
    ],
    "restrictions": ["BX * BY <= 1024"],
})


def landscape(p: dict) -> tuple[str, dict]:
    """A known landscape: optimum at BX=128, BY=4, TILE=4, UNROLL=1; BX*BY > 512 fails."""
    if p["BX"] * p["BY"] > 512:
        return "runtime_error", {}
    t = (1 + abs(math.log2(p["BX"] / 128)) + abs(math.log2(p["BY"] / 4)) + abs(math.log2(p["TILE"] / 4))) * (1.5 - 0.5 * p["UNROLL"])
    return "ok", {"latency_ms": t, "max_rel_error": 1e-7}


def view(history: list[Observation], generation: int = 1, warm_start=()) -> RunView:
    return RunView(
        workload="synthetic", target="replay:synthetic", space=SPACE,
        objectives=({"metric": "latency_ms", "direction": "minimize"},), constraints=(),
        generation=generation, seen=frozenset(SPACE.point_key(o.params) for o in history),
        history=tuple(history), warm_start=tuple(warm_start),
    )


def search(kind: str, settings: dict, budget: int, batch: int, seed: int) -> list[Observation]:
    history: list[Observation] = []
    generation = 1
    while len(history) < budget:
        agent = make_agent(kind, seed * 1000 + generation, settings)
        proposals = agent.propose(view(history, generation), min(batch, budget - len(history)))
        if not proposals:
            break
        for pr in proposals:
            status, metrics = landscape(pr.params)
            history.append(Observation(len(history) + 1, pr.params, status, metrics, status == "ok"))
        generation += 1
    return history


def median_best(kind: str, settings: dict | None = None, budget: int = 40, batch: int = 8, seeds: int = 7) -> float:
    """Median over seeds of the best latency found with ``budget`` evaluations."""
    bests = sorted(
        min(o.metrics["latency_ms"] for o in search(kind, settings or {}, budget, batch, seed=s) if o.status == "ok")
        for s in range(seeds)
    )
    return bests[seeds // 2]


class AgentContract:
    agent_kind: str = ""
    settings: dict = {}

    def test_it_proposes_valid_unseen_distinct_points(self):
        history = search("random", {}, 10, 10, seed=1)
        proposals = make_agent(self.agent_kind, 5, self.settings).propose(view(history, 2), 8)
        assert 0 < len(proposals) <= 8
        keys = [SPACE.point_key(p.params) for p in proposals]
        assert len(set(keys)) == len(keys)
        assert not set(keys) & {SPACE.point_key(o.params) for o in history}
        assert all(SPACE.contains(p.params) for p in proposals)

    def test_it_is_reproducible_for_a_seed(self):
        history = search("random", {}, 12, 12, seed=2)
        a = make_agent(self.agent_kind, 9, self.settings).propose(view(history, 2), 5)
        b = make_agent(self.agent_kind, 9, self.settings).propose(view(history, 2), 5)
        assert [p.params for p in a] == [p.params for p in b]

    def test_it_stops_when_the_space_is_exhausted(self):
        history = [Observation(i, p, *landscape(p), True) for i, p in enumerate(SPACE.iter_valid())]
        assert make_agent(self.agent_kind, 1, self.settings).propose(view(history, 2), 4) == []

    def test_it_finds_a_good_point_within_budget(self):
        # 40 of 176 valid points; 3.0 ms is the landscape's 5th percentile (optimum 1.0 ms)
        assert median_best(self.agent_kind, self.settings) <= 3.0
