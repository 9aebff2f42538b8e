"""Search agents. ``AGENTS`` maps an agent kind to its class; ``DEFAULT_MIX`` is the swarm."""

from __future__ import annotations

from typing import Any

from swarm.agents.base import Agent, Observation, Proposal, RelatedEvidence, RunView
from swarm.agents.evolutionary import EvolutionaryAgent
from swarm.agents.gaussian_process import GaussianProcessAgent
from swarm.agents.llm import LLMAgent
from swarm.agents.local_search import LocalSearchAgent
from swarm.agents.model_guided import OptunaAgent
from swarm.agents.pack import PackAgent
from swarm.agents.random_search import RandomAgent
from swarm.agents.surrogate import ForestAgent

AGENTS: dict[str, type[Agent]] = {
    cls.kind: cls
    for cls in (RandomAgent, EvolutionaryAgent, OptunaAgent, ForestAgent, GaussianProcessAgent, LocalSearchAgent, PackAgent,
                LLMAgent)
}

#: The default swarm: a random-forest surrogate (SMAC-style expected improvement), a
#: Gaussian-process surrogate (as Kernel Tuner's bayes_opt), iterated local search whose
#: neighbours a forest ranks, and evolutionary search whose mutations draw from all of a
#: parameter's values (``jump_rate`` 1.0: Kernel Tuner's GA mutates to a random Hamming
#: neighbour too; a lone optimum several adjacent steps from the runner-up is one jump away),
#: sharing each generation by credit; a run's endgame (its last quarter) is the local agent's.
#: The GP carries smooth landscapes (a GEMM's tile and vector widths), the forest and the local
#: agent rough ones (a convolution's block sizes). Where the
#: kernel was tuned on another device, the forests transfer from those evaluations, weighted by
#: how well they rank this run's (``docs/runs.md``). Chosen on
#: the recorded landscapes of ``benchmarks.search_efficiency``; the measurements behind the
#: choice are in ``docs/benchmarks.md``. Random sampling, Optuna, pack and LLM agents are
#: available as agents too.
DEFAULT_MIX: tuple[dict[str, Any], ...] = (
    {"name": "forest", "kind": "forest", "settings": {}},
    {"name": "gp", "kind": "gp", "settings": {}},
    {"name": "local", "kind": "local", "settings": {}},
    {"name": "evolutionary", "kind": "evolutionary", "settings": {"jump_rate": 1.0}},
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


__all__ = ["AGENTS", "DEFAULT_MIX", "Agent", "Observation", "Proposal", "RelatedEvidence", "RunView", "make_agent"]
