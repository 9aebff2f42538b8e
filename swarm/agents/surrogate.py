"""Model-based search: a surrogate of the primary objective picks the points to evaluate.

:class:`SurrogateAgent` holds what every surrogate shares: targets (log objective, failures
penalised), the candidate pool and expected improvement (Jones, Schonlau & Welch, J. Global
Optim. 13, 1998). :class:`ForestAgent` is its random-forest model (SMAC's, in a few lines of
sklearn): after Hutter, Hoos & Leyton-Brown, "Sequential Model-Based Optimization for General
Algorithm Configuration" (LION 5, 2011), a random forest fitted to the evaluations predicts
unseen points and the spread over its trees stands for the uncertainty. Unlike TPE, which
models each parameter's density on its own, trees see interactions between parameters
(threads per block = ``block_size_x * block_size_y``), so pairwise products of numeric
parameters are offered to them as features too. The Gaussian-process model is in
:mod:`swarm.agents.gaussian_process`.

Where other goals of the workload hold evaluations of the same parameters (``RunView.related``:
the kernel on another device), the forest is one member of a ranking-weighted ensemble with a
forest of each (:mod:`swarm.agents.transfer`), and it models from the third evaluation
(:data:`RELATED_STARTUP`) instead of after ``startup`` random ones.

Candidates scored per generation: every unseen point of the space when it has at most
``pool`` points, else a random sample of that size, plus every unseen neighbour of the best
evaluation (one or two parameters changed) and of the next two (one parameter changed), and
uniform crossovers of the best eight (what an evolutionary agent would try, screened by the
model).
"""

from __future__ import annotations

import abc
import hashlib
import itertools
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from swarm.agents import transfer
from swarm.agents.base import INFEASIBLE, Agent, Observation, Proposal, RelatedEvidence, RunView, at_least, between, fraction
from swarm.agents.space_index import SpaceIndex, index_of, varying

#: Evaluations before the model is used when other goals' evidence is at hand (``startup``
#: otherwise): the fewest whose ranking can weigh that evidence.
RELATED_STARTUP = 3
#: Fewest evaluations of an other goal that a forest is fitted to.
MIN_RELATED = 10
_RELATED_CACHE = 32  # forests of other goals kept per process
_related_forests: OrderedDict[bytes, list] = OrderedDict()
_lock = threading.Lock()


class SurrogateAgent(Agent):
    """Expected improvement under a surrogate model of the primary objective.

    Subclasses give the model: :meth:`_features` (model inputs of points), :meth:`_model`
    (fitted to the evaluations) and :meth:`_predict` (mean and standard deviation of the log
    objective at points).

    Settings (all surrogates):
        startup: evaluations before the model is used; random points (or earlier runs'
            best) until then (default 10).
        pool: most points scored per generation besides the neighbours (default 2000).
        crossovers: uniform crossovers per pair of the best eight added to the pool (default 4).
        failure_quantile: failed and infeasible points are fitted at the worst feasible
            log-objective plus this multiple of the feasible spread (default 1.0).
    """

    #: Named in the rationale of each proposal ("<model> predicts ...").
    model_name = "surrogate"
    #: The transfer weights of the latest model (:mod:`swarm.agents.transfer`), for rationales.
    transfer_note = ""

    NUMERIC_SETTINGS = (
        ("startup", 10, int, *at_least(0)), ("pool", 2000, int, *between(1, 100_000)),
        ("crossovers", 4, int, *between(0, 100)), ("failure_quantile", 1.0, float, *between(0, 100)),
    )

    def propose(self, view: RunView, n: int) -> list[Proposal]:
        # Other goals' evidence stands in for the random start once it can be judged.
        startup = self.setting("startup")
        if self.reads_related and "startup" not in self.settings and any(
                len(_usable(view, r)) >= MIN_RELATED for r in view.related):
            startup = min(startup, RELATED_STARTUP)
        names = set(view.space.names)
        obs = [o for o in view.history if set(o.params) == names]
        taken: set[str] = set()
        out: list[Proposal] = []
        feasible = [o for o in obs if view.is_feasible(o)]
        if len(obs) < startup or len(feasible) < 2 or not varying(view.space):
            for params in view.warm_start:
                if len(out) < n and view.space.contains(params):
                    key = view.space.point_key(params)
                    if key not in view.seen and key not in taken:
                        taken.add(key)
                        out.append(Proposal(params=dict(params), rationale="warm start: best of earlier runs"))
            return out + self.fill_random(view, n - len(out), taken)
        y = self._targets(view, obs)
        self.transfer_note = ""
        model = self._model(view, obs, self._features(view, _values(view, [o.params for o in obs])), y)
        best = sorted(feasible, key=view.score)[:3]
        index = index_of(view.space)
        if index is not None:  # enumerable space: rows of its value matrix
            rows = self._pool_rows(view, index, best)
            pool_values = index.values[rows]
            point = lambda i: index.point(int(rows[i]))  # noqa: E731
        else:
            pool = self._pool(view, best)
            pool_values = _values(view, pool)
            point = pool.__getitem__
        if not len(pool_values):
            return out
        mu, sigma = self._predict(model, self._features(view, pool_values))
        ei = _expected_improvement(mu, sigma, float(np.min(y)))
        # Back to the objective's units for the rationale: undo the log's shift and the sign.
        shift = _log_shift(np.array([view.score(o) for o in feasible]))
        sign = 1.0 if view.objectives[0]["direction"] == "minimize" else -1.0
        metric = view.objectives[0]["metric"]
        for i in np.argsort(-ei, kind="stable"):
            if len(out) >= n:
                break
            params = point(i)
            key = view.space.point_key(params)
            if key in taken:
                continue
            taken.add(key)
            out.append(Proposal(params=params, rationale=(
                f"{self.model_name} predicts {metric} {sign * (float(np.exp(mu[i])) - shift):.4g} "
                f"(spread x{float(np.exp(sigma[i])):.2f} in log units), expected improvement {ei[i]:.3g} in log units"
                + (f"; {self.transfer_note}" if self.transfer_note else ""))))
        return out + self.fill_random(view, n - len(out), taken)

    # -- model ---------------------------------------------------------------------------

    def predictor(self, view: RunView) -> Callable[[list[dict[str, Any]]], tuple[np.ndarray, np.ndarray]] | None:
        """The model fitted to the run's evaluations (points of the space only), as a function
        of a list of points returning ``(mean, standard deviation)`` of the log objective as
        minimised, ``float64 [len(points)]`` each; None with fewer than two feasible
        evaluations or no parameter that varies. Other agents rank their own candidates with it."""
        names = set(view.space.names)
        obs = [o for o in view.history if set(o.params) == names]
        if sum(1 for o in obs if view.is_feasible(o)) < 2 or not varying(view.space):
            return None
        X = self._features(view, _values(view, [o.params for o in obs]))
        model = self._model(view, obs, X, self._targets(view, obs))
        return lambda points: self._predict(model, self._features(view, _values(view, points)))

    def _targets(self, view: RunView, obs) -> np.ndarray:
        """log of the primary objective as minimised (:meth:`RunView.score`; shifted to start
        at 1 where some values are <= 0, as a maximised objective's negated values are);
        failures and infeasible points at the worst feasible value plus ``failure_quantile``
        times the spread."""
        scores = np.array([view.score(o) for o in obs], dtype=float)
        good = scores < INFEASIBLE
        vals = scores[good]
        # log keeps multiplicative differences (2x slower) comparable across the range.
        logs = np.log(vals + _log_shift(vals))
        worst, best = float(logs.max()), float(logs.min())
        penalty = worst + self.setting("failure_quantile") * max(worst - best, 1e-3)
        y = np.full(len(obs), penalty)
        y[good] = logs
        return y

    @abc.abstractmethod
    def _features(self, view: RunView, base: np.ndarray) -> np.ndarray:
        """Model inputs ``float64 [n, n_features]`` of points given as ``float64 [n, n_varying]``
        (:func:`_values`: the values of the parameters that vary)."""

    @abc.abstractmethod
    def _model(self, view: RunView, obs: list[Observation], X: np.ndarray, y: np.ndarray) -> Any:
        """The model fitted to ``obs`` (history order), whose features are ``X`` and log
        objectives ``y`` (:meth:`_targets`)."""

    @staticmethod
    @abc.abstractmethod
    def _predict(model: Any, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(mean, standard deviation)`` of the log objective at ``X``, each ``float64 [n]``
        (the deviation > 0)."""

    # -- candidates ----------------------------------------------------------------------

    def _pool_rows(self, view: RunView, index: SpaceIndex, best) -> np.ndarray:
        """Rows of :meth:`_pool`'s points in an enumerated space, sorted."""
        size = self.setting("pool")
        seen = index.seen_mask(view.seen)
        unseen = np.flatnonzero(~seen)
        sample = unseen if len(unseen) <= size else self.rng.choice(unseen, size=size, replace=False)
        # The neighbourhoods as array operations on the value matrix (a best point outside
        # the index, e.g. after a narrowing, goes through its dicts), then the crossovers.
        parts = [sample]
        for rank, o in enumerate(best):
            distance, row = (2 if rank == 0 else 1), index.row(o.params)
            if row is None:
                parts.append(_rows(index, _neighbours(view, o.params, distance), sample.dtype))
            else:
                parts.append(index.within(row, distance).astype(sample.dtype))
        parts.append(_rows(index, self._crossovers(view), sample.dtype))
        pool = np.unique(np.concatenate(parts))
        return pool[~seen[pool]]

    def _pool(self, view: RunView, best) -> list[dict[str, Any]]:
        size = self.setting("pool")
        points = view.space.sample(self.rng, size, exclude=view.seen)
        names = view.space.names
        have = {tuple(p[k] for k in names) for p in points}  # cheaper than point keys
        for params in self._around_the_best(view, best):
            t = tuple(params[k] for k in names)
            if t in have:
                continue
            have.add(t)
            if view.space.point_key(params) not in view.seen and view.space.contains(params):
                points.append(params)
        return points

    def _around_the_best(self, view: RunView, best):
        """What a random sample rarely covers: two parameters changed around the best, one
        around the next ones, and uniform crossovers of the best eight."""
        for rank, o in enumerate(best):
            yield from _neighbours(view, o.params, 2 if rank == 0 else 1)
        yield from self._crossovers(view)

    def _crossovers(self, view: RunView):
        """``crossovers`` uniform crossovers of each pair of the best eight evaluations."""
        names = view.space.names
        elite = [o.params for o in sorted((o for o in view.history if set(o.params) == set(names)
                                           and view.is_feasible(o)), key=view.score)[:8]]
        for a, b in itertools.combinations(elite, 2):
            for _ in range(self.setting("crossovers")):
                yield {k: (a[k] if self.rng.random() < 0.5 else b[k]) for k in names}


class ForestAgent(SurrogateAgent):
    """Expected improvement under a random-forest surrogate of the primary objective, in a
    ranking-weighted ensemble with forests of other goals' evaluations where the run has them.

    Settings (besides :class:`SurrogateAgent`'s):
        trees: trees in the forest (default 16; SMAC uses 10). Fitting dominates the agent's
            cost, and 32 trees found no better configurations on the recorded landscapes.
        leaf: minimum samples per leaf (default 3: smoother predictions from few evaluations).
        max_features: share of features tried per split (default 1.0).
        pairs: offer pairwise products of numeric parameters as features (default True).
    """

    kind = "forest"
    model_name = "forest"
    reads_related = True

    NUMERIC_SETTINGS = SurrogateAgent.NUMERIC_SETTINGS + (
        ("trees", 16, int, *between(1, 1000)), ("leaf", 3, int, *at_least(1)),
        ("max_features", 1.0, float, *fraction(open_low=True)),
    )
    OTHER_SETTINGS = (("pairs", lambda v: isinstance(v, bool), "true or false"),)

    def _features(self, view: RunView, base: np.ndarray) -> np.ndarray:
        """Model inputs of points given as ``float64 [n, n_varying]`` (:func:`_values`): the
        parameters that vary, and their pairwise products."""
        if not self.settings.get("pairs", True):
            return base
        pairs = [base[:, i] * base[:, j] for i, j in itertools.combinations(range(base.shape[1]), 2)]
        return np.column_stack([base, *pairs]) if pairs else base

    def _model(self, view: RunView, obs: list[Observation], X: np.ndarray, y: np.ndarray) -> Any:
        trees, counts = self._fit_counted(X, y)  # every generation: a forest is cheap to fit
        if not view.related:
            return trees
        return self._with_related(view, obs, X, y, trees, counts)

    def _with_related(self, view: RunView, obs: list[Observation], X: np.ndarray, y: np.ndarray,
                      trees: list, counts: np.ndarray) -> Any:
        """The run's forest in a ranking-weighted ensemble with a forest of each other goal's
        evaluations (:mod:`swarm.agents.transfer`), judged on the run's latest feasible
        evaluations (the own forest by its out-of-bag predictions); ``trees`` alone when fewer
        than three are feasible."""
        own = [i for i, o in enumerate(obs) if view.is_feasible(o)][-transfer.MAX_POINTS:]
        if len(own) < 3:
            return trees
        Xo, yo = X[own], y[own]
        # A tree that could not split (too few points for its leaves) predicts the mean of its
        # bag, which out of bag ranks the points exactly backwards: it knows nothing, and counts
        # as such (a constant ranks every pair half right).
        split = [k for k, t in enumerate(trees) if t.tree_.node_count > 1]
        if split:
            per_tree = np.stack([trees[k].tree_.predict(np.ascontiguousarray(Xo, dtype=np.float32))[:, 0] for k in split])
            out_of_bag = counts[np.ix_(split, own)] == 0
            seen_by = out_of_bag.sum(axis=0)
            oob = np.where(seen_by > 0, (per_tree * out_of_bag).sum(axis=0) / np.maximum(seen_by, 1),
                           per_tree.mean(axis=0))
        else:
            oob = np.zeros(len(own))
        preds, members = [oob], []
        for related in view.related:
            forest = self._related_forest(view, related)
            if forest is None:
                continue
            at_own, _ = self._predict(forest, Xo)
            scaled = transfer.Scaled.matching(at_own, yo)
            if scaled is not None:
                preds.append(at_own)
                members.append((related.source, forest, scaled))
        if not members:
            return trees
        weights = transfer.ranking_weights(np.stack(preds), yo, self.rng)
        self.transfer_note = f"transfer weights: this run {weights[0]:.2f}, " + ", ".join(
            f"{source} {w:.2f}" for (source, _, _), w in zip(members, weights[1:]))
        kept = [(m, float(w)) for m, w in zip(members, weights[1:]) if w > 0]
        if not kept:
            return trees
        return _Ensemble(trees, tuple(m for m, _ in kept), (float(weights[0]), *(w for _, w in kept)))

    def _related_forest(self, view: RunView, related: RelatedEvidence) -> list | None:
        """A forest of ``related``'s evaluations (log scores, shifted as the run's own targets
        are) with the settings of this agent; kept per process, since an other goal's evidence
        is read once per run. None with fewer than :data:`MIN_RELATED` finite points of the
        space, when every score is the same, or when a score is too far out for its log (a
        glitched value of 1e16 loses the shift's 1 to rounding)."""
        rows = _usable(view, related)
        if len(rows) < MIN_RELATED:
            return None
        points = [p for p, _ in rows]
        scores = np.array([s for _, s in rows], dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            targets = np.log(scores + _log_shift(scores))
        if np.ptp(scores) == 0 or not np.isfinite(targets).all():
            return None
        X = self._features(view, _values(view, points))
        key = hashlib.sha256(repr(X.shape).encode() + X.tobytes() + targets.tobytes()
                             + repr(sorted(self.settings.items())).encode()).digest()
        with _lock:
            if key in _related_forests:
                _related_forests.move_to_end(key)
                return _related_forests[key]
        seeded = ForestAgent(int.from_bytes(key[:4], "little"), **self.settings)
        forest = seeded._fit_counted(X, targets)[0]
        with _lock:
            _related_forests[key] = forest
            while len(_related_forests) > _RELATED_CACHE:
                _related_forests.popitem(last=False)
        return forest

    def _fit(self, X: np.ndarray, y: np.ndarray) -> list:
        """The forest's trees (:meth:`_fit_counted`)."""
        return self._fit_counted(X, y)[0]

    def _fit_counted(self, X: np.ndarray, y: np.ndarray) -> tuple[list, np.ndarray]:
        """The forest: ``trees`` regression trees, each on a bootstrap sample (as counts in
        ``sample_weight``) with ``max_features`` of the features tried per split, exactly
        how ``RandomForestRegressor`` builds its trees, and the counts, ``float64 [trees, n]``
        (0: the point is out of the tree's bag). Built here rather than through it:
        the forest's per-fit estimator cloning and input checks cost as much as the trees
        themselves at these sizes (tens of points, 16 trees, every generation)."""
        import sklearn
        from sklearn.tree import DecisionTreeRegressor

        n_trees = self.setting("trees")
        X32 = np.ascontiguousarray(X, dtype=np.float32)  # what the trees are built on
        y64 = np.ascontiguousarray(y, dtype=np.float64)
        if not (np.isfinite(X32).all() and np.isfinite(y64).all()):  # the forest checked this
            raise ValueError("forest agent: features and targets must be finite (float32 features: |x| < 3.4e38; "
                             "a finite failure_quantile)")
        n = len(y64)
        leaf, max_features = self.setting("leaf"), self.setting("max_features")
        trees, bags = [], []
        # The settings were checked once (_check_settings); sklearn's per-fit parameter
        # validation is a fifth of a small tree's fit.
        with sklearn.config_context(skip_parameter_validation=True):
            for _ in range(n_trees):
                tree = DecisionTreeRegressor(min_samples_leaf=leaf, max_features=max_features,
                                             random_state=int(self.rng.integers(2**31)))
                counts = np.bincount(self.rng.integers(0, n, n), minlength=n).astype(np.float64)
                trees.append(tree.fit(X32, y64, sample_weight=counts, check_input=False))
                bags.append(counts)
        return trees, np.stack(bags)

    @staticmethod
    def _predict(model: Any, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if isinstance(model, _Ensemble):
            means, stds = [], []
            for trees, scaled in ((model.trees, None), *((f, sc) for _, f, sc in model.members)):
                mu, sd = ForestAgent._predict(trees, X)
                means.append(mu if scaled is None else scaled.offset + scaled.slope * mu)
                stds.append(sd if scaled is None else scaled.slope * sd)
            return transfer.combine(means, stds, np.array(model.weights))
        trees = model
        # Each tree's own predictions (their spread is the uncertainty), through the fitted
        # ``tree_`` directly: the estimators' input checks cost 4x the prediction itself.
        X32 = np.ascontiguousarray(X, dtype=np.float32)  # the dtype trees are fitted in
        per_tree = np.stack([t.tree_.predict(X32)[:, 0] for t in trees])
        return per_tree.mean(axis=0), per_tree.std(axis=0) + 1e-9


def _usable(view: RunView, related: RelatedEvidence) -> list[tuple[dict[str, Any], float]]:
    """``related``'s points of the run's space with finite scores, as ``(params, score)``."""
    return [(p, float(s)) for p, s in zip(related.points, related.scores)
            if np.isfinite(s) and view.space.contains(p)]


@dataclass(frozen=True)
class _Ensemble:
    """The run's forest with other goals' forests (``(source, trees, scaled)``) and the
    weights of all of them, the run's first (:func:`swarm.agents.transfer.ranking_weights`)."""

    trees: list
    members: tuple[tuple[str, list, transfer.Scaled], ...]
    weights: tuple[float, ...]


def _values(view: RunView, points: list[dict[str, Any]]) -> np.ndarray:
    """``float64 [len(points), n_varying]``: the values of the parameters that take more than
    one value (:func:`swarm.agents.space_index.varying`), as in ``SpaceIndex.values``."""
    names = [view.space.names[i] for i in varying(view.space)]
    return np.array([[float(pt[k]) for k in names] for pt in points], dtype=float).reshape(len(points), len(names))


def _rows(index: SpaceIndex, points, dtype) -> np.ndarray:
    """Rows of the valid ``points`` in ``index`` (invalid ones are skipped)."""
    return np.array([r for r in map(index.row, points) if r is not None], dtype=dtype)


def _neighbours(view: RunView, params: dict[str, Any], distance: int):
    """Points with one, and up to ``distance``, parameters changed."""
    movable = [p for p in view.space.parameters if len(p.values) > 1]
    for d in range(1, distance + 1):
        for group in itertools.combinations(movable, d):
            choices = [[v for v in p.values if v != params.get(p.name)] for p in group]
            for values in itertools.product(*choices):
                yield {**params, **{p.name: v for p, v in zip(group, values)}}


def _log_shift(scores: np.ndarray) -> float:
    """What :meth:`SurrogateAgent._targets` adds to feasible scores before the log: 0 when all
    are positive, else ``1 - min``."""
    return 0.0 if np.all(scores > 0) else float(1.0 - scores.min())


def _expected_improvement(mu: np.ndarray, sigma: np.ndarray, best: float) -> np.ndarray:
    """EI for minimisation: ``(best - mu) Phi(z) + sigma phi(z)``, ``z = (best - mu) / sigma``."""
    from scipy.stats import norm

    z = (best - mu) / sigma
    return (best - mu) * norm.cdf(z) + sigma * norm.pdf(z)
