"""Model-based search with a Gaussian-process surrogate.

After Snoek, Larochelle & Adams, "Practical Bayesian Optimization of Machine Learning
Algorithms" (NIPS 2012): a Gaussian process with a Matérn 5/2 kernel, one length scale per
parameter (automatic relevance determination), an amplitude and a white-noise term, fitted by
maximising the log marginal likelihood (scikit-learn's ``GaussianProcessRegressor``), and
expected improvement over the pool of :class:`~swarm.agents.surrogate.SurrogateAgent`.
Kernel Tuner's bayes_opt is a GP too, with other choices (1.5.0: a Matérn 3/2 kernel with one
fixed length scale and a portfolio of acquisition functions).

A GP interpolates smoothly between evaluations where a forest predicts piecewise constants, so
on a smooth landscape (a GEMM's tile and vector widths) it locates the optimum from a few tens
of evaluations; on a rough one (a convolution's block sizes) the forest and the local agents
do better, which is why the default swarm runs both.

Each parameter enters the model as its rank among its sorted values, scaled to [0, 1]: tuning
parameters are mostly powers of two or evenly spaced, and ranks give one length scale the same
meaning across a parameter's range.

Cost: a hyperparameter fit takes about 40 L-BFGS steps of ``O(n^3)`` each: 0.1-0.2 s on 100
evaluations, 1.7-1.9 s on 400 (one core, 13 parameters). So the hyperparameters are fitted
only when the number of evaluations has grown by ``retune_growth`` since the last fit, on at
most ``tune_points`` of them (about 19 fits up to 400 evaluations at the defaults); every
generation the GP with those hyperparameters is conditioned on all evaluations (one Cholesky
factorisation). The hyperparameters depend only on the evaluations up to that point of the
schedule, so every process derives the same ones (agents are made anew each generation,
possibly on another worker; the same up to floating-point differences between BLAS builds or
thread counts); a per-process cache keyed on those evaluations' content saves refitting them.
"""

from __future__ import annotations

import hashlib
import math
import threading
import warnings
from collections import OrderedDict
from typing import Any

import numpy as np

from swarm.agents.base import Observation, RunView, between
from swarm.agents.space_index import varying
from swarm.agents.surrogate import SurrogateAgent

_CACHE_SIZE = 64


class GaussianProcessAgent(SurrogateAgent):
    """Expected improvement under a Gaussian-process surrogate of the primary objective.

    Settings (besides :class:`~swarm.agents.surrogate.SurrogateAgent`'s):
        nu: smoothness of the Matérn kernel: 0.5, 1.5 or 2.5 (default 2.5, as Snoek et al.).
        tune_points: most evaluations the hyperparameters are fitted on; a larger history is
            subsampled (default 100).
        retune_growth: the hyperparameters are fitted again once the evaluations have grown
            by this factor since the last fit (default 1.2).
    """

    kind = "gp"
    model_name = "Gaussian process"

    NUMERIC_SETTINGS = SurrogateAgent.NUMERIC_SETTINGS + (
        ("nu", 2.5, float, (lambda v: v in (0.5, 1.5, 2.5)), "in {0.5, 1.5, 2.5}"),
        ("tune_points", 100, int, *between(2, 2000)),
        ("retune_growth", 1.2, float, (lambda v: 1.0 < v <= 100.0), "in (1, 100]"),
    )

    def _features(self, view: RunView, base: np.ndarray) -> np.ndarray:
        """``float64 [n, n_varying]``: each varying parameter's rank among its sorted values,
        divided by (number of values - 1). A value the space no longer holds (history from
        before a narrowing) is placed by linear interpolation between the ranks of its
        neighbours, clipped to [0, 1]."""
        cols = []
        for j, i in enumerate(varying(view.space)):
            values = np.sort(np.array([float(v) for v in view.space.parameters[i].values]))
            cols.append(np.interp(base[:, j], values, np.arange(len(values)) / (len(values) - 1)))
        return np.column_stack(cols) if cols else base

    def _model(self, view: RunView, obs: list[Observation], X: np.ndarray, y: np.ndarray) -> Any:
        from sklearn.gaussian_process import GaussianProcessRegressor

        kernel = self._hyperparameters(view, obs, X)
        gp = GaussianProcessRegressor(kernel, normalize_y=True, optimizer=None)
        return gp.fit(X, y)

    @staticmethod
    def _predict(gp: Any, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        mu, sd = gp.predict(X, return_std=True)
        return mu, sd + 1e-9

    def _hyperparameters(self, view: RunView, obs: list[Observation], X: np.ndarray):
        """The fitted kernel of the evaluations up to the last point of the schedule that
        ``len(obs)`` has reached (all of them when that prefix has fewer than two feasible
        evaluations), subsampled to ``tune_points``."""
        m = _schedule_point(len(obs), max(self.setting("startup"), 2), self.setting("retune_growth"))
        prefix = obs[:m]
        if sum(1 for o in prefix if view.is_feasible(o)) < 2:
            m, prefix = len(obs), obs
        Xt, yt = X[:m], self._targets(view, prefix)
        limit = self.setting("tune_points")
        if m > limit:  # a subsample drawn from m alone: the same in every process
            keep = np.sort(np.random.default_rng(m).choice(m, size=limit, replace=False))
            Xt, yt = Xt[keep], yt[keep]
        nu = self.setting("nu")
        key = hashlib.sha1(Xt.tobytes() + yt.tobytes() + repr((nu, Xt.shape)).encode()).hexdigest()
        with _lock:
            hit = _kernels.get(key)
            if hit is not None:
                _kernels.move_to_end(key)
                return hit
        kernel = _fit_kernel(Xt, yt, nu)
        with _lock:
            _kernels[key] = kernel
            while len(_kernels) > _CACHE_SIZE:
                _kernels.popitem(last=False)
        return kernel


def _schedule_point(n: int, first: int, growth: float) -> int:
    """The largest point ``<= n`` of ``first, ceil(first * growth), ...`` (each at least one
    more than the last); ``n`` itself when ``n < first``."""
    if n < first:
        return n
    point = first
    while True:
        following = max(point + 1, math.ceil(point * growth))
        if following > n:
            return point
        point = following


def _fit_kernel(X: np.ndarray, y: np.ndarray, nu: float):
    """Matérn(nu) kernel with per-feature length scales, times an amplitude, plus white noise,
    its hyperparameters at the maximum of the log marginal likelihood on (X, y)."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel

    d = X.shape[1]
    kernel = (ConstantKernel(1.0, (1e-3, 1e3)) * Matern(np.full(d, 0.5), (1e-2, 1e2), nu=nu)
              + WhiteKernel(1e-2, (1e-6, 1.0)))
    with warnings.catch_warnings():
        # A length scale at its bound (a parameter without influence) is an answer, not a fault.
        warnings.simplefilter("ignore", ConvergenceWarning)
        gp = GaussianProcessRegressor(kernel, normalize_y=True, n_restarts_optimizer=0).fit(X, y)
    return gp.kernel_


_kernels: OrderedDict[str, Any] = OrderedDict()
_lock = threading.Lock()
