"""Model-guided search through Optuna's ask/tell API.

TPE (Bergstra et al., "Algorithms for Hyper-Parameter Optimization", NeurIPS 2011) for one
objective, NSGA-II (Deb et al., IEEE TEC 6(2), 2002) for several: Optuna's samplers, not
re-implementations. The study lives in memory and is rebuilt from the run's evidence at every
generation with ``add_trials(create_trial(...))``, so the agent is restartable.
"""

from __future__ import annotations

import logging
import math
import warnings
from typing import Any

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

from swarm.agents.base import Agent, Proposal, RunView

optuna.logging.set_verbosity(optuna.logging.WARNING)
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
log = logging.getLogger(__name__)


class OptunaAgent(Agent):
    """Proposals from an Optuna sampler seeded with every evaluation of the goal.

    Settings:
        sampler: ``"tpe"``, ``"nsga2"`` or ``"auto"`` (TPE for one objective, NSGA-II for more).
        n_startup_trials: random trials before TPE models (default 10).
        failure_penalty: failed or infeasible candidates are told as this multiple of the worst
            feasible value, so the model learns to avoid failing regions (default 2.0).
    """

    kind = "optuna"

    def propose(self, view: RunView, n: int) -> list[Proposal]:
        objectives = list(view.objectives)
        sampler_name = self.settings.get("sampler", "auto")
        multi = sampler_name == "nsga2" or (sampler_name == "auto" and len(objectives) > 1)
        if not multi:
            objectives = objectives[:1]
        seed = int(self.rng.integers(2**31))
        if multi:
            sampler = optuna.samplers.NSGAIISampler(seed=seed, population_size=max(4, n))
        else:
            sampler = optuna.samplers.TPESampler(
                seed=seed,
                n_startup_trials=int(self.settings.get("n_startup_trials", 10)),
                multivariate=True,
                group=True,
                constant_liar=True,
            )
        study = optuna.create_study(directions=[o["direction"] for o in objectives], sampler=sampler)
        dists = {p.name: CategoricalDistribution(list(p.values)) for p in view.space.parameters}
        study.add_trials(self._trials(view, objectives, dists))
        if not study.trials:
            for params in view.warm_start:
                if view.space.contains(params):
                    study.enqueue_trial(dict(params), skip_if_exists=True)
        taken: set[str] = set()
        out: list[Proposal] = []
        tries = 0
        # TPE concentrates on the best region and re-proposes evaluated points there; after a
        # few rejections the rest of the batch is filled at random (exploration).
        while len(out) < n and tries < 5 * n:
            tries += 1
            trial = study.ask(dists)
            params = {k: trial.params[k] for k in view.space.names}
            key = view.space.point_key(params)
            if key in view.seen or key in taken or not view.space.contains(params):
                study.tell(trial, state=TrialState.FAIL)
                continue
            taken.add(key)  # left RUNNING: the constant liar keeps the batch diverse
            out.append(Proposal(params=params))
        return out + self.fill_random(view, n - len(out), taken)

    def _trials(self, view: RunView, objectives: list[dict], dists: dict) -> list:
        names = set(view.space.names)
        penalty = float(self.settings.get("failure_penalty", 2.0))
        rows = [o for o in view.history if set(o.params) == names and all(o.params[k] in dists[k].choices for k in names)]
        worst = []
        for o in objectives:
            vals = [r.metrics[o["metric"]] for r in rows if r.feasible and _finite(r.metrics.get(o["metric"]))]
            if not vals:
                worst.append(None)
            elif o["direction"] == "minimize":
                worst.append(max(vals) * penalty if max(vals) > 0 else max(vals) + abs(max(vals)) * penalty + 1)
            else:
                worst.append(min(vals) / penalty if min(vals) > 0 else min(vals) - abs(min(vals)) * penalty - 1)
        trials = []
        for r in rows:
            values = []
            for o, bad in zip(objectives, worst):
                v = r.metrics.get(o["metric"])
                values.append(v if r.feasible and _finite(v) else bad)
            if any(v is None for v in values):
                trials.append(create_trial(params=r.params, distributions=dists, state=TrialState.FAIL))
            else:
                trials.append(create_trial(params=r.params, distributions=dists, values=values))
        return trials


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)
