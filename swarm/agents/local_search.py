"""Iterated local search around the best candidates.

After Kernel Tuner's ``greedy_ils`` strategy and Lourenço, Martin & Stützle, "Iterated Local
Search" (Handbook of Metaheuristics, 2003): explore the unseen neighbours of the incumbent
(one parameter changed), best incumbent first; when every neighbour of the few best is known
(a local optimum), perturb one of them in several parameters and climb from there. The
first base after the incumbent (and its niches, below) is the best point of another basin
(half the parameters or more away from the incumbent), not its runner-up next door: a form of
niching (Mahfoud, "Niching Methods for Genetic Algorithms", 1995), so once the incumbent's
neighbours are known the climb moves to another basin instead of going on in the same one.
Once the incumbent has stood for ``niche_after`` evaluations, the climb also starts from the
best point of each switch's other value (a parameter with two values, such as ``use_shmem``):
a switch often selects another code path with its own landscape, whose best point may be
several parameters from the best point of the other path (restart on stagnation, as iterated
local search restarts when the search stalls; the niches are the switch's two halves of the
space). Tuning landscapes are rough but strongly local: the fastest configurations sit next to
other fast ones, which a model-guided or evolutionary agent samples only by chance.

Once a few evaluations exist, the unseen neighbours of a base are tried in the order a small
random-forest surrogate of the evaluations predicts (best predicted first; :class:`~swarm.agents.
surrogate.ForestAgent`'s model) instead of a random one, so the climb spends its evaluations
on the neighbours the evidence favours (``docs/benchmarks.md`` gives the measured effect).
Where other goals' evidence is at hand that forest transfers from it as the forest agent does
(:mod:`swarm.agents.transfer`).

In the run's endgame (``RunView.endgame``: its last evaluations, which go to the agents that
climb) the unseen neighbours of the ``endgame_bases`` best points are ranked together by the
forest, best predicted first, before the climb goes on as above: no later evaluation will build
on what a step teaches, so each goes where the model expects the best time, whichever of the
best points it neighbours (``docs/benchmarks.md`` gives the measured effect). Once those are
taken it climbs on from its usual bases (niches included); with no neighbour left to climb it
proposes fewer than asked, not perturbations or random points, so that the other agents fill
those slots.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from swarm.agents.base import Agent, Observation, Proposal, RunView, at_least, between
from swarm.agents.space_index import index_of
from swarm.agents.surrogate import ForestAgent

#: Most points of the second ring ranked per base (a random sample beyond it).
_RING_LIMIT = 2000


class LocalSearchAgent(Agent):
    """Neighbours of the best evaluated candidates, then perturbations of them.

    Settings:
        bases: how many of the best candidates are climbed from, best first, besides the
            niches (default 3); points outside the constraints rank after every feasible one.
        kick: parameters changed by a perturbation at a local optimum (default 3).
        model_after: evaluations before neighbours are ordered by the forest's prediction
            (default 8); 0 keeps the shuffled order throughout.
        model_trees: trees of that forest (default 8).
        radius: with the model, neighbours differ in up to this many parameters (1 or 2;
            default 1). 2 helps where most single changes are invalid (tile sizes that must
            divide each other) and costs on rough landscapes (``docs/benchmarks.md``).
        spread: the first base after the incumbent and its niches is the best point that
            differs from the incumbent in at least this share of the movable parameters
            (default 0.5; 0: the runner-up, as the others). Next to the incumbent sit its
            runners-up, so once its neighbours are known the climb moves to another basin
            instead of going on in the same one (``docs/benchmarks.md``).
        niche_after: evaluations without a new incumbent after which the climb also starts
            from the best point of each switch's other value, when it is two parameters or more
            from the incumbent (default 48; 0: never). Niche bases are climbed before the
            ``spread`` base and the runners-up, so they take proposals from them: a run held in
            one half of a switch gets out, and a run that needed those proposals waits
            (``docs/benchmarks.md``).
        endgame_bases: in the run's endgame, the best points whose one-parameter neighbours
            are ranked together by the forest (default 5).
    """

    kind = "local"
    reads_related = True  # its neighbours are ranked by a forest that transfers
    climbs = True
    NUMERIC_SETTINGS = (("bases", 3, int, *at_least(1)), ("kick", 3, int, *at_least(1)),
                        ("model_after", 8, int, *at_least(0)), ("model_trees", 8, int, *between(1, 1000)),
                        ("radius", 1, int, *between(1, 2)), ("spread", 0.5, float, *between(0.0, 1.0)),
                        ("niche_after", 48, int, *at_least(0)), ("endgame_bases", 5, int, *at_least(1)))

    def propose(self, view: RunView, n: int) -> list[Proposal]:
        ranked = [o for o in view.ranked() if view.score(o) != float("inf")]
        taken: set[str] = set()
        out: list[Proposal] = []
        if not ranked:  # nothing to climb from yet: earlier runs' best, then random points
            for params in view.warm_start:
                if len(out) < n and self.take_fresh(view, params, taken):
                    out.append(Proposal(params=dict(params), rationale="warm start: best of earlier runs"))
            return out if view.endgame else out + self.fill_random(view, n - len(out), taken)
        predict = self._model(view)
        if view.endgame and predict is not None:
            out = self._endgame(view, ranked, n, taken, predict)
            if len(out) >= n:
                return out
        niches = self._niches(view, ranked)
        notes = {o.candidate: label for o, label in niches}
        for base in self._bases(view, ranked, [o for o, _ in niches]):
            moves = self._neighbours(view, base.params)
            if predict is not None:
                moves = self._by_prediction(view, [*moves, *self._second_ring(view, base.params)], taken, predict)
            for params, what in moves:
                if len(out) >= n:
                    return out
                if self.take_fresh(view, params, taken):
                    if base.candidate in notes:
                        what = f"{what}; climbing in the niche {notes[base.candidate]}"
                    out.append(Proposal(params=params, parents=(base.candidate,), rationale=what))
        if view.endgame:  # no climb left: the slots go to the other agents, not to kicks or random points
            return out
        tries = 0
        while len(out) < n and tries < 50 * n:  # every neighbour known: a local optimum
            tries += 1
            base = self._pick(ranked)
            params = self._kick(view, base.params)
            if self.take_fresh(view, params, taken):
                out.append(Proposal(params=params, parents=(base.candidate,), rationale="perturbation of a local optimum"))
        return out + self.fill_random(view, n - len(out), taken)

    def _endgame(self, view: RunView, ranked: list[Observation], n: int, taken: set[str], predict) -> list[Proposal]:
        """Up to ``n`` unseen one-parameter neighbours of the ``endgame_bases`` best points of
        the run's space (a direction may have narrowed it since), ranked together by the
        forest's prediction, best first (``taken`` updated)."""
        moves, parent = [], {}
        bases = [o for o in ranked if view.space.contains(o.params)][: self.setting("endgame_bases")]
        for place, base in enumerate(bases, start=1):
            for params, what in self._neighbours(view, base.params):
                key = self.fresh_key(view, params, taken)
                if key is not None and key not in parent:
                    parent[key] = (base.candidate, place)
                    moves.append((params, what))
        out: list[Proposal] = []
        for params, what in self._by_prediction(view, moves, taken, predict):
            if len(out) >= n:
                break
            candidate, place = parent[view.space.point_key(params)]
            if self.take_fresh(view, params, taken):
                out.append(Proposal(params=params, parents=(candidate,),
                                    rationale=f"endgame: {what}; a neighbour of the run's best point number {place}"))
        return out

    def _bases(self, view: RunView, ranked: list[Observation], niches: list[Observation]) -> list[Observation]:
        """The points climbed from, in order: the incumbent; the ``niches`` (:meth:`_niches`);
        with ``spread`` > 0, the best point that differs from the incumbent in at least that
        share of the movable parameters (rounded up; another basin), when there is one; then
        the next best, ``bases`` points besides the niches."""
        k = self.setting("bases")
        spread = self.setting("spread")
        chosen = {o.candidate for o in niches}
        best, others = ranked[0], [o for o in ranked[1:] if o.candidate not in chosen]
        if not spread or k < 2:
            return [best, *niches, *others[:k - 1]]
        movable = [p.name for p in view.space.parameters if len(p.values) > 1]
        need = max(1, int(np.ceil(spread * len(movable))))
        far = next((o for o in others if _changed(o, best, movable) >= need), None)
        rest = [o for o in others if o is not far]
        return [best, *niches, *([far] if far is not None else []), *rest][:k + len(niches)]

    def _niches(self, view: RunView, ranked: list[Observation]) -> list[tuple[Observation, str]]:
        """Once the incumbent ``ranked[0]`` is ``niche_after`` evaluations old (evaluations of
        the goal since it was evaluated): per parameter with two values, the best point with
        the other value (a feasible one when the incumbent is feasible), as
        ``(point, "name=value")``. A switch whose best such point is one of the incumbent's
        neighbours (one parameter away) gets no niche: the incumbent's own climb covers it. A
        point that is the best of two switches is listed once, under the first. ``[]`` when
        ``niche_after`` is 0 or the incumbent is younger."""
        after = self.setting("niche_after")
        best = ranked[0]
        if not after:
            return []
        found = next(i for i, o in enumerate(view.history) if o.candidate == best.candidate)
        if len(view.history) - 1 - found < after:
            return []
        pool = [o for o in ranked[1:] if view.is_feasible(o)] if view.is_feasible(best) else ranked[1:]
        out: list[tuple[Observation, str]] = []
        for p in view.space.parameters:
            if len(p.values) != 2:
                continue
            other = next((o for o in pool if o.params.get(p.name) != best.params.get(p.name)), None)
            if (other is not None and all(other is not o for o, _ in out)
                    and _changed(other, best, best.params) >= 2):
                out.append((other, f"{p.name}={other.params.get(p.name)!r}"))
        return out

    def _model(self, view: RunView):
        """The forest's predictor once ``model_after`` evaluations exist (else None)."""
        after = self.setting("model_after")
        if not after or len(view.history) < after:
            return None
        forest = ForestAgent(int(self.rng.integers(2**31)), trees=self.setting("model_trees"))
        return forest.predictor(view)

    def _second_ring(self, view: RunView, params: dict[str, Any]):
        """Valid points with exactly two parameters changed (``radius`` 2; none at 1), as
        ``(params, what)``: in a constrained space (a GEMM's tile sizes must divide each other)
        most single changes are invalid, and the valid neighbours run out after a few steps."""
        if self.setting("radius") < 2:
            return []
        index = index_of(view.space)
        row = index.row(params) if index is not None else None
        if row is None:
            return []
        rows = index.within(row, 2)
        if len(rows) > _RING_LIMIT:
            rows = self.rng.choice(rows, size=_RING_LIMIT, replace=False)
        ring = [index.point(int(r)) for r in rows]
        return [(p, "two parameters changed") for p in ring
                if sum(p[k] != params[k] for k in p) == 2]

    @staticmethod
    def _by_prediction(view: RunView, moves: list, taken: set[str], predict) -> list:
        """The unseen valid ``moves`` (``(params, what)``), best predicted first."""
        fresh = [(p, what) for p, what in moves if Agent.fresh_key(view, p, taken) is not None]
        if not fresh:
            return []
        mean, _ = predict([p for p, _ in fresh])
        order = np.argsort(mean, kind="stable")  # ties keep the shuffled order
        return [(fresh[int(i)][0], f"{fresh[int(i)][1]}; the forest ranks it {r + 1} of {len(fresh)}")
                for r, i in enumerate(order)]

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


def _changed(a: Observation, b: Observation, names) -> int:
    """How many of the parameters ``names`` differ between ``a`` and ``b`` (Hamming distance)."""
    return sum(a.params.get(m) != b.params.get(m) for m in names)
