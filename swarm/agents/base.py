"""The agent interface: ask/tell, like Optuna's samplers.

Only the orchestrator calls agents. They read a frozen :class:`RunView` and never touch the
database, so that an agent can be restarted from evidence at any generation.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any

from kernels import DesignSpace


@dataclass(frozen=True)
class Observation:
    """One evaluated candidate as an agent sees it: parameters, status and metrics."""

    params: dict[str, Any]
    status: str
    metrics: dict[str, float]


@dataclass(frozen=True)
class RunView:
    """What an agent may know about a run when it proposes the next generation.

    Attributes:
        workload: workload name, e.g. ``"rmsnorm"``.
        target: target name, e.g. ``"cpu-x86_64"``.
        space: the goal's design space.
        objectives: the goal's objectives (``{"metric", "direction"}``), primary first.
        generation: number of the generation being proposed (1-based).
        seen: canonical point keys (``DesignSpace.point_key``) of every candidate of the goal,
            evaluated or pending: proposing one of them again is wasted budget.
        history: evaluated candidates of the goal, oldest first.
    """

    workload: str
    target: str
    space: DesignSpace
    objectives: tuple[dict[str, str], ...]
    generation: int
    seen: frozenset[str]
    history: tuple[Observation, ...] = field(default=())


@dataclass(frozen=True)
class Proposal:
    """A candidate an agent proposes: parameter values for the goal's template.

    ``source`` is None to use the goal's template (parameter agents); coding agents set it.
    """

    params: dict[str, Any]
    source: str | None = None
    rationale: str = ""


class Agent(abc.ABC):
    """A search strategy. Subclasses set ``name`` and implement :meth:`propose`."""

    name: str = "agent"

    def __init__(self, seed: int) -> None:
        self.reseed(seed)

    @abc.abstractmethod
    def propose(self, view: RunView, n: int) -> list[Proposal]:
        """Return at most ``n`` proposals not in ``view.seen`` (fewer when the space is exhausted)."""

    def observe(self, view: RunView, outcomes: list[Observation]) -> None:  # noqa: B027
        """Learn from a finished generation. Stateless agents ignore it."""

    def reseed(self, seed: int) -> None:
        import numpy as np

        self.rng = np.random.default_rng(seed)
