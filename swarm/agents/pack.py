"""Leader-guided recombination with tabu and neighbour shaking (a grey-wolf pack).

After Mirjalili, Mirjalili & Lewis, "Grey Wolf Optimizer" (Advances in Engineering Software 69,
2014), in the discrete form of Kernel Tuner's ``adaptive_tabu_greywolf`` (Willemsen et al.,
"Automated Algorithm Design for Auto-Tuning Optimizers", arXiv 2510.17899): the three best
configurations lead; each child takes every parameter from one of the leaders or from a pack
member, is shaken to a neighbour (one parameter one value step away, or a random value of one
parameter) with a probability that grows while the best has not improved, and is moved to a
Hamming neighbour when it was already evaluated (the run's evaluations are the tabu list).
Compared with :mod:`swarm.agents.evolutionary` it exploits harder: parents are only the very
best, which on tuning landscapes (fast configurations next to fast ones) reaches a good region
in few evaluations.
"""

from __future__ import annotations

from typing import Any

from swarm.agents.base import Agent, Proposal, RunView, at_least, fraction


class PackAgent(Agent):
    """Children recombined from the three best evaluations and a pack member, then shaken.

    Settings:
        pack: pack members, the best evaluations after the leaders (default 8).
        shake_rate: probability of shaking a child while the best improves (default 0.2); it
            grows with the evaluations since the last improvement, up to 0.5.
        jump_rate: share of shakes that draw one parameter's value uniformly instead of
            stepping to an adjacent value (default 0.15).
        stagnation: evaluations without improvement that double the shake rate (default 80).
    """

    kind = "pack"
    NUMERIC_SETTINGS = (
        ("pack", 8, int, *at_least(1)), ("shake_rate", 0.2, float, *fraction()),
        ("jump_rate", 0.15, float, *fraction()), ("stagnation", 80, int, *at_least(1)),
    )

    def propose(self, view: RunView, n: int) -> list[Proposal]:
        ranked = [o for o in view.ranked() if view.score(o) != float("inf")]
        taken: set[str] = set()
        out: list[Proposal] = []
        if len(ranked) < 3:  # no pack yet: earlier runs' best, then random points
            for params in view.warm_start:
                if len(out) < n and self.take_fresh(view, params, taken):
                    out.append(Proposal(params=dict(params), rationale="warm start: best of earlier runs"))
            return out + self.fill_random(view, n - len(out), taken)
        leaders = ranked[:3]
        members = ranked[: 3 + self.setting("pack")]
        shake = min(0.5, self.setting("shake_rate") * (1 + _stagnation(view) / self.setting("stagnation")))
        tries = 0
        while len(out) < n and tries < 50 * n:
            tries += 1
            member = members[int(self.rng.integers(len(members)))]
            sources = [o.params for o in leaders] + [member.params]
            child = {name: sources[int(self.rng.integers(4))][name] for name in view.space.names}
            if self.rng.random() < shake:
                child = self._shake(view, child)
            if not self.take_fresh(view, child, taken):  # evaluated (tabu) or outside the space
                child = self._hamming_neighbour(view, child, taken)
                if child is None:
                    continue
            parents = tuple(dict.fromkeys(o.candidate for o in (*leaders, member)))
            out.append(Proposal(params=child, parents=parents, rationale="recombination of the three best"))
        return out + self.fill_random(view, n - len(out), taken)

    def _shake(self, view: RunView, params: dict[str, Any]) -> dict[str, Any]:
        movable = [p for p in view.space.parameters if len(p.values) > 1]
        if not movable:
            return params
        p = movable[int(self.rng.integers(len(movable)))]
        values = list(p.values)
        i = values.index(params[p.name]) if params[p.name] in values else 0
        if self.rng.random() < self.setting("jump_rate"):
            j = int(self.rng.integers(len(values)))
        else:
            j = min(max(i + (1 if self.rng.random() < 0.5 else -1), 0), len(values) - 1)
        return {**params, p.name: values[j]}

    def _hamming_neighbour(self, view: RunView, params: dict[str, Any], taken: set[str]) -> dict[str, Any] | None:
        """A random fresh point of the space with one parameter of ``params`` changed, or None."""
        options = [(p.name, v) for p in view.space.parameters for v in p.values if v != params.get(p.name)]
        for k in self.rng.permutation(len(options)):
            name, value = options[int(k)]
            child = {**params, name: value}
            if self.take_fresh(view, child, taken):
                return child
        return None


def _stagnation(view: RunView) -> int:
    """Evaluations since the best score last improved (0 when the latest one improved it)."""
    best, since = float("inf"), 0
    for o in view.history:
        s = view.score(o)
        if s < best:
            best, since = s, 0
        else:
            since += 1
    return since

