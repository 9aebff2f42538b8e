"""Search agents. ``AGENTS`` maps an agent kind to its class; ``DEFAULT_MIX`` is the swarm."""

from __future__ import annotations

from typing import Any

from swarm.agents.base import Agent, Observation, Proposal, RunView
from swarm.agents.evolutionary import EvolutionaryAgent
from swarm.agents.llm import LLMAgent
from swarm.agents.local_search import LocalSearchAgent
from swarm.agents.model_guided import OptunaAgent
from swarm.agents.random_search import RandomAgent
from swarm.agents.surrogate import ForestAgent

AGENTS: dict[str, type[Agent]] = {
    cls.kind: cls for cls in (RandomAgent, EvolutionaryAgent, OptunaAgent, ForestAgent, LocalSearchAgent, LLMAgent)
}

#: The default swarm: two random-forest surrogates (SMAC-style expected improvement; one with
#: smoother leaves that generalises from few evaluations, one finer) and evolutionary search,
#: sharing each generation by credit. Chosen on the recorded landscapes of
#: ``benchmarks.search_efficiency`` (5 seeds, medians of best/optimum at 50/100/200/400
#: evaluations; convolution, GEMM, GEMM time+energy):
#:   evolutionary + optuna (TPE):          1.208/1.074/1.074/1.074, 1.223/1.111/1.057/1.0, 1.024/1.0/1.0/1.0
#:   + forest:                             1.547/1.295/1.074/1.0,   1.154/1.057/1.0/1.0,   1.002/1.0/1.0/1.0
#:   forest + local search:                1.560/1.542/1.165/1.074, 1.273/1.018/1.018/1.0, 1.076/1.0/1.0/1.0
#:   forest + optuna:                      1.351/1.260/1.112/1.074, 1.154/1.0/1.0/1.0,     1.024/1.0/1.0/1.0
#:   forest + forest (fine) + evolutionary: 1.348/1.208/1.074/1.0,  1.049/1.0/1.0/1.0,     1.0/1.0/1.0/1.0
#: and at 10 seeds: forest + evolutionary 1.453/1.147/1.037/1.0, 1.196/1.091/1.0/1.0, 1.106/1.0/1.0/1.0;
#: the default mix 1.340/1.187/1.101/1.0, 1.187/1.0/1.0/1.0, 1.0/1.0/1.0/1.0, and with crossovers
#: of the best in the forests' candidate pools 1.272/1.147/1.037/1.0, 1.183/1.0/1.0/1.0, 1.0/1.0/1.0/1.0.
#: Random sampling, Optuna, local search and LLM agents are available as agents.
DEFAULT_MIX: tuple[dict[str, Any], ...] = (
    {"name": "forest", "kind": "forest", "settings": {}},
    {"name": "forest-fine", "kind": "forest", "settings": {"leaf": 1, "max_features": 0.5}},
    {"name": "evolutionary", "kind": "evolutionary", "settings": {}},
)


def make_agent(kind: str, seed: int, settings: dict[str, Any] | None = None) -> Agent:
    """Instantiate the agent of ``kind`` seeded with ``seed``.

    Raises:
        KeyError: unknown kind; the message lists the known ones.
    """
    try:
        cls = AGENTS[kind]
    except KeyError:
        raise KeyError(f"unknown agent kind {kind!r}; known: {', '.join(sorted(AGENTS))}") from None
    return cls(seed, **(settings or {}))


__all__ = ["AGENTS", "DEFAULT_MIX", "Agent", "Observation", "Proposal", "RunView", "make_agent"]
