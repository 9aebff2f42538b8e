"""Pareto frontier of evaluated candidates.

Two objectives use the classic sort-and-sweep, O(n log n) (Kung, Luccio & Preparata, "On
finding the maxima of a set of vectors", J. ACM 22(4), 1975); more objectives use pairwise
dominance, O(n^2 d), which is correct for any number of objectives.
"""

from __future__ import annotations

from collections.abc import Sequence


def pareto_front(points: Sequence[Sequence[float]]) -> list[int]:
    """Indices of the non-dominated points, all objectives minimised.

    Args:
        points: ``n`` points of ``d`` objective values each (negate maximised objectives).

    Returns:
        Indices into ``points`` of the frontier, in ascending order of the first objective.
        Exact duplicates of a frontier point are all kept.
    """
    n = len(points)
    if n == 0:
        return []
    d = len(points[0])
    if d == 1:
        best = min(p[0] for p in points)
        return [i for i in range(n) if points[i][0] == best]
    if d == 2:
        order = sorted(range(n), key=lambda i: (points[i][0], points[i][1]))
        front: list[int] = []
        best_y = float("inf")
        last: tuple[float, float] | None = None
        for i in order:
            x, y = points[i][0], points[i][1]
            if y < best_y or (last is not None and (x, y) == last):
                front.append(i)
                best_y = min(best_y, y)
                last = (x, y)
        return front
    front = [
        i
        for i in range(n)
        if not any(_dominates(points[j], points[i]) for j in range(n) if j != i)
    ]
    return sorted(front, key=lambda i: points[i][0])


def _dominates(a: Sequence[float], b: Sequence[float]) -> bool:
    return all(x <= y for x, y in zip(a, b)) and any(x < y for x, y in zip(a, b))
