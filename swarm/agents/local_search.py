"""Iterated local search around the best candidates.

After Kernel Tuner's ``greedy_ils`` strategy and Lourenço, Martin & Stützle, "Iterated Local
Search" (Handbook of Metaheuristics, 2003): explore the unseen neighbours of the incumbent
(one parameter changed), best incumbent first; when every neighbour of the few best is known
(a local optimum), perturb one of them in several parameters and climb from there. Tuning
landscapes are rough but strongly local: the fastest configurations sit next to other fast
ones, which a model-guided or evolutionary agent samples only by chance.
"""

from __future__ import annotations

from typing import Any

from swarm.agents.base import Agent, Observation, Proposal, RunView, at_least


class LocalSearchAgent(Agent):
    """Neighbours of the best evaluated candidates, then perturbations of them.

    Settings:
        bases: how many of the best feasible candidates are climbed from, best first
            (default 3).
        kick: parameters changed by a perturbation at a local optimum (default 3).
    """

    kind = "local"
    NUMERIC_SETTINGS = (("bases", 3, int, *at_least(1)), ("kick", 3, int, *at_least(1)))

    def propose(self, view: RunView, n: int) -> list[Proposal]:
        ranked = [o for o in view.ranked() if view.score(o) != float("inf")]
        taken: set[str] = set()
        out: list[Proposal] = []
        if not ranked:  # nothing to climb from yet: earlier runs' best, then random points
            for params in view.warm_start:
                if len(out) < n and self.take_fresh(view, params, taken):
                    out.append(Proposal(params=dict(params), rationale="warm start from insights"))
            return out + self.fill_random(view, n - len(out), taken)
        for base in ranked[: self.setting("bases")]:
            for params, what in self._neighbours(view, base.params):
                if len(out) >= n:
                    return out
                if self.take_fresh(view, params, taken):
                    out.append(Proposal(params=params, parents=(base.candidate,), rationale=what))
        tries = 0
        while len(out) < n and tries < 50 * n:  # every neighbour known: a local optimum
            tries += 1
            base = self._pick(ranked)
            params = self._kick(view, base.params)
            if self.take_fresh(view, params, taken):
                out.append(Proposal(params=params, parents=(base.candidate,), rationale="perturbation of a local optimum"))
        return out + self.fill_random(view, n - len(out), taken)

    def _neighbours(self, view: RunView, params: dict[str, Any]):
        """One parameter changed: the adjacent values of every parameter first (shuffled),
        then every other value of one parameter (shuffled)."""
        adjacent, far = [], []
        for p in view.space.parameters:
            values = list(p.values)
            if params.get(p.name) not in values:
                continue
            i = values.index(params[p.name])
            for j, v in enumerate(values):
                if j != i:
                    (adjacent if abs(j - i) == 1 else far).append((p.name, v))
        for group, what in ((adjacent, "adjacent value of one parameter"), (far, "another value of one parameter")):
            for k in self.rng.permutation(len(group)):
                name, value = group[int(k)]
                yield {**params, name: value}, f"{what} ({name}={value!r})"

    def _pick(self, ranked: list[Observation]) -> Observation:
        """A base for a perturbation: one of the best few, the better ones more often."""
        top = ranked[: self.setting("bases")]
        weights = [1.0 / (i + 1) for i in range(len(top))]
        total = sum(weights)
        return top[int(self.rng.choice(len(top), p=[w / total for w in weights]))]

    def _kick(self, view: RunView, params: dict[str, Any]) -> dict[str, Any]:
        movable = [p for p in view.space.parameters if len(p.values) > 1]
        if not movable:
            return dict(params)
        k = min(self.setting("kick"), len(movable))
        out = dict(params)
        for idx in self.rng.choice(len(movable), size=k, replace=False):
            p = movable[int(idx)]
            others = [v for v in p.values if v != out.get(p.name)]
            out[p.name] = others[int(self.rng.integers(len(others)))]
        return out
