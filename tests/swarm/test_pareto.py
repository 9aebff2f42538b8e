import numpy as np
import pytest

from swarm.pareto import pareto_front


def brute_force(points):
    def dominates(a, b):
        return all(x <= y for x, y in zip(a, b)) and any(x < y for x, y in zip(a, b))

    return sorted(i for i, p in enumerate(points) if not any(dominates(q, p) for q in points))


@pytest.mark.parametrize("d", [1, 2, 3, 4])
@pytest.mark.parametrize("seed", range(5))
def test_it_matches_brute_force_dominance(d, seed):
    rng = np.random.default_rng(seed)
    # integer grid so that ties and exact duplicates occur
    points = rng.integers(0, 8, size=(60, d)).tolist()
    assert sorted(pareto_front(points)) == brute_force(points)


def test_it_orders_the_frontier_by_the_first_objective():
    points = [[3, 1], [1, 3], [2, 2], [3, 3]]
    assert pareto_front(points) == [1, 2, 0]


def test_it_handles_no_points():
    assert pareto_front([]) == []
