"""Transfer between goals: a ranking-weighted ensemble of the run's model and models of other goals.

After Feurer, Letham & Bakshy, "Scalable Meta-Learning for Bayesian Optimization using
Ranking-Weighted Gaussian Process Ensembles" (AutoML workshop, ICML 2018; RGPE): a model fitted
to each other goal's evaluations (the same kernel on another device) and the run's own model are
combined with weights that follow how well each ranks the run's own evaluations. Per bootstrap
resample of those evaluations, the model with the fewest misranked pairs gets the sample (ties
share it); a model's weight is its share of the samples. The run's own model is judged on
out-of-bag predictions, so it is not favoured for having seen the points. A device whose
landscape ranks configurations as this one does steers the proposals from the first evaluations;
one that ranks them otherwise (a GPU of another vendor) loses its weight as the run's own
evaluations show it (``docs/benchmarks.md`` measures both cases). RGPE's guard against weight dilution holds too: an other goal whose median loss
is above the 95th percentile of the own model's gets no weight, and so does one that ranks the
run's evaluations no better than chance.

Units: predictions are the log objective as minimised (:meth:`SurrogateAgent._targets`); an
other goal's predictions are mapped onto the run's scale by matching their mean and spread at
the run's own evaluations.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Bootstrap resamples of the run's evaluations behind the weights (RGPE uses 1000 with GPs;
#: the weights of a few models settle well before that).
SAMPLES = 128
#: Most recent own evaluations the ranking losses are computed on (pairs grow as n^2).
MAX_POINTS = 200


def discordance(pred: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``float64 [n, n]``: 1 where the pair ``(i, j)`` is ranked one way by ``pred`` and the
    other way by ``y``, 0.5 where ``pred`` ties a pair that ``y`` orders (half right, as a
    guess), else 0 (a pair tied in ``y`` is no pair)."""
    above, above_y = np.greater.outer(pred, pred), np.greater.outer(y, y)
    ordered_y = above_y | above_y.T
    tied = ~(above | above.T) & ordered_y
    return ((above & above_y.T) | (above.T & above_y)) + 0.5 * tied


def ranking_losses(preds: np.ndarray, y: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Misranked pairs of each model per bootstrap resample.

    Args:
        preds: ``float64 [m, n]``, each model's predictions at the run's ``n`` evaluations.
        y: ``float64 [n]``, the evaluations' log objectives.
        counts: ``float64 [S, n]``, how often each evaluation is drawn in each resample.

    Returns:
        ``float64 [S, m]``: per resample and model, the number of discordant pairs among the
        drawn evaluations (a pair drawn with multiplicities ``a`` and ``b`` counts ``a * b``).
    """
    out = np.empty((counts.shape[0], preds.shape[0]))
    for m, pred in enumerate(preds):
        d = discordance(pred, y)
        out[:, m] = 0.5 * ((counts @ d) * counts).sum(axis=1)  # c^T D c per resample, through BLAS
    return out


def ranking_weights(preds: np.ndarray, y: np.ndarray, rng: np.random.Generator, samples: int = SAMPLES) -> np.ndarray:
    """RGPE's weights of ``m`` models from their predictions at the run's evaluations.

    Args:
        preds: ``float64 [m, n]``; row 0 is the run's own model (out-of-bag predictions), the
            others are models of other goals.
        y: ``float64 [n]``, the evaluations' log objectives (n >= 3 for any weight to move).
        rng: the draws of the bootstrap resamples.

    Returns:
        ``float64 [m]``, summing to 1: each model's share of the resamples in which it misranks
        the fewest pairs (ties share a resample). Other goals whose median loss is above the
        95th percentile of the own model's, or no better than chance (a constant's), get 0
        (their share goes to the own model). With fewer than 3 evaluations the own model gets 1.
    """
    m, n = preds.shape
    weights = np.zeros(m)
    if n < 3:
        weights[0] = 1.0
        return weights
    counts = rng.multinomial(n, np.full(n, 1.0 / n), size=samples).astype(np.float64)
    losses = ranking_losses(np.vstack([preds, np.zeros(n)]), y, counts)
    chance, losses = losses[:, -1], losses[:, :-1]  # a constant ranks every pair half right
    best = losses == losses.min(axis=1, keepdims=True)
    weights = (best / best.sum(axis=1, keepdims=True)).mean(axis=0)
    diluting = ((np.median(losses[:, 1:], axis=0) > np.percentile(losses[:, 0], 95))
                | (np.median(losses[:, 1:], axis=0) >= np.median(chance)))
    weights[0] += weights[1:][diluting].sum()
    weights[1:][diluting] = 0.0
    return weights


@dataclass(frozen=True)
class Scaled:
    """An other goal's model mapped onto the run's scale: ``offset + slope * prediction``."""

    offset: float
    slope: float

    @classmethod
    def matching(cls, pred_at_own: np.ndarray, y: np.ndarray) -> Scaled | None:
        """The map giving ``pred_at_own`` (``float64 [n]``) the mean and spread of ``y``; None
        when the model predicts one value at every own evaluation (it ranks nothing)."""
        spread = float(np.std(pred_at_own))
        if spread < 1e-12:
            return None
        slope = float(np.std(y)) / spread
        return cls(float(np.mean(y)) - slope * float(np.mean(pred_at_own)), slope)


def combine(means: list[np.ndarray], stds: list[np.ndarray], weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ensemble's ``(mean, standard deviation)``, ``float64 [k]`` each: the weighted sums of
    the models' (already on the run's scale) means and deviations."""
    mean = sum(w * mu for w, mu in zip(weights, means))
    std = sum(w * sd for w, sd in zip(weights, stds))
    return np.asarray(mean, dtype=float), np.asarray(std, dtype=float) + 1e-9

