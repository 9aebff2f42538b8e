"""Search agents. ``AGENTS`` maps an agent kind to its class."""

from swarm.agents.base import Agent, Observation, Proposal, RunView
from swarm.agents.random_search import RandomAgent

AGENTS: dict[str, type[Agent]] = {RandomAgent.name: RandomAgent}


def make_agent(kind: str, seed: int) -> Agent:
    """Instantiate the agent of ``kind`` seeded with ``seed``.

    Raises:
        KeyError: unknown kind; the message lists the known ones.
    """
    try:
        cls = AGENTS[kind]
    except KeyError:
        raise KeyError(f"unknown agent {kind!r}; known: {', '.join(sorted(AGENTS))}") from None
    return cls(seed)


__all__ = ["AGENTS", "Agent", "Observation", "Proposal", "RunView", "make_agent"]
