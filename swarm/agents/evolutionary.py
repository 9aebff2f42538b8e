"""Evolutionary search over parameters: tournament selection, uniform crossover, neighbour
mutation, elitism (after Kernel Tuner's ``genetic_algorithm`` strategy and Optuna's GA
samplers, but steady-state: every proposal is a new child, evaluated asynchronously).
"""

from __future__ import annotations

from typing import Any

from swarm.agents.base import Agent, Observation, Proposal, RunView, at_least, fraction


class EvolutionaryAgent(Agent):
    """Children of the best evaluated candidates.

    Settings:
        population: size of the parent pool taken from the best observations (default 16).
        elite: best observations always kept in the pool (default 2).
        tournament: tournament size for parent selection (default 3).
        crossover_rate: probability of uniform crossover between two parents (default 0.7).
        mutation_rate: per-parameter probability of a mutation (default 0.3).
        jump_rate: share of mutations that draw the parameter's value uniformly from all its
            values (the current one included) instead of stepping to a neighbour (0.2).
    """

    kind = "evolutionary"
    NUMERIC_SETTINGS = (
        ("population", 16, int, *at_least(1)), ("elite", 2, int, *at_least(0)), ("tournament", 3, int, *at_least(1)),
        ("crossover_rate", 0.7, float, *fraction()), ("mutation_rate", 0.3, float, *fraction()),
        ("jump_rate", 0.2, float, *fraction()),
    )

    def propose(self, view: RunView, n: int) -> list[Proposal]:
        pool_size, elite = self.setting("population"), self.setting("elite")
        crossover_rate = self.setting("crossover_rate")
        ranked = [o for o in view.ranked() if view.score(o) != float("inf")]
        taken: set[str] = set()
        out: list[Proposal] = []
        # Seed from earlier runs' best configurations before there is a population.
        if len(ranked) < 2:
            for params in view.warm_start:
                if len(out) >= n:
                    break
                key = view.space.point_key(params) if view.space.contains(params) else None
                if key and key not in view.seen and key not in taken:
                    taken.add(key)
                    out.append(Proposal(params=dict(params), rationale="warm start: best of earlier runs"))
            return out + self.fill_random(view, n - len(out), taken)
        pool = ranked[: max(pool_size, elite)]
        tries = 0
        while len(out) < n and tries < 50 * n:
            tries += 1
            a = self._tournament(pool, elite)
            b = self._tournament(pool, elite)
            child = self._crossover(a.params, b.params) if self.rng.random() < crossover_rate else dict(a.params)
            child = self._mutate(view, child)
            if not view.space.contains(child):
                continue
            key = view.space.point_key(child)
            if key in view.seen or key in taken:
                continue
            taken.add(key)
            parents = (a.candidate,) if a is b else (a.candidate, b.candidate)
            out.append(Proposal(params=child, parents=parents))
        return out + self.fill_random(view, n - len(out), taken)

    def _tournament(self, pool: list[Observation], elite: int) -> Observation:
        k = min(self.setting("tournament"), len(pool))
        picks = self.rng.choice(len(pool), size=k, replace=False)
        return pool[int(min(picks))]  # pool is sorted best first

    def _crossover(self, a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
        return {k: (a[k] if self.rng.random() < 0.5 else b[k]) for k in a}

    def _mutate(self, view: RunView, params: dict[str, Any]) -> dict[str, Any]:
        rate = self.setting("mutation_rate")
        jump = self.setting("jump_rate")
        out = dict(params)
        for p in view.space.parameters:
            if len(p.values) < 2 or self.rng.random() >= rate:
                continue
            values = list(p.values)
            i = values.index(out[p.name]) if out[p.name] in values else 0
            if self.rng.random() < jump:
                j = int(self.rng.integers(len(values)))
            else:
                j = min(max(i + (1 if self.rng.random() < 0.5 else -1), 0), len(values) - 1)
            out[p.name] = values[j]
        return out
