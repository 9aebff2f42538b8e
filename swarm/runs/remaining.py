"""What is left to evaluate in a design space, given a goal's history.

A run ends when its agents find no new point; whether that is because the space is exhausted
(every valid point has a candidate) or because the agents failed decides the run's end reason,
and a direction or a run that would leave nothing to evaluate is refused before it is accepted.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from kernels import DesignSpace
from kernels.space import point_key
from swarm.runs.history import Row

#: Spaces up to this many Cartesian points (and every enumerated domain) are searched
#: exhaustively: the answer is exact. Larger ones are sampled (see :func:`open_point`).
ENUMERATE_LIMIT = 50_000
#: Rounds of ``DesignSpace.sample`` (each up to 1,200 uniform tries) on a larger space.
SAMPLE_ROUNDS = 8


def seen_keys(space: DesignSpace, rows: Iterable[Row]) -> set[str]:
    """Point keys of the rows (a goal's candidates, pending ones included) that name exactly
    ``space``'s parameters: the points agents will not propose again."""
    names = set(space.names)
    return {point_key(r.params) for r in rows if r.params.keys() == names}


def open_point(space: DesignSpace, seen: set[str]) -> dict | None:
    """A valid point of ``space`` whose key is not in ``seen``, or None.

    Exact (a lazy walk that stops at the first open point) for enumerated domains and for
    spaces of at most :data:`ENUMERATE_LIMIT` Cartesian points; larger spaces are sampled
    uniformly (seeded, :data:`SAMPLE_ROUNDS` x 1,200 tries), the way the agents' own samplers
    look for points, so None there means the agents would find none either.
    """
    if not space.parameters:
        return None
    if space.domain is not None or space.cartesian_size() <= ENUMERATE_LIMIT:
        return next((p for p in space.iter_valid() if point_key(p) not in seen), None)
    for round_ in range(SAMPLE_ROUNDS):
        found = space.sample(np.random.default_rng(round_), 1, exclude=seen)
        if found:
            return found[0]
    return None


def has_valid_point(space: DesignSpace) -> bool:
    """True when some point of ``space`` satisfies its restrictions (same search as :func:`open_point`)."""
    return open_point(space, set()) is not None
