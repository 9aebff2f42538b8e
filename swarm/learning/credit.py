"""Agent credit and the bandit rule that shares a generation's budget among agents.

Credit is frontier improvements per slot used (evaluations plus failed proposals). Shares come
from UCB1 (Auer, Cesa-Bianchi & Fischer, "Finite-time Analysis of the Multiarmed Bandit
Problem", Machine Learning 47, 2002), allocated slot by slot with each slot counted as a pull,
so one generation's batch spreads over agents instead of going all to the current leader; an
agent with fewer than :data:`COLD_START_EVALUATIONS` slots used gets at least one slot when the
batch has room. In a run's endgame (its last evaluations) the batch goes to the agents that
climb from the best evaluations (:func:`endgame_shares`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from swarm.pareto import pareto_front

COLD_START_EVALUATIONS = 8
#: Share of a run's budget that is its endgame unless ``SWARM_ENDGAME_SHARE`` says otherwise.
DEFAULT_ENDGAME_SHARE = 0.25


@dataclass(frozen=True)
class Arm:
    """An agent as the bandit sees it."""

    name: str
    evaluations: int
    improvements: int
    boost: float = 1.0
    paused: bool = False
    failures: int = 0  # proposals recorded as failures (the agent raised, or left the space)

    @property
    def pulls(self) -> int:
        """Slots this agent has used: evaluations plus failed proposals, so an agent that
        keeps failing loses credit and leaves the cold-start floor like one that never improves."""
        return self.evaluations + self.failures


def ucb_score(arm: Arm, pulls: int, total: int, exploration: float) -> float:
    """UCB1 score ``boost * (mean + c * sqrt(2 ln N / n))``; ``inf`` for an unpulled arm."""
    if pulls == 0:
        return math.inf
    mean = arm.improvements / arm.pulls if arm.pulls else 0.0
    return arm.boost * (mean + exploration * math.sqrt(2.0 * math.log(max(total, 2)) / pulls))


def allocate(arms: Sequence[Arm], n: int, exploration: float = 0.3) -> tuple[dict[str, int], dict[str, float]]:
    """Share ``n`` evaluation slots among the unpaused ``arms``.

    Returns:
        ``(shares, scores)``: slots per agent name (paused agents get 0) and each agent's UCB1
        score before allocation (for display).
    """
    active = [a for a in arms if not a.paused and a.boost > 0]
    shares = {a.name: 0 for a in arms}
    pulls = {a.name: a.pulls for a in active}
    total = sum(pulls.values())
    scores = {a.name: ucb_score(a, pulls[a.name], total, exploration) for a in active}
    cold = [a for a in active if a.pulls < COLD_START_EVALUATIONS]
    if cold and n >= len(cold):
        # A floor of one slot for agents still starting: early credit is noise, and an agent
        # starved in the first generations would never earn any.
        for a in cold:
            shares[a.name] = 1
            pulls[a.name] += 1
            total += 1
        n -= len(cold)
    for _ in range(n if active else 0):
        best = max(active, key=lambda a: (ucb_score(a, pulls[a.name], total, exploration), -shares[a.name]))
        shares[best.name] += 1
        pulls[best.name] += 1
        total += 1
    return shares, {k: (v if math.isfinite(v) else 1e9) for k, v in scores.items()}


def endgame_share(raw: str | None) -> float:
    """``SWARM_ENDGAME_SHARE`` as the environment gives it (:data:`DEFAULT_ENDGAME_SHARE` when
    unset or blank).

    Raises:
        ValueError: not a number in [0, 1] (``nan`` and ``inf`` included).
    """
    if raw is None or not raw.strip():
        return DEFAULT_ENDGAME_SHARE
    try:
        share = float(raw)
    except ValueError:
        share = math.nan
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"SWARM_ENDGAME_SHARE={raw!r}: expected a share of the budget in [0, 1]")
    return share


def endgame_evaluations(budget: int, share: float) -> int:
    """How many of a run's last evaluations may be its endgame: ``floor(share * budget)``. The
    endgame is the generations that start with at most that many evaluations left, so a
    generation that straddles the mark is not in it.

    With a budget the run's best at its end is all that counts, and an evaluation spent on
    exploring pays off only through the evaluations after it; so the last ones go to the climb
    from the best points, where the next improvement most likely lies (explore-then-commit,
    Lattimore & Szepesvari, "Bandit Algorithms", Cambridge University Press 2020, ch. 6: with a
    known horizon, exploration ends before it). ``share`` 0: no endgame.

    Raises:
        ValueError: ``share`` outside [0, 1].
    """
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"the endgame share must be in [0, 1], got {share!r}")
    return min(budget, math.floor(share * budget + 1e-9))  # 0.29 * 100 is 28.999999999999996 in binary


def endgame_shares(arms: Sequence[Arm], n: int, climbing: set[str], turn: int = 0) -> dict[str, int] | None:
    """``n`` endgame slots split evenly among the unpaused ``arms`` named in ``climbing`` whose
    boost is above 0 (its size does not weigh here); the remainder goes to them in turn from the
    ``turn``-th (the generation's number, so that with one slot a generation each climber gets
    its share). None when none of them is active (the bandit shares then)."""
    active = [a for a in arms if not a.paused and a.boost > 0 and a.name in climbing]
    if not active:
        return None
    shares = {a.name: 0 for a in arms}
    for i, a in enumerate(active):
        shares[a.name] = n // len(active) + ((i - turn) % len(active) < n % len(active))
    return shares


def frontier_improvements(before: Sequence[Sequence[float]], new: Sequence[tuple[str, Sequence[float]]],
                          tolerance: Sequence[float] | None = None) -> dict[str, int]:
    """Count, per agent, the new points that were not dominated when they arrived.

    Args:
        before: objective vectors (minimised) of the feasible points evaluated earlier.
        new: ``(agent, vector)`` in evaluation order.
        tolerance: per objective, the relative difference that cannot be resolved (a
            fraction >= 0; e.g. the target's noise floor for ``latency_ms``, 0 elsewhere): a
            frontier point ``q`` covers a new point ``p`` when ``q_i <= p_i + tol_i * |p_i|``
            for every objective, so a "gain" inside the tolerance is no improvement. A point
            not credited does not join the frontier either: the next one must clear the
            tolerance against the same point. Default 0 everywhere.

    Returns:
        agent name -> number of improvements of the Pareto frontier.
    """
    front = [list(before[i]) for i in pareto_front(before)] if before else []
    tol = list(tolerance) if tolerance is not None else None
    counts: dict[str, int] = {}
    for agent, p in new:
        p = list(p)
        slack = [t * abs(x) for t, x in zip(tol, p)] if tol is not None else [0.0] * len(p)
        if any(all(a <= b + e for a, b, e in zip(q, p, slack)) for q in front):
            continue
        counts[agent] = counts.get(agent, 0) + 1
        front = [q for q in front if not _dominates_or_equal(p, q)] + [p]
    return counts


def _dominates_or_equal(a: Sequence[float], b: Sequence[float]) -> bool:
    return all(x <= y for x, y in zip(a, b))
