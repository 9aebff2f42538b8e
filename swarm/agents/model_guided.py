"""Model-guided search through Optuna's ask/tell API.

TPE (Bergstra et al., "Algorithms for Hyper-Parameter Optimization", NeurIPS 2011) for one
objective, NSGA-II (Deb et al., IEEE TEC 6(2), 2002) for several: Optuna's samplers, not
re-implementations. The study lives in memory. Within a process it is kept between
generations of a run and fed incrementally (proposals are told their evaluations); in a fresh
process it is rebuilt from the run's evidence with ``add_trials(create_trial(...))``, so the
agent is restartable.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import warnings
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

from swarm.agents.base import Agent, Observation, Proposal, RunView, at_least

optuna.logging.set_verbosity(optuna.logging.WARNING)
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
log = logging.getLogger(__name__)

_CACHE_SIZE = 32
_cache: OrderedDict[tuple, _Session] = OrderedDict()
_lock = threading.Lock()


@dataclass
class _Session:
    """A study kept between generations of one run in this process."""

    study: optuna.Study
    added: set[int] = field(default_factory=set)  # candidate ids told or added
    pending: dict[str, tuple[int, int]] = field(default_factory=dict)  # point key -> (trial, generation)


class OptunaAgent(Agent):
    """Proposals from an Optuna sampler fed with every evaluation of the goal.

    Settings:
        sampler: ``"tpe"``, ``"nsga2"`` or ``"auto"`` (TPE for one objective, NSGA-II for more).
        n_startup_trials: random trials before TPE models (default 10).
        failure_penalty: failed or infeasible candidates are told as this multiple of the worst
            feasible value, so the model learns to avoid failing regions (default 2.0).
    """

    kind = "optuna"
    OTHER_SETTINGS = (("sampler", lambda v: v in ("tpe", "nsga2", "auto"), "'tpe', 'nsga2' or 'auto'"),)
    NUMERIC_SETTINGS = (("n_startup_trials", 10, int, *at_least(0)),
                        ("failure_penalty", 2.0, float, lambda v: math.isfinite(v) and v > 0, "finite and > 0"))

    def propose(self, view: RunView, n: int) -> list[Proposal]:
        objectives = self._objectives(view)
        dists = {p.name: CategoricalDistribution(list(p.values)) for p in view.space.parameters}
        session = self._session(view, objectives, dists, n)
        self._feed(session, view, objectives, dists)
        study = session.study
        if not study.get_trials(deepcopy=False):
            for params in view.warm_start:
                if view.space.contains(params):
                    study.enqueue_trial(dict(params), skip_if_exists=True)
        taken: set[str] = set()
        out: list[Proposal] = []
        tries = 0
        # TPE concentrates on the best region and re-proposes evaluated points there; after a
        # few rejections the rest of the batch is filled at random (exploration).
        while len(out) < n and tries < 2 * n:
            tries += 1
            trial = study.ask(dists)
            params = {k: trial.params[k] for k in view.space.names}
            key = view.space.point_key(params)
            if key in view.seen or key in taken or not view.space.contains(params):
                study.tell(trial, state=TrialState.FAIL)
                continue
            taken.add(key)  # left RUNNING: the constant liar keeps the batch diverse
            session.pending[key] = (trial.number, view.generation)
            out.append(Proposal(params=params))
        return out + self.fill_random(view, n - len(out), taken)

    def _objectives(self, view: RunView) -> list[dict[str, str]]:
        name = self.settings.get("sampler") or "auto"
        multi = name == "nsga2" or (name == "auto" and len(view.objectives) > 1)
        return list(view.objectives) if multi else list(view.objectives[:1])

    def _session(self, view: RunView, objectives: list[dict], dists: dict, n: int) -> _Session:
        signature = (view.run, json.dumps(self.settings, sort_keys=True, default=str),
                     json.dumps(objectives), json.dumps({k: d.choices for k, d in dists.items()}, default=str))
        with _lock:
            if view.run and signature in _cache:
                _cache.move_to_end(signature)
                return _cache[signature]
        seed = int(self.rng.integers(2**31))
        if len(objectives) > 1:
            sampler = optuna.samplers.NSGAIISampler(seed=seed, population_size=max(8, n))
        else:
            sampler = optuna.samplers.TPESampler(
                seed=seed,
                n_startup_trials=self.setting("n_startup_trials"),
                multivariate=True,  # every parameter is always present: no need for group=True
                constant_liar=True,
            )
        session = _Session(optuna.create_study(directions=[o["direction"] for o in objectives], sampler=sampler))
        if view.run:
            with _lock:
                _cache[signature] = session
                while len(_cache) > _CACHE_SIZE:
                    _cache.popitem(last=False)
        return session

    def _feed(self, session: _Session, view: RunView, objectives: list[dict], dists: dict) -> None:
        """Tell pending trials their evaluations and add every other new observation."""
        names = set(view.space.names)
        rows = [o for o in view.history if o.candidate not in session.added and set(o.params) == names
                and all(o.params[k] in dists[k].choices for k in names)]
        worst = self._worst(view, objectives)
        new_trials = []
        for r in rows:
            values = self._values(r, objectives, worst)
            key = view.space.point_key(r.params)
            if key in session.pending:
                number, _ = session.pending.pop(key)
                if values is None:
                    session.study.tell(number, state=TrialState.FAIL)
                else:
                    session.study.tell(number, values)
            elif values is None:
                new_trials.append(create_trial(params=r.params, distributions=dists, state=TrialState.FAIL))
            else:
                new_trials.append(create_trial(params=r.params, distributions=dists, values=values))
            session.added.add(r.candidate)
        if new_trials:
            session.study.add_trials(new_trials)
        # Proposals the orchestrator dropped never come back: stop them lying after a generation.
        for key, (number, generation) in list(session.pending.items()):
            if generation < view.generation - 1:
                session.study.tell(number, state=TrialState.FAIL)
                del session.pending[key]

    def _worst(self, view: RunView, objectives: list[dict]) -> list[float | None]:
        penalty = self.setting("failure_penalty")
        worst: list[float | None] = []
        for o in objectives:
            vals = [r.metrics[o["metric"]] for r in view.history if r.feasible and _finite(r.metrics.get(o["metric"]))]
            if not vals:
                worst.append(None)
            elif o["direction"] == "minimize":
                w = max(vals)
                worst.append(w * penalty if w > 0 else w + abs(w) * penalty + 1)
            else:
                w = min(vals)
                worst.append(w / penalty if w > 0 else w - abs(w) * penalty - 1)
        return worst

    @staticmethod
    def _values(r: Observation, objectives: list[dict], worst: list[float | None]) -> list[float] | None:
        values = []
        for o, bad in zip(objectives, worst):
            v = r.metrics.get(o["metric"])
            values.append(v if r.feasible and _finite(v) else bad)
        return None if any(v is None for v in values) else values


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)
