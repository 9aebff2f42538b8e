"""The agent interface: ask/tell, like Optuna's samplers.

Only the orchestrator calls agents. They read a frozen :class:`RunView` and never touch the
database, so that an agent can be restarted from evidence at any generation: whatever memory
an agent needs is recomputed from ``RunView.history``.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kernels import DesignSpace

FAILED = frozenset({"compile_error", "runtime_error", "timeout", "wrong_result", "invalid"})


#: Added to the score of an ``ok`` candidate outside the constraints (:meth:`RunView.score`):
#: it ranks after every feasible one and before every failure.
INFEASIBLE = 1e12


@dataclass(frozen=True)
class Observation:
    """One evaluated candidate as an agent sees it.

    Attributes:
        candidate: candidate id (for lineage).
        params: parameter values.
        status: outcome (``ok``, ``compile_error``, ...).
        metrics: derived metrics (``latency_ms`` in ms, ``gbps`` in GB/s, ...).
        feasible: ``ok`` and within the run's constraints.
        agent: name of the agent that proposed it.
        source: kernel source (only filled for the best few and recent failures).
        log: evaluation log tail (only filled for recent failures).
    """

    candidate: int
    params: dict[str, Any]
    status: str
    metrics: dict[str, float]
    feasible: bool
    agent: str = ""
    source: str = ""
    log: str = ""


@dataclass(frozen=True)
class RelatedEvidence:
    """Evaluations of the same kernel with the same parameters in another goal (another device
    or shape set), as a transferring model reads them.

    Attributes:
        source: where they come from, for rationales, e.g. ``"goal 7 (a100, default)"``.
        points: parameter values, points of the run's space.
        scores: the run's primary objective at those points as :meth:`RunView.score` gives it
            (smaller is better; ``ok`` and feasible evaluations only), one per point.
    """

    source: str
    points: tuple[dict[str, Any], ...]
    scores: tuple[float, ...]


@dataclass(frozen=True)
class RunView:
    """What an agent may know about a run when it proposes the next generation.

    Attributes:
        workload: workload name, e.g. ``"rmsnorm"``.
        target: target name, e.g. ``"cpu-x86_64"``.
        space: the run's effective design space (goal's, narrowed by directions).
        objectives: ``{"metric", "direction"}`` dicts, primary first.
        constraints: ``{"metric", "op", "value"}`` dicts.
        generation: number of the generation being proposed (1-based).
        seen: point keys of every candidate of the goal (evaluated or pending).
        history: evaluated candidates of the goal, oldest first.
        warm_start: parameter sets that were best in earlier runs on this workload (insights).
        related: evaluations of other goals of the workload with the same parameter names
            (:class:`RelatedEvidence`), which a model may transfer where they rank this run's
            evaluations well (:mod:`swarm.agents.transfer`).
        insights: latest insights for (workload, target) as dicts (LLM agents read them).
        contract: workload math and candidate contract, as text (LLM agents read it).
        template: the goal's template source.
        run: identity of the run ("" outside a run): its id and start time, unique even when a
            database reuses ids; agents may key per-process caches on it.
        incumbent: the best feasible candidate's ``{"candidate", "roofline": [{"label",
            "intensity" (flop/byte), "gflops", "gbps", "latency_ms"}], "ceilings": {"gbps",
            "gflops"}, "static": {...}}`` (empty without one).
        directions: the engineer's applied directions of the run, as one line each.
        context_tokens: token budget of the evidence in a coding agent's prompt (the goal's).
        endgame: the generation is in the run's endgame, its last evaluations
            (:func:`swarm.learning.credit.endgame_evaluations`), whose slots go to the agents
            that :attr:`Agent.climbs` (the others fill what they cannot).

    ``insights``, ``contract``, ``template``, ``incumbent``, ``directions`` and the
    observations' ``source`` and ``log`` are filled only when an agent of the run's mix has
    :attr:`Agent.reads_context`.
    """

    workload: str
    target: str
    space: DesignSpace
    objectives: tuple[dict[str, str], ...]
    constraints: tuple[dict[str, Any], ...]
    generation: int
    seen: frozenset[str]
    history: tuple[Observation, ...] = field(default=())
    warm_start: tuple[dict[str, Any], ...] = field(default=())
    related: tuple[RelatedEvidence, ...] = field(default=())
    insights: tuple[dict[str, Any], ...] = field(default=())
    contract: str = ""
    template: str = ""
    run: str = ""
    incumbent: dict[str, Any] = field(default_factory=dict)
    directions: tuple[str, ...] = field(default=())
    context_tokens: int = 6000
    endgame: bool = False

    def score(self, obs: Observation) -> float:
        """Scalar to minimise for ``obs``: primary objective, penalised when infeasible or failed.

        Feasible ``ok`` candidates score their signed primary objective; infeasible ``ok`` ones
        rank after every feasible one; failures rank last (``inf``).
        """
        primary = self.objectives[0]
        sign = 1.0 if primary["direction"] == "minimize" else -1.0
        value = obs.metrics.get(primary["metric"])
        if obs.status != "ok" or value is None or not math.isfinite(value):
            return math.inf
        return sign * value + (0.0 if obs.feasible else INFEASIBLE)

    def is_feasible(self, obs: Observation) -> bool:
        """``obs`` is an ``ok`` candidate within the constraints (its :meth:`score` is below
        :data:`INFEASIBLE`)."""
        return self.score(obs) < INFEASIBLE

    def ranked(self) -> list[Observation]:
        """Evaluated observations that are points of this space, best first (failures last).

        Kernels whose parameters are not exactly the space's (a coding agent's own source with
        ``{}`` or a subset) are not points of the space: :meth:`best_kernels` ranks them.
        """
        names = set(self.space.names)
        own = [o for o in self.history if set(o.params) == names]
        return sorted(own, key=self.score)

    def best_kernels(self, k: int, agent: str | None = None) -> list[Observation]:
        """The ``k`` best ``ok`` observations of any parameters (coding agents' kernels too),
        best first; only those proposed by ``agent`` when it is given."""
        ok = [o for o in self.history if o.status == "ok" and (agent is None or o.agent == agent)
              and self.score(o) != math.inf]
        return sorted(ok, key=self.score)[:k]


@dataclass(frozen=True)
class Proposal:
    """A candidate an agent proposes, or an explained failure to propose one.

    Attributes:
        params: parameter values (reach the source as ``#define`` lines).
        source: complete kernel source (coding agents); None means the goal's template.
        parents: ids of the candidates it was derived from.
        rationale: why the agent expects it to be good.
        error: set when the agent failed to produce a usable proposal (kept as evidence).
        raw: the raw answer behind a failed proposal.
        transcript: coding agents: the conversation that produced it (``messages``, ``answer``,
            ``prompt_tokens``, ``completion_tokens``, ``latency_s`` in s, ``attempt``), stored
            on the candidate.
    """

    params: dict[str, Any]
    source: str | None = None
    parents: tuple[int, ...] = ()
    rationale: str = ""
    error: str | None = None
    raw: str = ""
    transcript: dict[str, Any] = field(default_factory=dict)


def at_least(low: float) -> tuple[Callable[[float], bool], str]:
    """A :attr:`Agent.NUMERIC_SETTINGS` test and its wording: ``value >= low``."""
    return (lambda v: v >= low), f">= {low:g}"


def between(low: float, high: float) -> tuple[Callable[[float], bool], str]:
    """A :attr:`Agent.NUMERIC_SETTINGS` test and its wording: ``low <= value <= high``."""
    return (lambda v: low <= v <= high), f"in [{low:g}, {high:g}]"


def fraction(open_low: bool = False) -> tuple[Callable[[float], bool], str]:
    """A :attr:`Agent.NUMERIC_SETTINGS` test and its wording: ``[0, 1]`` or ``(0, 1]``."""
    if open_low:
        return (lambda v: 0.0 < v <= 1.0), "in (0, 1]"
    return (lambda v: 0.0 <= v <= 1.0), "in [0, 1]"


def _number(raw: Any, kind: type) -> int | float:
    """``raw`` (a number or its string) as ``kind``: ``"7"``, ``"7.0"`` and ``7.0`` are the int 7.

    Raises:
        ValueError: a boolean, not a number, or not integral where ``kind`` is int (2.9 is
            refused, not truncated).
        TypeError, OverflowError: as ``float(raw)`` / ``int(inf)``.
    """
    if isinstance(raw, bool):
        raise ValueError("a boolean is not a number")
    value = float(raw)
    if kind is not int:
        return value
    if not value.is_integer():
        raise ValueError(f"{raw!r} is not an integer")
    return int(value)


class Agent(abc.ABC):
    """A search strategy. Subclasses set ``name`` and implement :meth:`propose`.

    Args:
        seed: RNG seed; the orchestrator derives it from the run's seed, the generation and the
            agent's name, so a restarted run proposes the same points.
        **settings: agent-specific settings (stored on the run's agent record).

    Raises:
        ValueError: a setting neither :attr:`NUMERIC_SETTINGS` nor :attr:`OTHER_SETTINGS`
            declares, or one that fails its test.
    """

    kind: str = "agent"
    #: Name of the agent in its run (the orchestrator sets it; "" outside a run).
    name: str = ""
    #: Whether an agent of this kind runs in its own lane (:mod:`swarm.runs.llm_lane`): its requests
    #: run beside the generations instead of inside them.
    lane: bool = False
    #: Whether :meth:`propose` reads ``RunView.insights`` and the sources and logs of
    #: observations; the orchestrator fills them only for a mix that has such an agent.
    reads_context: bool = False
    #: Whether :meth:`propose` reads ``RunView.related`` (other goals' evaluations); the
    #: orchestrator reads them only for a mix that has such an agent.
    reads_related: bool = False
    #: Whether the agent climbs from the best evaluations: in a run's endgame (``RunView.endgame``)
    #: the batch goes to such agents (the others fill the slots they cannot).
    climbs: bool = False
    #: Numeric settings checked when the agent is made (so when a run starts):
    #: ``(name, default, int or float, test, what the test requires)``.
    NUMERIC_SETTINGS: tuple[tuple[str, float, type, Callable[[float], bool], str], ...] = ()
    #: Settings that are not numbers (names, URLs, switches), checked when the agent is made
    #: where given (not None or ""): ``(name, test, what the test requires)``. A setting
    #: declared in neither tuple is refused (a misspelt name would otherwise be ignored).
    OTHER_SETTINGS: tuple[tuple[str, Callable[[Any], bool], str], ...] = ()

    def __init__(self, seed: int, **settings: Any) -> None:
        self.settings = settings
        self.usage: dict[str, float] = {}
        self._numbers: dict[str, int | float] = {}  # parsed once, by _check_settings
        self._check_settings()
        self.reseed(seed)

    def setting(self, name: str) -> int | float:
        """Numeric setting ``name`` of :attr:`NUMERIC_SETTINGS`: the given value or its default,
        as its type (checked when the agent was made).

        Raises:
            KeyError: ``name`` is not declared in :attr:`NUMERIC_SETTINGS`.
        """
        try:
            return self._numbers[name]
        except KeyError:
            raise KeyError(f"{self.kind} agent declares no numeric setting {name!r}") from None

    def _check_settings(self) -> None:
        """Raises ValueError naming the first setting that neither tuple declares, the first of
        :attr:`NUMERIC_SETTINGS` that is not a number (booleans are not) or fails its test, or
        the first given :attr:`OTHER_SETTINGS` that fails its test."""
        declared = [s[0] for s in self.NUMERIC_SETTINGS] + [s[0] for s in self.OTHER_SETTINGS]
        unknown = sorted(set(self.settings) - set(declared))
        if unknown:
            raise ValueError(f"{self.kind} agent has no setting {unknown[0]!r}; its settings: "
                             f"{', '.join(sorted(declared)) or 'none'}")
        for name, ok, expected in self.OTHER_SETTINGS:
            raw = self.settings.get(name)
            if raw not in (None, "") and not ok(raw):
                raise ValueError(f"{self.kind} agent: {name} must be {expected}, not {raw!r}")
        for name, default, kind, ok, expected in self.NUMERIC_SETTINGS:
            raw = self.settings.get(name, default)
            try:
                value = _number(raw, kind)
            except (TypeError, ValueError, OverflowError):
                value = None
            if value is None or not ok(value):
                what = "an integer" if kind is int else "a number"
                raise ValueError(f"{self.kind} agent: {name} must be {what} {expected}, not {raw!r}")
            self._numbers[name] = value

    @abc.abstractmethod
    def propose(self, view: RunView, n: int) -> list[Proposal]:
        """Return at most ``n`` proposals whose point keys are not in ``view.seen``."""

    def observe(self, view: RunView, outcomes: list[Observation]) -> None:  # noqa: B027
        """Learn from a finished generation. Agents here recompute from history instead."""

    def reseed(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    # helpers shared by parameter agents

    def fill_random(self, view: RunView, n: int, taken: set[str]) -> list[Proposal]:
        """Up to ``n`` random valid points not seen and not in ``taken`` (updated in place)."""
        points = view.space.sample(self.rng, n, exclude=frozenset(view.seen | taken))
        for p in points:
            taken.add(view.space.point_key(p))
        return [Proposal(params=p) for p in points]

    @staticmethod
    def fresh_key(view: RunView, params: dict[str, Any], taken: set[str]) -> str | None:
        """The point key of ``params`` when it is a valid point of the space that is neither
        seen nor in ``taken``; else None."""
        if not view.space.contains(params):
            return None
        key = view.space.point_key(params)
        return None if key in view.seen or key in taken else key

    def take_fresh(self, view: RunView, params: dict[str, Any], taken: set[str]) -> bool:
        """True, and ``params``'s key added to ``taken``, when ``params`` is a valid point of the
        space that is neither seen nor already in ``taken``."""
        key = self.fresh_key(view, params, taken)
        if key is None:
            return False
        taken.add(key)
        return True
