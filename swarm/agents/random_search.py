"""Random sampling over the design space, honouring its restrictions."""

from __future__ import annotations

from swarm.agents.base import Agent, Proposal, RunView


class RandomAgent(Agent):
    """Uniform random points of the restricted space, never one already seen for the goal."""

    kind = "random"

    def propose(self, view: RunView, n: int) -> list[Proposal]:
        return self.fill_random(view, n, set())
