"""Search agents. ``AGENTS`` maps an agent kind to its class; ``DEFAULT_MIX`` is the swarm."""

from __future__ import annotations

from typing import Any

from swarm.agents.base import Agent, Observation, Proposal, RunView
from swarm.agents.evolutionary import EvolutionaryAgent
from swarm.agents.llm import LLMAgent
from swarm.agents.model_guided import OptunaAgent
from swarm.agents.random_search import RandomAgent

AGENTS: dict[str, type[Agent]] = {
    cls.kind: cls for cls in (RandomAgent, EvolutionaryAgent, OptunaAgent, LLMAgent)
}

#: The default swarm: evolutionary search and the model-guided agent, sharing each generation
#: by credit (random sampling alone is what both start from; it is available as an agent).
#: LLM agents join when asked for.
DEFAULT_MIX: tuple[dict[str, Any], ...] = (
    {"name": "evolutionary", "kind": "evolutionary", "settings": {}},
    {"name": "optuna", "kind": "optuna", "settings": {}},
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
