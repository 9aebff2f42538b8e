"""Search efficiency on recorded GPU landscapes: the swarm (and our agents alone) against every
Kernel Tuner strategy that takes a budget and Optuna's TPE and CMA-ES, same budgets and seeds.

    python -m benchmarks.search_efficiency [--quick] [--cache FILE ...] [--seeds 5] [--first-seed 0] \
        [--budgets 50,100,200,400] [--strategies default|all|swarm,agent:pack,kt:pso,optuna:tpe,...] \
        [--batch-size 4] [--jobs N] [--run-limit 300] [--traces FILE.jsonl] [--reuse REPORT.json] [--out DIR] [--json]

Defaults: every file of the shared tuning-cache folder, 5 seeds, the swarm (``swarm``: a first
run; ``swarm:transfer``: after runs on the kernel's other files) and every peer.
``--quick``: 3 seeds, budgets up to 200, the swarm against ``QUICK_PEERS``. ``--traces``
keeps finished runs in a JSON-lines file and reuses them (same file and contents, strategy, seed, budget, batch size),
so an interrupted or split run (peers once, the swarm after a change) is not repeated;
``--reuse`` takes the strategies not run now from an earlier report of the same files, budgets
and seeds. ``--first-seed N`` runs seeds ``N .. N + seeds - 1`` instead of ``0 .. seeds - 1``:
the committed report's bar is the best of many peers' medians over few seeds, which flatters
the peers, and fresh seeds measure every strategy, that bar's setter included, anew.
Each of the ``--jobs`` worker processes (default: one per CPU) runs one strategy run at a
time with one BLAS/OpenMP thread, and stops a run after ``--run-limit`` wall seconds (a hung
peer is listed among the failed runs, and its cells have that many runs fewer).

Every strategy searches the configurations a Kernel Tuner cache file records (the search
space Kernel Tuner itself builds from a cache); a configuration the file does not record is
never proposed by Kernel Tuner and costs nothing elsewhere. Recorded failures count as
evaluations. An evaluation is a distinct configuration: repeated proposals of one
configuration (Kernel Tuner's GA and PSO revisit their cache) are counted once.

- ``swarm`` (default mix) and ``agent:<kind>`` (one agent alone) run through the real
  orchestrator (``swarm.runs.orchestrator``) on the ``replay`` backend, in a private in-memory
  SQLite database per worker process, with a fresh goal per run (no insights carried over).
  They run once per budget: a run's last evaluations are its endgame
  (``swarm.learning.credit.endgame_evaluations``), so a smaller budget's run is not a prefix of
  a larger one's.
- ``kt:<strategy>`` (:data:`KT_STRATEGIES`; :data:`KT_LEFT_OUT` says which are not run and
  why) runs ``kernel_tuner.tune_cache`` (simulation mode) with ``max_fevals`` = budget,
  seeding ``random`` and ``numpy.random`` (each worker parses a cache file once; see
  ``_memoise_kt_cache_reads``): once per budget for simulated and dual annealing, whose
  schedules depend on the budget, and once at the largest budget for the others
  (``KT_BUDGET_FREE``: the budget only stops them, so smaller budgets are prefixes of that run).
- ``optuna:tpe`` and ``optuna:cmaes`` are Optuna's ``TPESampler`` and ``CmaEsSampler``
  (parameters as value indices; needs the ``cmaes`` package) with default settings used
  directly (ask/tell; an unrecorded configuration is told FAIL, a repeat its known value, and
  either is repaired to the nearest recorded configuration not yet evaluated, which is
  evaluated and added as a trial; recorded failures count and are told FAIL), one run at the
  largest budget (budget-independent).

A file searched on its own objective rather than the time (``TuningCache.searched``: Kernel
Tuner's hyperparameter tuner records a ``score``, maximised, and no time) is searched on that
field by every strategy, in its direction,
and the figures below read its *cost* where they say time (:func:`cost`): for a positive
quantity whose ratios mean something (energy, a rate such as GFLOP/s) how many times worse than
the optimum, as for a time; for anything else (a score, whose zero is arbitrary) 1 plus the
distance from the recorded optimum as a fraction of the recorded range (best/optimum 1.01:
within 1% of the range).

Per (dataset, strategy, budget), over seeds: the median and IQR of best-found time / recorded
optimum, the median number of evaluations to come within 5% and 1% of the optimum (``null``
when the median run does not get there) and how many runs are within 1% at that budget (on a
lone-spike optimum, see ``benchmarks.landscape``, the median flips when that count passes half). For files that record NVML energy, also
the hypervolume of the time/energy frontier found, as a fraction of the recorded frontier's.
Per strategy: the aggregate score of the autotuning methodology over evaluations 1..largest
budget (:mod:`benchmarks.methodology_score`; 0 is random search, 1 the optimum from the first
evaluation), per file and averaged over files, with its standard error over runs (the score is
the mean of the runs' own scores), and the CPU time of its worker per evaluation (the whole run:
strategy, Kernel Tuner's or our harness, replay lookups).

Output in ``--out`` (default ``benchmarks/results``): ``search_efficiency.md`` (host and date,
scores, the swarm against the best peer per file and budget, targets, every strategy's
table), ``.json`` (the object ``--json`` prints: results, targets, scores and their standard errors, CPU per strategy,
left-out strategies, failed runs), ``.html`` and, with Chromium, ``.png`` (the figure).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import signal
import sys
import tempfile
import time
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._report import host_line
from benchmarks.methodology_score import best_so_far, random_search_curve, run_scores, standard_error
from kernels.interchange.values import finite_number
from swarm.learning.credit import endgame_share

ROOT = Path(__file__).resolve().parents[1]
#: Every Kernel Tuner 1.5 strategy that accepts ``max_fevals`` and runs on a cache file
#: (``kernel_tuner.interface.strategy_map``); :data:`KT_LEFT_OUT` names the others and why.
#: ``hybrid_vndx`` and ``adaptive_tabu_greywolf`` are the optimizers generated by an LLM-driven
#: search (arXiv 2510.17899).
KT_STRATEGIES = (
    "random_sample", "genetic_algorithm", "simulated_annealing", "bayes_opt", "pso", "greedy_ils",
    "greedy_mls", "mls", "ordered_greedy_mls", "diff_evo", "dual_annealing", "basinhopping", "minimize",
    "firefly_algorithm", "nsga2", "nsga3", "hybrid_vndx", "adaptive_tabu_greywolf",
)
#: Kernel Tuner strategies not run, with the reason (``skopt`` and ``pyatf_strategies`` run when
#: their packages are installed: :func:`kt_strategies`).
KT_LEFT_OUT = {
    "brute_force": "exhaustive: rejects max_fevals (evaluates the whole space)",
    "skopt": "needs scikit-optimize, not installed",
    "pyatf_strategies": "needs pyATF, not installed",
}
#: Kernel Tuner strategies whose choices do not depend on ``max_fevals`` (it only stops them),
#: so that the run at the largest budget gives every smaller budget's run as a prefix (checked
#: in tests/benchmarks for the deterministic ones). Simulated annealing is not one: it scales
#: its cooling schedule to ``max_fevals``; nor is dual annealing (``maxfun=max_fevals``).
#: ``bayes_opt``, ``diff_evo``, ``nsga2`` and ``nsga3`` read ``max_fevals`` only as their stop,
#: but their runs are not repeatable even with seeded RNGs (unseeded samplers inside), so any
#: budget's run is an independent draw either way. ``minimize``, ``dual_annealing`` and
#: ``firefly_algorithm`` may end before the budget (their own convergence test): a shorter run
#: keeps the best it found.
KT_BUDGET_FREE = frozenset({
    "random_sample", "genetic_algorithm", "pso", "greedy_ils", "bayes_opt", "greedy_mls", "mls",
    "ordered_greedy_mls", "diff_evo", "basinhopping", "minimize", "firefly_algorithm", "nsga2", "nsga3",
    "hybrid_vndx", "adaptive_tabu_greywolf", "skopt", "pyatf_strategies",
})
#: Budget-free strategies whose runs differ between calls even with ``random`` and ``numpy.random``
#: seeded (their samplers draw from unseeded generators of their own).
KT_NOT_REPEATABLE = frozenset({"bayes_opt", "diff_evo", "nsga2", "nsga3"})
#: The peers of ``--quick``: the strongest of each family on the issue's measurement, and random.
QUICK_PEERS = ("kt:adaptive_tabu_greywolf", "kt:hybrid_vndx", "kt:random_sample", "optuna:tpe")
DEFAULT_SEEDS = 5
QUICK_SEEDS = 3
#: Largest seed a run may have (``--first-seed`` + ``--seeds``).
MAX_SEED = 1_000_000
#: Wall seconds one run may take in a worker (``--run-limit``; 0: no limit) before it is stopped
#: and listed among the failed runs. A run of 400 evaluations takes seconds (the slowest strategy
#: about 40 ms per evaluation), but a peer can hang: Kernel Tuner's pymoo-based strategies can
#: loop in pymoo's repair.
RUN_LIMIT_S = 300.0
#: Most seconds ``--run-limit`` takes (``setitimer`` overflows far above); the least is 1 s
#: (besides 0, no limit): below, a run is stopped before a strategy has started.
MAX_RUN_LIMIT_S = 1_000_000
#: Largest budget (evaluations of one run), and most ``--jobs`` workers: each is a process.
MAX_BUDGET = 1_000_000
MAX_JOBS = 256
_run_limit_s = 0.0  # this worker's limit (set by _init_worker)


def kt_strategies() -> tuple[str, ...]:
    """:data:`KT_STRATEGIES` plus the optional ones whose packages are installed."""
    import importlib.util

    extra = tuple(s for s, mod in (("skopt", "skopt"), ("pyatf_strategies", "pyatf"))
                  if importlib.util.find_spec(mod) is not None)
    return KT_STRATEGIES + extra


def optuna_strategies() -> tuple[str, ...]:
    """``optuna:tpe``, and ``optuna:cmaes`` when the ``cmaes`` package is installed."""
    import importlib.util

    return ("optuna:tpe",) + (("optuna:cmaes",) if importlib.util.find_spec("cmaes") is not None else ())


OUR_AGENTS = ("random", "evolutionary", "optuna", "local", "forest", "gp")
#: The default swarm cold (a first run: nothing learned before) and warm (``swarm:transfer``:
#: after :data:`PRIOR_BUDGET`-evaluation runs on the kernel's other files, :func:`siblings`).
OUR_MIXES = ("swarm", "swarm:transfer")
#: Evaluations of each earlier run of a transfer run.
PRIOR_BUDGET = 100
Trace = list[tuple[bool, float | None, float | None]]  # (ok, cost: time ms, energy J) per evaluation


def default_caches() -> list[Path]:
    from kernels.config import replay_dirs

    for d in replay_dirs():
        files = sorted(Path(d).glob("*.json*"))
        if files:
            return files
    return []


# --- data sets ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Dataset:
    """One recorded landscape: the original file and a repaired plain-JSON copy for Kernel Tuner."""

    name: str
    path: Path
    json_path: Path
    keys: tuple[str, ...]
    optimum: float
    energy: bool
    front_hv: float | None
    reference: tuple[float, float] | None
    kernel: str = ""  # the file's kernel_name ("" when it records none)
    sha256: str = ""  # of the file's content (what tells two files of one name apart)
    field: str = "time"  # the recorded field searched (TuningCache.searched)
    metric: str = "latency_ms"  # its name in our evidence (TuningCache.metric)
    maximize: bool = False
    reading: str = "value"  # how a value reads as a cost: "value", "ratio" or "range" (cost())
    span: tuple[float, float] = (0.0, 0.0)  # the recorded (optimum, worst) values of field

    def cost(self, value: float | None) -> float | None:
        """The value of :attr:`field` as a cost to minimise: :func:`cost`."""
        return cost(value, self.reading, self.maximize, self.span)


def reading_of(field_name: str, values: Iterable[float]) -> str:
    """How the recorded values of ``field_name`` read as a cost (:func:`cost`): ``"value"``
    for the time (ms, as recorded); ``"ratio"`` for a positive quantity whose ratios mean
    something (energy, power, a rate such as GFLOP/s); ``"range"`` for anything else (a
    score, a loss: its zero is arbitrary, so a ratio of two of them is not a measure)."""
    if field_name == "time":
        return "value"
    ratio_scale = field_name in ("energy", "nvml_energy", "nvml_power") or any(u in field_name for u in ("/s", "/W", "/J"))
    return "ratio" if ratio_scale and min(values) > 0 else "range"


def cost(value: float | None, reading: str, maximize: bool, span: tuple[float, float]) -> float | None:
    """A recorded value as a cost to minimise, least at the optimum, by ``reading``
    (:func:`reading_of`): ``"value"`` the value itself (a time, ms); ``"ratio"`` the value over
    the optimum, or the optimum over the value when maximised (so best/optimum is how many
    times worse, as for a time; 1 at the optimum); ``"range"`` ``1 + (value - optimum) /
    (worst - optimum)`` (``span`` = (optimum, worst); 1 at the optimum, 2 at the worst
    recorded). None stays None."""
    if value is None or reading == "value":
        return value
    best, worst = span
    if reading == "ratio":
        return best / value if maximize else value / best
    return 1.0 + ((value - best) / (worst - best) if worst != best else 0.0)


def load_dataset(path: Path, workdir: Path) -> Dataset:
    """Read a recorded file and write Kernel Tuner's copy of it to ``workdir``.

    The copy is written from what :func:`kernels.interchange.tuning_cache.load_cache` read, so
    that Kernel Tuner, the random baseline and our runs give each entry the same verdict: an
    entry the loader counts as failed (a legacy ``1e20`` time, a negative or missing one)
    records Kernel Tuner's failure string in the searched field (``time``, or the objective of
    a file that records no time; Kernel Tuner leaves such entries out of its space, where our
    runs may still evaluate them), the keys are the loader's, and ``cache`` is the last field
    (Kernel Tuner recognises a closed file by its last characters). The optimum is the least
    :func:`cost`.

    Raises:
        OSError: the file cannot be read.
        kernels.interchange.tuning_cache.TuningCacheError: not a readable cache (the loader's message).
        ValueError: fewer than two valid configurations record the searched field, or a recorded time is 0.
    """
    from kernels.interchange.tuning_cache import load_cache

    cache = load_cache(path)
    field_name = cache.searched
    raw = valid_values(cache)
    what = "a time" if field_name == "time" else f"its objective '{field_name}'"
    if len(raw) < 2:
        raise ValueError(f"{path}: {len(raw)} valid configuration(s) record {what}; a search needs at least two")
    reading, span, valid = recorded_costs(cache, path)
    entries = {}
    for key, entry in cache.entries.items():
        out = {**entry, **cache.params_of(key)}
        if key not in raw:
            out[field_name] = _KT_FAILURE.get(cache.status(key)[0], "RuntimeFailedConfig")
        entries[key] = out
    data = {"device_name": cache.device_name, "kernel_name": cache.kernel_name,
            "problem_size": list(cache.problem_size or [1]),  # Kernel Tuner's tune_cache needs one; unused in replay
            "tune_params_keys": list(cache.tune_params_keys),
            "tune_params": {k: list(v) for k, v in cache.tune_params.items()}, "objective": field_name, "cache": entries}
    json_path = workdir / f"{cache.name}.json"
    json_path.write_text(json.dumps(data, indent=1))  # NaN as Kernel Tuner writes and reads it
    optimum = min(valid.values())
    energy = field_name == "time" and "nvml_energy" in cache.objectives_available
    front_hv = reference = None
    if energy:
        pts = [(t, float(cache.entries[k]["nvml_energy"])) for k, t in valid.items()
               if finite_number(cache.entries[k].get("nvml_energy")) is not None]
        reference = (max(p[0] for p in pts), max(p[1] for p in pts))
        front_hv = hypervolume(pts, reference)
    return Dataset(cache.name, path, json_path, tuple(cache.tune_params_keys), optimum, energy, front_hv, reference,
                   cache.kernel_name or "", cache.sha256, field_name, cache.metric, cache.maximize, reading, span)


def valid_values(cache: Any) -> dict[str, float]:
    """Recorded value of the searched field (``time``, ms, or the file's objective, see
    ``TuningCache.searched``) of each entry the loader counts as valid, by key: the one verdict
    that Kernel Tuner's copy (:func:`load_dataset`) and the random baseline
    (:func:`random_curves`) use. An entry outside the search space (``TuningCache.outside``)
    is left out: no strategy can propose it, so it is neither the optimum nor a random draw."""
    values = {k: finite_number(e.get(cache.searched)) for k, e in cache.entries.items()
              if cache.status(k)[0] == "ok" and k not in cache.outside}
    return {k: v for k, v in values.items() if v is not None}


def recorded_costs(cache: Any, path: Path) -> tuple[str, tuple[float, float], dict[str, float]]:
    """How ``cache``'s searched values read (:func:`reading_of`), their recorded (optimum,
    worst) span and each valid entry's :func:`cost` by key (:func:`valid_values`; ``{}`` when
    none is valid).

    Raises:
        ValueError: a valid configuration records a time of 0 or less (no ratio to it means
            anything), naming ``path``.
    """
    raw = valid_values(cache)
    if not raw:
        return "value", (0.0, 0.0), {}
    if cache.searched == "time" and min(raw.values()) <= 0:
        raise ValueError(f"{path}: a valid configuration records a time of {min(raw.values()):g} ms; times must be > 0")
    lo, hi = min(raw.values()), max(raw.values())
    span = (hi, lo) if cache.maximize else (lo, hi)
    reading = reading_of(cache.searched, raw.values())
    return reading, span, {k: cost(v, reading, cache.maximize, span) for k, v in raw.items()}


#: Kernel Tuner's failure string for each failed outcome the loader reads (``kernel_tuner/util.py``).
_KT_FAILURE = {"compile_error": "CompilationFailedConfig", "invalid": "InvalidConfig", "runtime_error": "RuntimeFailedConfig"}


def siblings(ds: Dataset, datasets: list[Dataset]) -> tuple[Dataset, ...]:
    """The other files of ``ds``'s kernel with the same tunable parameters (the kernel recorded
    on other devices): what a transfer run (``swarm:transfer``) learns from."""
    return tuple(d for d in datasets if ds.kernel and d.name != ds.name and d.kernel == ds.kernel and d.keys == ds.keys)



def hypervolume(points: list[tuple[float, float]], reference: tuple[float, float]) -> float:
    """Area dominated by ``points`` (both minimised) up to ``reference``, O(n log n)."""
    front = sorted(p for p in points if p[0] <= reference[0] and p[1] <= reference[1])
    # sweep in x: each frontier point adds the strip between its y and the previous best y
    area, best_y = 0.0, reference[1]
    for x, y in front:
        if y < best_y:
            area += (reference[0] - x) * (best_y - y)
            best_y = y
    return area


# --- strategies (each runs in a worker process) ----------------------------------------------


_django_ready = False
DEFAULT_MIX: tuple = ()


def _setup_django() -> None:
    global _django_ready
    if _django_ready:
        return
    os.environ["DATABASE_URL"] = "sqlite:///:memory:"
    os.environ.pop("REDIS_URL", None)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "int21_site.settings")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    sys.path.insert(0, str(ROOT))
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    from swarm.agents import DEFAULT_MIX as mix

    global DEFAULT_MIX
    DEFAULT_MIX = mix
    _django_ready = True


def run_ours(ds: Dataset, agents: tuple[str, ...] | list[dict], seed: int, budget: int, batch_size: int,
             earlier: tuple[Dataset, ...] = (), started: Callable[[], None] | None = None) -> Trace:
    """One run of our orchestrator on a fresh replay goal; the trace in evaluation order.

    ``agents``: agent kinds (each with default settings), or agent dicts as in ``DEFAULT_MIX``.
    ``earlier``: data sets run first in the same database (:data:`PRIOR_BUDGET` evaluations
    each, seeds ``seed + 1000 * i``), as an engineer's earlier runs of the kernel on other
    devices; the run on ``ds`` starts from their evidence (``swarm.learning.store.warm_start``).
    Only the run on ``ds`` is in the trace; ``started`` is called right before it (so that a
    caller's clocks leave the earlier runs out).
    """
    _setup_django()
    from swarm.models import Candidate, Goal, Insight, Run

    Candidate.objects.all().delete()
    Run.objects.all().delete()
    Insight.objects.all().delete()
    Goal.objects.all().delete()
    mix = [a if isinstance(a, dict) else {"name": a, "kind": a, "settings": {}} for a in agents]
    for i, other in enumerate(earlier, start=1):
        _run_on(other, mix, seed + 1000 * i, PRIOR_BUDGET, batch_size)
    if started is not None:
        started()
    run = _run_on(ds, mix, seed, budget, batch_size)
    rows = run.candidates.order_by("id").values_list("status", "evidence__metrics")
    return [(s == "ok", ds.cost((m or {}).get(ds.metric)), (m or {}).get("energy_j")) for s, m in rows]


def _run_on(ds: Dataset, mix: list[dict], seed: int, budget: int, batch_size: int):
    """Import ``ds`` as a goal and run the orchestrator on it to the end; the finished run."""
    from swarm.goals.replay import import_cache
    from swarm.runs import orchestrator

    goal, _ = import_cache(ds.path)
    run, pending = orchestrator.start_run(goal, budget=budget, seed=seed, batch_size=batch_size, agents=mix)
    while pending:  # what the Celery batch task does (swarm.tasks.evaluate_batch), in-process
        orchestrator.evaluate_batch([c.pk for c in pending])
        pending = orchestrator.advance(run.pk)
    return run


_kt_parsed: dict[str, bytes] = {}


def _memoise_kt_cache_reads() -> None:
    """Parse each cache file once per worker process instead of twice per Kernel Tuner run.

    In simulation mode Kernel Tuner only reads the file (``read_cache(open_cache=False)``);
    every call still gets a fresh copy (a pickle round trip), so no run sees another's state.
    Kernel Tuner's search itself is untouched; this only removes ~1 s of JSON parsing per run.
    """
    import pickle

    from kernel_tuner import util

    if getattr(util.read_cache, "_memoised", False):
        return
    original = util.read_cache

    def read_cache(cachefile, open_cache=True):
        if open_cache:
            return original(cachefile, open_cache)
        key = str(cachefile)
        if key not in _kt_parsed:
            _kt_parsed[key] = pickle.dumps(original(cachefile, open_cache))
        return pickle.loads(_kt_parsed[key])

    read_cache._memoised = True
    util.read_cache = read_cache


def run_kt(ds: Dataset, strategy: str, seed: int, budget: int) -> Trace:
    """Kernel Tuner's own strategy in simulation mode; distinct configurations in order."""
    import kernel_tuner

    warnings.filterwarnings("ignore")
    _memoise_kt_cache_reads()
    random.seed(seed)
    np.random.seed(seed)
    results, _ = kernel_tuner.tune_cache(
        str(ds.json_path), strategy=strategy, strategy_options={"max_fevals": budget}, verbose=False, quiet=True,
        objective=ds.field, objective_higher_is_better=ds.maximize,
    )
    seen, trace = set(), []
    for r in results:
        key = tuple(r[k] for k in ds.keys)
        if key in seen:
            continue
        seen.add(key)
        t = ds.cost(finite_number(r.get(ds.field)))
        trace.append((t is not None, t, finite_number(r.get("nvml_energy"))))
    return trace[:budget]


class _Recorded:
    """The configurations a cache file records, for repairing proposals it does not record:
    each parameter's value as its rank among the parameter's values, scaled to [0, 1]."""

    def __init__(self, cache) -> None:
        self.keys = [k for k in cache.entries if k not in cache.outside]  # what a search can propose
        self.row_of = {k: i for i, k in enumerate(self.keys)}
        self.params = [cache.params_of(k) for k in self.keys]
        ranks = {name: {v: i / max(len(vals) - 1, 1) for i, v in enumerate(vals)}
                 for name, vals in cache.tune_params.items()}
        self.ranks = ranks
        self.names = list(cache.tune_params_keys)
        self.matrix = np.array([[ranks[n][p[n]] for n in self.names] for p in self.params], dtype=np.float64)
        self.free = np.ones(len(self.keys), dtype=bool)

    def take(self, key: str) -> None:
        self.free[self.row_of[key]] = False

    def nearest_free(self, params: dict) -> int | None:
        """Row of the recorded, not yet taken configuration nearest to ``params`` (sum of
        rank distances; the first such row on ties), or None when every one is taken."""
        rows = np.flatnonzero(self.free)
        if not len(rows):
            return None
        x = np.array([self.ranks[n][params[n]] for n in self.names])
        return int(rows[np.argmin(np.abs(self.matrix[rows] - x).sum(axis=1))])


def run_optuna_tpe(ds: Dataset, seed: int, budget: int) -> Trace:
    """Optuna's TPE (default settings) over the recorded configurations: :func:`run_optuna`."""
    return run_optuna(ds, "tpe", seed, budget)


def run_optuna(ds: Dataset, sampler: str, seed: int, budget: int) -> Trace:
    """An Optuna sampler used directly (ask/tell) over the recorded configurations.

    ``sampler``: ``"tpe"`` (``TPESampler``, each parameter categorical) or ``"cmaes"``
    (``CmaEsSampler``, each parameter as the integer index of its value: CMA-ES needs a
    numeric space; a parameter with one value is left to Optuna's independent sampler).

    TPE samples each parameter from its own distribution, so most of its proposals on a
    restricted space are configurations the file does not record (on the GEMM file about 19
    of 20), and once it has converged it keeps proposing configurations it has evaluated.
    Such a proposal is told FAIL (unrecorded: it costs nothing) or its known value (a repeat)
    and *repaired*: the nearest recorded configuration not yet evaluated
    (:class:`_Recorded`) is evaluated instead and added to the study as a completed trial.
    Every ask thus yields one new evaluation and the sampler gets its whole budget, as Kernel
    Tuner's strategies, which draw from the recorded configurations and skip repeats, do.

    Raises:
        ValueError: unknown ``sampler``.
    """
    import optuna
    from optuna.distributions import CategoricalDistribution, IntDistribution
    from optuna.trial import TrialState, create_trial

    from kernels.interchange.tuning_cache import load_cache

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.filterwarnings("ignore")
    cache = load_cache(ds.path)
    values = {k: list(v) for k, v in cache.tune_params.items()}
    if sampler == "tpe":
        dists = {k: CategoricalDistribution(v) for k, v in values.items()}
        encode = decode = dict
        chosen = optuna.samplers.TPESampler(seed=seed)
    elif sampler == "cmaes":
        dists = {k: IntDistribution(0, len(v) - 1) for k, v in values.items()}

        def encode(params: dict) -> dict:
            return {k: values[k].index(v) for k, v in params.items()}

        def decode(params: dict) -> dict:
            return {k: values[k][i] for k, i in params.items()}

        chosen = optuna.samplers.CmaEsSampler(seed=seed)
    else:
        raise ValueError(f"unknown Optuna sampler {sampler!r}; known: tpe, cmaes")
    study = optuna.create_study(sampler=chosen)
    recorded = _Recorded(cache)
    seen: dict[str, float | None] = {}
    trace: Trace = []
    while len(trace) < budget:  # every ask adds one evaluation (or ends the run: nothing left)
        trial = study.ask(dists)
        params = decode({k: trial.params[k] for k in cache.tune_params_keys})
        key = cache.key(params)
        repaired = key in seen or key not in cache.entries
        if repaired:
            if key in seen:  # already evaluated: told its known value again
                study.tell(trial, seen[key]) if seen[key] is not None else study.tell(trial, state=TrialState.FAIL)
            else:  # not in the recorded space: a free restriction check
                study.tell(trial, state=TrialState.FAIL)
            row = recorded.nearest_free(params)
            if row is None:
                break
            key, params = recorded.keys[row], recorded.params[row]
        recorded.take(key)
        ev = cache.lookup(params)
        t = ds.cost(ev.metrics.get(ds.metric)) if ev.status == "ok" else None
        seen[key] = t
        trace.append((t is not None, t, ev.metrics.get("energy_j")))
        if not repaired:
            study.tell(trial, t) if t is not None else study.tell(trial, state=TrialState.FAIL)
        else:
            coded = encode(params)
            study.add_trial(create_trial(params=coded, distributions=dists, value=t) if t is not None else
                            create_trial(params=coded, distributions=dists, state=TrialState.FAIL))
    return trace


def _one_thread_per_worker() -> None:
    """Pool initializer: one BLAS/OpenMP thread per worker. ``--jobs`` workers already fill
    the cores; OpenBLAS's own threads on top (one per core by default) oversubscribe them
    and spin. On 2 cores, 3 seeds of swarm, random, forest, bayes_opt and TPE took 114 s with
    default threads and 84 s with one (bayes_opt 58 -> 32 s, our runs 16-23% less).

    The environment variables reach libraries loaded later (SciPy's own OpenBLAS, which
    Kernel Tuner's bayes_opt uses); ``threadpool_limits`` those already loaded (NumPy's)."""
    from threadpoolctl import threadpool_limits

    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"
    threadpool_limits(1)


def _init_worker(run_limit_s: float) -> None:
    """Pool initializer: one thread per worker (:func:`_one_thread_per_worker`) and the wall
    limit of each of its runs (:data:`RUN_LIMIT_S`)."""
    global _run_limit_s
    _one_thread_per_worker()
    _run_limit_s = run_limit_s


class _RunStopped(BaseException):
    """Raised by SIGALRM in a run past its limit; a BaseException, so that a strategy's own
    ``except Exception`` cannot swallow it and run on."""


def _stop_run(signum, frame) -> None:
    raise _RunStopped


def _task(kind: str, ds: Dataset, name: str, seed: int, budget: int, batch_size: int,
          earlier: tuple[Dataset, ...] = ()) -> tuple:
    """One run in a worker, stopped after the worker's run limit (:func:`_init_worker`).

    Raises:
        TimeoutError: the run took longer than the limit (it is listed among the failed runs).
    """
    _prepare(kind)  # imports and set-up before the alarm: a stop must not leave a module half imported
    try:
        if _run_limit_s > 0:
            signal.signal(signal.SIGALRM, _stop_run)
            signal.setitimer(signal.ITIMER_REAL, _run_limit_s)
        try:
            return _run(kind, ds, name, seed, budget, batch_size, earlier)
        finally:
            if _run_limit_s > 0:
                signal.setitimer(signal.ITIMER_REAL, 0)
    except _RunStopped:  # also when the alarm fires in the finally, before it is cancelled
        raise TimeoutError(f"stopped after {_run_limit_s:g} s (--run-limit)") from None


def _prepare(kind: str) -> None:
    """What a worker's runs of ``kind`` import and set up once (Django and its in-memory
    database; Kernel Tuner; Optuna), done outside the run limit."""
    if kind == "ours":
        _setup_django()
    elif kind == "kt":
        import kernel_tuner  # noqa: F401

        _memoise_kt_cache_reads()
    else:
        import optuna  # noqa: F401


def _run(kind: str, ds: Dataset, name: str, seed: int, budget: int, batch_size: int,
         earlier: tuple[Dataset, ...]) -> tuple:
    """:func:`_task`'s run and its wall and CPU seconds (a transfer run's earlier runs left out)."""
    start, cpu = time.perf_counter(), time.process_time()

    def restart() -> None:  # a transfer run's earlier runs are not its cost
        nonlocal start, cpu
        start, cpu = time.perf_counter(), time.process_time()

    if kind == "ours":
        _setup_django()
        agents = list(DEFAULT_MIX) if name in OUR_MIXES else (name.split(":", 1)[1],)
        trace = run_ours(ds, agents, seed, budget, batch_size, earlier, started=restart)
    elif kind == "kt":
        trace = run_kt(ds, name.split(":", 1)[1], seed, budget)
    else:
        trace = run_optuna(ds, name.split(":", 1)[1], seed, budget)
    return kind, ds.name, name, seed, budget, trace, time.perf_counter() - start, time.process_time() - cpu


#: What a row of a report's ``results`` holds (:func:`summarise`).
ROW_KEYS = frozenset({"dataset", "strategy", "budget", "median_ratio", "iqr", "evals_to_5pct", "evals_to_1pct",
                      "runs_within_1pct", "seeds"})


def _read_report(path: Path, parser: argparse.ArgumentParser, known: list[str]) -> dict:
    """An earlier report's JSON (``--reuse``); a usage error when it cannot be read or is not a
    report of this benchmark (``known``: the strategy names it may hold)."""
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        parser.error(f"--reuse {path}: {exc}")
    rows = report.get("results") if isinstance(report, dict) else None
    score = report.get("scores") if isinstance(report, dict) else None
    if (not isinstance(rows, list) or not rows or not isinstance(score, dict)
            or not all(isinstance(r, dict) and ROW_KEYS <= r.keys() and _count(r["seeds"], 1) for r in rows)
            or not all(isinstance(v, dict) and "aggregate" in v for v in score.values())):
        parser.error(f"--reuse {path}: not a search_efficiency report (its results rows or scores are malformed)")
    rows = [_row_to_json(r) for r in rows]  # reports before strict JSON wrote Infinity and NaN
    if bad := next((r for r in rows if not _row_ok(r)), None):
        parser.error(f"--reuse {path}: a results row is not a summary of runs (a best/optimum ratio of at least 1 or "
                     f"null, counts and evaluations that fit its seeds): {bad}")
    report["results"] = [_row_from_json(r) for r in rows]
    if not _count(report.get("first_seed", 0), 0):
        parser.error(f"--reuse {path}: its first_seed {report['first_seed']!r} is not an integer >= 0")
    if not all(_number(x) for v in score.values() for x in v.values()):
        parser.error(f"--reuse {path}: its scores are not finite numbers per strategy and file")
    errors = report.get("score_standard_errors", {})  # reports before standard errors have none
    if not (isinstance(errors, dict) and all(isinstance(v, dict) and all(e is None or (_number(e) and e >= 0)
                                                                          for e in v.values())
                                             for v in errors.values())):
        parser.error(f"--reuse {path}: its score_standard_errors are not a number >= 0 or null per strategy and file")
    digests = report.get("files", {})
    if not (isinstance(digests, dict) and all(isinstance(v, str) for v in digests.values())):
        parser.error(f"--reuse {path}: its files are not a sha256 per file name")
    names = {r["strategy"] for r in rows}
    if unknown := sorted((names | set(score)) - set(known)):
        parser.error(f"--reuse {path}: unknown strategies {unknown}")
    files = {r["dataset"] for r in rows}
    # A strategy whose runs all failed on a file has no score there.
    if bad := next((k for k, v in score.items() if not set(v) - {"aggregate"} <= files), None):
        parser.error(f"--reuse {path}: the scores of {bad} name files its results do not hold")
    # At most 1 (the optimum at once); far below 0 is worse than random search by a factor no
    # recorded strategy comes near (the worst, Kernel Tuner's minimize, scores about -15).
    if not all(-1e6 <= x <= 1 + 1e-9 for v in score.values() for x in v.values()):
        parser.error(f"--reuse {path}: a score is outside the methodology's range (-1e6 to 1)")
    cpu = report.get("cpu_by_strategy", {})
    if not (isinstance(cpu, dict) and all(isinstance(v, dict) and _number(v.get("cpu_s")) and v["cpu_s"] >= 0
                                          and _count(v.get("evaluations"), 0) for v in cpu.values())):
        parser.error(f"--reuse {path}: its cpu_by_strategy is not cpu_s >= 0 and a count of evaluations per strategy")
    ours = report.get("our_runs", {})  # reports before it have none
    if not (isinstance(ours, dict) and (not ours or (_count(ours.get("batch_size"), 1)
                                                     and _number(ours.get("endgame_share"))
                                                     and 0 <= ours["endgame_share"] <= 1))):
        parser.error(f"--reuse {path}: its our_runs is not a batch_size >= 1 and an endgame_share in [0, 1]")
    return report


def _our_settings(args: argparse.Namespace) -> dict:
    """What our runs depend on besides the files and seeds: ``--batch-size`` and the endgame's
    share (``SWARM_ENDGAME_SHARE`` as the runs read it)."""
    return {"batch_size": args.batch_size, "endgame_share": _endgame_share()}


def _endgame_share() -> float:
    """``SWARM_ENDGAME_SHARE`` as our runs' workers read it (:func:`swarm.learning.credit.endgame_share`).

    Raises:
        ValueError: not a share in [0, 1].
    """
    return endgame_share(os.environ.get("SWARM_ENDGAME_SHARE"))


def is_ours(name: str) -> bool:
    """Whether strategy ``name`` is run by our orchestrator (a mix of :data:`OUR_MIXES` or ``agent:<kind>``)."""
    return name in OUR_MIXES or name.startswith("agent:")


def _ours_mismatch(report: dict, running: list[str], ours: dict) -> str | None:
    """Why an earlier report's rows of our mixes (those not run now) cannot stand beside this
    run: they were made with another ``--batch-size`` or endgame share (a report that does not
    record them is taken as it is), or None."""
    taken = sorted({r["strategy"] for r in report["results"]
                    if is_ours(r["strategy"]) and r["strategy"] not in running})
    theirs = report.get("our_runs") or ours
    if not taken or theirs == ours:
        return None
    return (f"its runs of {', '.join(taken)} had batch size {theirs['batch_size']} and endgame share "
            f"{theirs['endgame_share']:g}; this run's would have {ours['batch_size']} and {ours['endgame_share']:g}")


def _row_ok(row: dict) -> bool:
    """Whether a reused ``results`` row (:func:`summarise`, as JSON) holds what a summary can."""
    def number_or_null(v: Any, least: float) -> bool:
        return v is None or (_number(v) and v >= least)

    return (isinstance(row["dataset"], str) and isinstance(row["strategy"], str) and _count(row["budget"], 1)
            and number_or_null(row["median_ratio"], 1 - 1e-9) and number_or_null(row["iqr"], 0)
            and number_or_null(row["evals_to_5pct"], 1) and number_or_null(row["evals_to_1pct"], 1)
            and _count(row["runs_within_1pct"], 0) and row["runs_within_1pct"] <= row["seeds"]
            and ("median_hv_fraction" not in row or (_number(row["median_hv_fraction"])
                                                     and 0 <= row["median_hv_fraction"] <= 1 + 1e-9)))


def _row_to_json(row: dict) -> dict:
    """A ``results`` row for strict JSON: a median or IQR that is not finite (no run of the
    strategy found a valid configuration within the budget: ``inf``, and ``inf - inf``) is null;
    other values (a reused row's) are left for :func:`_row_ok` to judge."""
    return {**row, **{k: None for k in ("median_ratio", "iqr") if isinstance(row[k], float) and not math.isfinite(row[k])}}


def _row_from_json(row: dict) -> dict:
    """The inverse of :func:`_row_to_json`: a null median is ``inf`` again (behind every finite
    one), a null IQR ``inf`` (no bound on the spread; ``inf - inf`` was ``nan``)."""
    return {**row, "median_ratio": math.inf if row["median_ratio"] is None else row["median_ratio"],
            "iqr": math.inf if row["iqr"] is None else row["iqr"]}


def _number(value: Any) -> bool:
    """Whether ``value`` is a finite int or float (not a bool; an int too large for a float is not)."""
    return finite_number(value) is not None


def _count(value: Any, least: int) -> bool:
    """Whether ``value`` is an int (not a bool) of at least ``least``."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def _reuse_mismatch(report: dict, datasets: list[str], budgets: list[int], seeds: int,
                    first_seed: int = 0, contents: dict[str, str] | None = None) -> str | None:
    """Why an earlier report's figures cannot stand beside this run's (other files, budgets or
    seeds: its scores and medians would not compare), or None. A report without
    ``first_seed`` ran from seed 0; ``contents`` (file name -> sha256) is checked against the
    report's ``files`` where it records them."""
    recorded = report.get("files") or {}
    if changed := sorted(n for n, digest in (contents or {}).items() if recorded.get(n, digest) != digest):
        return f"its files {', '.join(changed)} had other contents (sha256 differs)"
    rows = report["results"]
    theirs = (sorted({r["dataset"] for r in rows}), sorted({r["budget"] for r in rows}), max(r["seeds"] for r in rows),
              report.get("first_seed", 0))
    if theirs != (sorted(datasets), sorted(budgets), seeds, first_seed):
        return (f"it covers files {', '.join(theirs[0])}, budgets {theirs[1]} and {_seed_range(theirs[3], theirs[2])}; "
                f"this run {', '.join(sorted(datasets))}, budgets {sorted(budgets)} and {_seed_range(first_seed, seeds)}")
    return None


def _seed_range(first: int, seeds: int) -> str:
    """``"5 seeds (10-14)"``: how many seeds from ``first`` on."""
    return f"{seeds} seeds ({first}-{first + seeds - 1})" if seeds > 1 else f"1 seed ({first})"


# --- statistics -----------------------------------------------------------------------------


def best_ratio(trace: Trace, budget: int, optimum: float) -> float:
    times = [t for ok, t, _ in trace[:budget] if ok and t is not None]
    return min(times) / optimum if times else math.inf


def evals_to(trace: Trace, budget: int, optimum: float, within: float) -> float:
    for i, (ok, t, _) in enumerate(trace[:budget], start=1):
        if ok and t is not None and t <= optimum * (1 + within) + 1e-12:
            return float(i)
    return math.inf


def hv_fraction(trace: Trace, budget: int, ds: Dataset) -> float:
    pts = [(t, e) for ok, t, e in trace[:budget] if ok and t is not None and e is not None]
    return hypervolume(pts, ds.reference) / ds.front_hv if pts and ds.front_hv else 0.0


def _median_or_null(values: list[float]) -> float | None:
    m = float(np.median(values))
    return None if math.isinf(m) else m


def summarise(traces: dict, datasets: dict[str, Dataset], budgets: list[int]) -> list[dict]:
    rows = []
    for (dataset, strategy), per in sorted(traces.items()):
        ds = datasets[dataset]
        for b in budgets:
            runs = [t for (budget, _seed), t in per.items() if budget in (b, None)]
            if not runs:
                continue
            ratios = [best_ratio(t, b, ds.optimum) for t in runs]
            with np.errstate(invalid="ignore"):  # inf - inf where runs found no valid configuration: nan
                q25, q75 = np.percentile(ratios, [25, 75])
            row = {
                "dataset": dataset,
                "strategy": strategy,
                "budget": b,
                "median_ratio": float(np.median(ratios)),
                "iqr": float(q75 - q25),
                "evals_to_5pct": _median_or_null([evals_to(t, b, ds.optimum, 0.05) for t in runs]),
                "evals_to_1pct": _median_or_null([evals_to(t, b, ds.optimum, 0.01) for t in runs]),
                "runs_within_1pct": sum(r <= 1.01 + 1e-12 for r in ratios),
                "seeds": len(runs),
            }
            if ds.energy:
                row["median_hv_fraction"] = float(np.median([hv_fraction(t, b, ds) for t in runs]))
            rows.append(row)
    return rows


def verdict(rows: list[dict], ours: str = "swarm", seeds: int | None = None) -> list[str]:
    """The targets of the benchmark, checked for our strategy ``ours`` (``swarm`` or
    ``swarm:transfer``): against the best peer at every budget, and at budget 100 against the
    best peer at budget 200.

    A check where ``ours`` has no finished run, or (with ``seeds``, the runs planned per file
    and budget) fewer runs than planned, is not met: a median of the runs that did not fail
    says nothing of those that did.
    """
    lines = []
    by, hits, runs = defaultdict(dict), {}, {}
    for r in rows:
        by[(r["dataset"], r["budget"])][r["strategy"]] = r["median_ratio"]
        hits[(r["dataset"], r["budget"], r["strategy"])] = f"{r.get('runs_within_1pct', '?')}/{r.get('seeds', '?')}"
        runs[(r["dataset"], r["budget"], r["strategy"])] = r.get("seeds")

    def lost(dataset: str, b: int) -> str | None:
        """Why the check of ``ours`` at budget ``b`` cannot be met, or None."""
        if ours not in by[(dataset, b)]:
            return f"not met: no run of {ours} finished"
        n = runs[(dataset, b, ours)]
        if seeds is not None and isinstance(n, int) and n < seeds:
            return f"not met: {seeds - n} of {seeds} runs of {ours} failed"
        return None

    for dataset in sorted({r["dataset"] for r in rows}):
        budgets = sorted(b for d, b in by if d == dataset)
        for b in budgets:
            cell = by[(dataset, b)]
            peers = {k: v for k, v in cell.items() if k.startswith(("kt:", "optuna:"))}
            if not peers:
                continue
            best_peer = min(peers, key=peers.get)
            if ours not in cell:
                lines.append(f"{dataset} @ {b}: best peer {best_peer} {peers[best_peer]:.4f} -> {lost(dataset, b)}")
                continue
            ok = cell[ours] <= peers[best_peer] + 1e-12
            outcome = lost(dataset, b) or ("met" if ok else f"short by {_gap(cell[ours], peers[best_peer])}")
            lines.append(f"{dataset} @ {b}: {ours} {cell[ours]:.4f} vs best peer {best_peer} {peers[best_peer]:.4f} -> {outcome}")
        if (dataset, 100) in by and (dataset, 200) in by:
            peers200 = {k: v for k, v in by[(dataset, 200)].items() if k.startswith(("kt:", "optuna:"))}
            if peers200:
                best_peer = min(peers200, key=peers200.get)
                peer = f"best peer@200 {best_peer} {peers200[best_peer]:.4f} ({hits[(dataset, 200, best_peer)]})"
                if ours not in by[(dataset, 100)]:
                    lines.append(f"{dataset}: {peer} -> {lost(dataset, 100)}")
                    continue
                s100 = by[(dataset, 100)][ours]
                ok = s100 <= peers200[best_peer] + 1e-12
                outcome = lost(dataset, 100) or (
                    "met (2x sample efficiency)" if ok else f"short by {_gap(s100, peers200[best_peer])}")
                lines.append(f"{dataset}: {ours}@100 {s100:.4f} ({hits[(dataset, 100, ours)]} runs within 1%) vs "
                             f"{peer} -> {outcome}")
    return lines


def aggregate_line(score: dict[str, dict[str, float]], ours: str = "swarm",
                   errors: dict[str, dict[str, float | None]] | None = None, failed: int = 0) -> str | None:
    """The aggregate-score target for ``ours`` against the best peer's, or None without a peer;
    with both standard errors (``errors``, :func:`score_errors_of`), the difference and its
    standard error (independent runs: the root of the sum of squares).

    Not met, whatever the figures, where ``ours`` has no score on a file that a peer has, or
    ``failed`` (the count of its runs that failed) is not 0: its aggregate leaves those runs
    out, which would favour it on exactly the files it could not handle.
    """
    peers = {k: v["aggregate"] for k, v in score.items() if k.startswith(("kt:", "optuna:"))}
    if not peers:
        return None
    files = {f for k in peers for f in score[k] if f != "aggregate"}
    missing = sorted(files - set(score.get(ours, {})))
    if missing:
        return f"aggregate score: {ours} has no score on {', '.join(missing)} (no run finished there) -> not met"
    best = max(peers, key=peers.get)
    mine = score[ours]["aggregate"]
    if failed:
        return (f"aggregate score: {ours} {mine:.3f} vs best peer {best} {peers[best]:.3f} -> not met: "
                f"{failed} runs of {ours} failed and are not in its score")
    line = (f"aggregate score: {ours} {mine:.3f} vs best peer {best} {peers[best]:.3f} -> "
            + ("met" if mine >= peers[best] else f"short by {peers[best] - mine:.3f}"))
    se = [(errors or {}).get(k, {}).get("aggregate") for k in (ours, best)]
    if None not in se:
        line += f" (difference {mine - peers[best]:+.3f}, standard error {float(np.hypot(*se)):.3f})"
    return line


def _gap(ours: float, peer: float) -> str:
    return f"{100 * (ours / peer - 1):.2f}%"


# --- output ---------------------------------------------------------------------------------


def markdown(rows: list[dict]) -> str:
    energy = any("median_hv_fraction" in r for r in rows)
    head = ("| dataset | strategy | budget | median best/optimum | IQR | evals to 5% | evals to 1% | runs within 1% |"
            + (" HV fraction |" if energy else ""))
    sep = "|---|---|---:|---:|---:|---:|---:|---:|" + ("---:|" if energy else "")
    out = [head, sep]
    fmt = lambda v: "—" if v is None else f"{v:g}"  # noqa: E731  (a median of 20 runs may end in .5)
    for r in rows:
        line = (f"| {r['dataset']} | {r['strategy']} | {r['budget']} | {r['median_ratio']:.4f} | {r['iqr']:.4f} | "
                f"{fmt(r['evals_to_5pct'])} | {fmt(r['evals_to_1pct'])} | {r['runs_within_1pct']}/{r['seeds']} |")
        if energy:
            line += f" {r['median_hv_fraction']:.3f} |" if "median_hv_fraction" in r else " |"
        out.append(line)
    return "\n".join(out)


def figure(rows: list[dict], out_dir: Path) -> tuple[Path, Path | None]:
    """Median best/optimum against budget, one panel per dataset (HTML, and PNG via Chromium)."""
    import plotly.graph_objects as go
    from plotly.colors import qualitative
    from plotly.subplots import make_subplots

    datasets = sorted({r["dataset"] for r in rows})
    ncols = min(4, len(datasets))
    nrows = math.ceil(len(datasets) / ncols)
    fig = make_subplots(rows=nrows, cols=ncols, subplot_titles=datasets, shared_yaxes=False)
    strategies = sorted({r["strategy"] for r in rows})
    budgets = sorted({r["budget"] for r in rows})
    # One colour per strategy in every panel (13 strategies: more than the default 10 colours).
    palette = [c for c in qualitative.Dark24 if c.lower() != "#222a2a"]
    colour = {s: "black" if s == "swarm" else palette[i % len(palette)] for i, s in enumerate(strategies)}
    for i, d in enumerate(datasets):
        row, col = divmod(i, ncols)
        row, col = row + 1, col + 1
        for s in strategies:
            pts = sorted((r["budget"], r["median_ratio"]) for r in rows if r["dataset"] == d and r["strategy"] == s)
            if not pts:
                continue
            fig.add_trace(go.Scatter(
                x=[p[0] for p in pts], y=[p[1] for p in pts], mode="lines+markers", name=s, legendgroup=s,
                showlegend=i == 0, line={"width": 4 if s == "swarm" else 1.5, "color": colour[s]},
            ), row=row, col=col)
        fig.update_xaxes(type="log", title_text="evaluations", tickvals=budgets, row=row, col=col)
        fig.update_yaxes(title_text="best / optimum (median)", row=row, col=col)
    width, height = 420 * ncols + 260, 380 * nrows + 100
    fig.update_layout(height=height, width=width, title="Search efficiency on recorded GPU landscapes")
    out_dir.mkdir(parents=True, exist_ok=True)
    html = out_dir / "search_efficiency.html"
    fig.write_html(html, include_plotlyjs=True)
    png = out_dir / "search_efficiency.png"
    try:
        import shutil

        from playwright.sync_api import sync_playwright

        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": width + 40, "height": height + 40})
            page.goto(html.resolve().as_uri())
            page.wait_for_selector(".main-svg")
            page.screenshot(path=str(png))
            browser.close()
    except Exception as exc:  # noqa: BLE001 - the PNG is a convenience; the HTML has everything
        print(f"PNG not written ({type(exc).__name__}: {exc}); see {html}", file=sys.stderr)
        png = None
    return html, png


def _read_traces(path: Path | None) -> dict[tuple, tuple]:
    """Finished runs of ``--traces``: :func:`_job_key` -> the worker's result.

    Raises:
        ValueError: a line that is not such a record (a write cut short, say), with its number.
    """
    out: dict[tuple, tuple] = {}
    if path is None or not path.exists():
        return out
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if line.strip():
            try:
                kind, dataset, name, seed, budget, trace, seconds, cpu_s, *rest = json.loads(line)
                learned = rest[0] if rest else []  # older records lack the files learned from
                identity = rest[1] if len(rest) > 1 else None  # and the contents (then never reused)
                if not (kind in ("ours", "kt", "optuna") and isinstance(dataset, str) and isinstance(name, str)
                        and _count(seed, 0) and (budget is None or _count(budget, 1)) and isinstance(trace, list)
                        and all(_evaluation_ok(e) for e in trace) and all(_number(x) and x >= 0 for x in (seconds, cpu_s))
                        and isinstance(learned, list) and all(isinstance(f, str) for f in learned)
                        and (identity is None or isinstance(identity, str))):
                    raise ValueError("a field of the wrong type or range")
                out[(dataset, name, seed, budget, tuple(learned), identity)] = (
                    kind, dataset, name, seed, budget, [tuple(e) for e in trace], seconds, cpu_s)
            except (ValueError, TypeError) as exc:
                raise ValueError(f"line {number} is not a finished run ({exc}); an interrupted write leaves "
                                 "such a last line: remove it and its run is done again") from None
    return out


def _evaluation_ok(e: Any) -> bool:
    """Whether a stored trace entry is ``[valid, time ms or null, energy J or null]``: a time,
    where there is one, > 0, and a valid entry has one."""
    return (isinstance(e, list) and len(e) == 3 and isinstance(e[0], bool)
            and (e[1] is None or (_number(e[1]) and e[1] > 0)) and (e[1] is not None or not e[0])
            and (e[2] is None or _number(e[2])))


def _learns_from(job: tuple) -> tuple[str, ...]:
    """The files a job's transfer run learns from first (:func:`siblings`; none for others)."""
    return tuple(d.name for d in job[6]) if len(job) > 6 else ()


def _job_key(job: tuple) -> tuple:
    """What makes a finished run reusable from ``--traces``: file, strategy, seed, budget, the
    files a transfer run learned from (another set of files is another run) and
    :func:`_identity` (the files' contents and our generation size)."""
    return (job[1].name, job[2], job[3], job[4], _learns_from(job), _identity(job))


def _identity(job: tuple) -> str:
    """The sha256 of the job's file and of the files it learns from, and for our runs the
    candidates per generation and the endgame's share (``SWARM_ENDGAME_SHARE``, its value as
    the runs read it): a run stored under the same names but other contents, another
    ``--batch-size`` or another endgame is not this run (a record without them never matches)."""
    files = [job[1], *(job[6] if len(job) > 6 else ())]
    ours = f";batch {job[5]};endgame {_endgame_share():g}"
    return ",".join(d.sha256 for d in files) + (ours if job[0] == "ours" else "")


def random_curves(datasets: dict[str, Dataset], horizon: int) -> dict[str, Any]:
    """Per dataset: the random-search curve of :mod:`benchmarks.methodology_score` and the
    worst valid recorded cost (:meth:`Dataset.cost`; time in ms) that fills a run's curve before
    its first valid find."""
    from kernels.interchange.tuning_cache import load_cache

    out = {}
    for name, ds in datasets.items():
        cache = load_cache(ds.path)
        valid = valid_values(cache)
        times = [ds.cost(valid.get(k)) for k in cache.entries if k not in cache.outside]
        worst = max(t for t in times if t is not None)
        out[name] = (random_search_curve(times, horizon), worst)
    return out


def run_scores_by(traces: dict, datasets: dict[str, Dataset], horizon: int) -> dict[str, dict[str, np.ndarray]]:
    """Per strategy and dataset, each run's own score (:func:`benchmarks.methodology_score.run_scores`),
    ``float64 [runs]``. A strategy run once per budget is scored on its runs at the largest budget
    (``horizon``)."""
    baselines = random_curves(datasets, horizon)
    per: dict[str, dict[str, np.ndarray]] = defaultdict(dict)
    for (dataset, strategy), runs in sorted(traces.items()):
        chosen = [t for (budget, _seed), t in runs.items() if budget in (None, horizon)]
        if not chosen:
            continue
        curve, worst = baselines[dataset]
        curves = [best_so_far([t if ok else None for ok, t, _ in trace], horizon, worst) for trace in chosen]
        per[strategy][dataset] = run_scores(curves, curve, datasets[dataset].optimum)
    return dict(per)


def scores_of(per_run: dict[str, dict[str, np.ndarray]]) -> dict[str, dict[str, float]]:
    """``{strategy: {"aggregate": mean over datasets, <dataset>: mean over runs}}``; the aggregate
    is over the datasets where the strategy has runs."""
    out = {}
    for strategy, by_file in per_run.items():
        files = {d: float(np.mean(v)) for d, v in by_file.items()}
        out[strategy] = {"aggregate": float(np.mean(list(files.values()))), **files}
    return out


def score_errors_of(per_run: dict[str, dict[str, np.ndarray]]) -> dict[str, dict[str, float | None]]:
    """Standard errors of :func:`scores_of`'s figures over runs
    (:func:`benchmarks.methodology_score.standard_error`; None with a single run)."""
    return {strategy: {"aggregate": standard_error(list(by_file.values())),
                       **{d: standard_error([v]) for d, v in by_file.items()}}
            for strategy, by_file in per_run.items()}


def score_table(score: dict[str, dict[str, float]], cpu: dict[str, dict[str, float]],
                errors: dict[str, dict[str, float | None]] | None = None) -> str:
    """Strategies by aggregate score, best first, with its standard error over runs (blank where
    unknown: one run per file, or a reused report without them) and CPU-milliseconds per evaluation."""
    errors = errors or {}
    out = ["| strategy | aggregate score | standard error | files | CPU ms / evaluation |", "|---|---:|---:|---:|---:|"]
    for s in sorted(score, key=lambda k: -score[k]["aggregate"]):
        c = cpu.get(s, {})
        per_eval = 1000 * c.get("cpu_s", 0.0) / max(c.get("evaluations", 0), 1)
        se = errors.get(s, {}).get("aggregate")
        out.append(f"| {s} | {score[s]['aggregate']:.3f} | {'' if se is None else f'{se:.3f}'} | {len(score[s]) - 1} "
                   f"| {per_eval:.1f} |")
    return "\n".join(out)


def versus_table(rows: list[dict], score: dict[str, dict[str, float]], ours: str = "swarm",
                 seeds: int | None = None) -> str:
    """Per dataset and budget: ``ours``'s median best/optimum against the best peer's (``kt:``
    and ``optuna:`` strategies), and per dataset ``ours``'s and the best peer's score; a cell
    where ``ours`` is behind, or ran fewer than ``seeds`` runs (some failed), is marked ✗."""
    by: dict[tuple[str, int], dict[str, float]] = defaultdict(dict)
    short: set[tuple[str, int]] = set()
    for r in rows:
        by[(r["dataset"], r["budget"])][r["strategy"]] = r["median_ratio"]
        if r["strategy"] == ours and seeds is not None and isinstance(r.get("seeds"), int) and r["seeds"] < seeds:
            short.add((r["dataset"], r["budget"]))
    budgets = sorted({b for _, b in by})
    head = "| dataset | " + " | ".join(f"{ours} / best peer @{b}" for b in budgets) + f" | score {ours} / best peer |"
    out = [head, "|---|" + "---:|" * (len(budgets) + 1)]
    for d in sorted({d for d, _ in by}):
        cells = []
        for b in budgets:
            cell = by.get((d, b), {})
            peers = {k: v for k, v in cell.items() if k.startswith(("kt:", "optuna:"))}
            if ours not in cell or not peers:
                cells.append("")
                continue
            best = min(peers, key=peers.get)
            mark = "" if cell[ours] <= peers[best] + 1e-12 and (d, b) not in short else " ✗"
            cells.append(f"{cell[ours]:.3f} / {peers[best]:.3f} ({best.split(':', 1)[1]}){mark}")
        peer_scores = {k: v[d] for k, v in score.items() if k.startswith(("kt:", "optuna:")) and d in v}
        sc = ""
        if ours in score and d in score[ours] and peer_scores:
            best = max(peer_scores, key=peer_scores.get)
            sc = f"{score[ours][d]:.3f} / {peer_scores[best]:.3f} ({best.split(':', 1)[1]})"
        out.append(f"| {d} | " + " | ".join(cells) + f" | {sc} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", action="append", type=Path, help="Kernel Tuner cache file (repeatable)")
    parser.add_argument("--seeds", type=int, default=None, help=f"runs per strategy (default {DEFAULT_SEEDS}; --quick {QUICK_SEEDS})")
    parser.add_argument("--first-seed", type=int, default=0,
                        help="first seed (default 0): runs seeds N .. N + seeds - 1, to measure on seeds the report did not use")
    parser.add_argument("--budgets", default=None, help="default 50,100,200,400 (--quick 50,100,200)")
    parser.add_argument("--strategies", default="default",
                        help="comma-separated subset (e.g. swarm,kt:pso,optuna:tpe); 'default': the swarm and every "
                             "peer; 'all': also our agents alone (agent:<kind>)")
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK_SEEDS} seeds, budgets up to 200, the swarm and swarm:transfer against {', '.join(QUICK_PEERS)}")
    parser.add_argument("--batch-size", type=int, default=4, help="candidates per generation of our runs")
    parser.add_argument("--jobs", type=int, default=min(os.cpu_count() or 1, MAX_JOBS),
                        help=f"worker processes running the runs (default: the CPU count, at most {MAX_JOBS})")
    parser.add_argument("--run-limit", type=float, default=RUN_LIMIT_S,
                        help=f"wall seconds one run may take before it is stopped and listed as failed "
                             f"(default {RUN_LIMIT_S:g}; 0: no limit)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    parser.add_argument("--traces", type=Path, default=None,
                        help="JSON-lines file of finished runs: runs already in it (same file and contents, strategy, seed, "
                             "budget; ours also --batch-size and SWARM_ENDGAME_SHARE) are read instead of run again, "
                             "new ones are appended")
    parser.add_argument("--reuse", type=Path, default=None,
                        help="an earlier report's .json: the strategies not run now (the peers, say) are taken from it "
                             "(same files, seeds and budgets; our mixes also the same --batch-size and "
                             "SWARM_ENDGAME_SHARE), so that a change of ours is measured without rerunning them")
    args = parser.parse_args(argv)
    seeds = args.seeds if args.seeds is not None else (QUICK_SEEDS if args.quick else DEFAULT_SEEDS)
    # Seeds reach numpy.random.seed (below 2**32) and, plus 1000 per earlier file of a transfer
    # run, a run's seed field: a bound far below both.
    if not (1 <= seeds <= MAX_SEED and 0 <= args.first_seed <= MAX_SEED - seeds):
        parser.error(f"--seeds must be 1 to {MAX_SEED} and --first-seed 0 to {MAX_SEED} - seeds "
                     f"(got {seeds} and {args.first_seed})")
    spec = args.budgets if args.budgets is not None else ("50,100,200" if args.quick else "50,100,200,400")
    parts = [b.strip() for b in spec.split(",")]
    if not all(b.isascii() and b.isdigit() for b in parts) or len(set(map(int, parts))) < len(parts):
        parser.error(f"--budgets takes distinct comma-separated whole numbers, got {args.budgets!r}")
    budgets = sorted(int(b) for b in parts)
    if not (math.isfinite(args.run_limit) and (args.run_limit == 0 or 1 <= args.run_limit <= MAX_RUN_LIMIT_S)):
        parser.error(f"--run-limit must be 0 (no limit) or 1 to {MAX_RUN_LIMIT_S} seconds (got {args.run_limit})")
    if not (1 <= budgets[0] and budgets[-1] <= MAX_BUDGET and 1 <= args.jobs <= MAX_JOBS and args.batch_size >= 1):
        parser.error(f"budgets must be 1 to {MAX_BUDGET}, --jobs 1 to {MAX_JOBS} and --batch-size at least 1 "
                     f"(got {budgets}, {args.jobs} and {args.batch_size})")
    try:  # our runs' workers read it; a bad value is an error now, not a failure of each of them
        _endgame_share()
    except ValueError as exc:
        parser.error(str(exc))
    try:  # now, not after every run
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        parser.error(f"--out {args.out}: {exc}")
    caches = args.cache or default_caches()
    if not caches:
        parser.error("no cache files: pass --cache FILE")
    peers = [*(f"kt:{s}" for s in kt_strategies()), *optuna_strategies()]
    everything = [*OUR_MIXES, *(f"agent:{a}" for a in OUR_AGENTS), *peers]
    if args.strategies == "default":
        strategies = [*OUR_MIXES, *QUICK_PEERS] if args.quick else [*OUR_MIXES, *peers]
    elif args.strategies == "all":
        strategies = everything
    else:
        strategies = [s.strip() for s in args.strategies.split(",")]
    unknown = set(strategies) - set(everything)
    if unknown:
        parser.error(f"unknown strategies {sorted(unknown)}; known: {', '.join(everything)}")
    if len(set(strategies)) < len(strategies):
        parser.error(f"--strategies names a strategy twice: {args.strategies!r}")
    left_out = {f"kt:{k}": v for k, v in KT_LEFT_OUT.items() if f"kt:{k}" not in peers}
    if "optuna:cmaes" not in peers:
        left_out["optuna:cmaes"] = "needs the cmaes package, not installed"
    # an earlier report may hold peers that cannot run here (a package not installed)
    known = [*everything, *(f"kt:{k}" for k in (*KT_STRATEGIES, *KT_LEFT_OUT)), "optuna:tpe", "optuna:cmaes"]
    reused_report = _read_report(args.reuse, parser, known) if args.reuse else None
    if reused_report is not None and (why := _ours_mismatch(reused_report, strategies, _our_settings(args))):
        parser.error(f"--reuse {args.reuse}: {why}")
    try:  # before the files are loaded: a bad --traces file is refused at once
        stored = _read_traces(args.traces)
        if args.traces is not None and not args.traces.parent.is_dir():
            raise FileNotFoundError(f"no folder {args.traces.parent}")
    except (OSError, ValueError) as exc:
        parser.error(f"--traces {args.traces}: {exc}")

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="search-eff-") as workdir:
        datasets = _load_all(caches, Path(workdir), parser)
        if reused_report is not None and (why := _reuse_mismatch(
                reused_report, list(datasets), budgets, seeds, args.first_seed,
                {d.name: d.sha256 for d in datasets.values()})):
            parser.error(f"--reuse {args.reuse}: {why}")
        jobs = _plan(datasets, strategies, budgets, range(args.first_seed, args.first_seed + seeds), args.batch_size)
        try:
            done = _run_jobs(jobs, stored, args.traces, args.jobs, args.run_limit, progress=not args.json, started=started)
        except OSError as exc:  # the traces file cannot be appended to
            parser.error(f"--traces {args.traces}: {exc}")
    _write_report(args, argv, datasets, strategies, budgets, seeds, left_out, reused_report, done, started)
    return 0


def _load_all(caches: list, workdir: Path, parser: argparse.ArgumentParser) -> dict[str, Dataset]:
    """Every ``--cache`` file by its data set name; a usage error for a file that cannot be used
    or two files of the same name (a report and ``--traces`` tell files apart by name)."""
    from kernels.interchange.tuning_cache import TuningCacheError

    datasets: dict[str, Dataset] = {}
    for c in caches:
        try:
            ds = load_dataset(Path(c), workdir)
        except (OSError, TuningCacheError, ValueError) as exc:
            parser.error(f"--cache {c}: {exc}")
        if ds.name in datasets and datasets[ds.name].path.resolve() != ds.path.resolve():
            parser.error(f"--cache {c}: another file has the same name, {datasets[ds.name].path}")
        datasets[ds.name] = ds
    return datasets


def per_budget(kind: str, name: str) -> bool:
    """Whether strategy ``name`` (of run ``kind``: ``ours``, ``kt``, ``optuna``) runs once per
    budget: our runs (their endgame depends on the budget) and the Kernel Tuner strategies that
    are not :data:`KT_BUDGET_FREE`; the others run once at the largest budget."""
    if kind == "ours":
        return True
    return kind == "kt" and name.split(":", 1)[1] not in KT_BUDGET_FREE


def _plan(datasets: dict[str, Dataset], strategies: list[str], budgets: list[int], seeds: range,
          batch_size: int) -> list[tuple]:
    """Every run as a worker's arguments (:func:`_task`), longest first, so that the pool does
    not end waiting on one slow run. Strategies run once per budget where :func:`per_budget`
    says so, else once at the largest budget (its prefixes give the smaller ones)."""
    jobs = []
    for ds in datasets.values():
        for s in strategies:
            for seed in seeds:
                kind = "ours" if is_ours(s) else s.split(":", 1)[0]
                earlier = (siblings(ds, list(datasets.values())),) if s == "swarm:transfer" else ()
                size = batch_size if kind == "ours" else 0
                for b in (budgets if per_budget(kind, s) else budgets[-1:]):
                    jobs.append((kind, ds, s, seed, b, size, *earlier))
    jobs.sort(key=lambda j: (j[0] == "kt" and "bayes" in j[2], j[0] == "ours", len(_learns_from(j)), j[4]), reverse=True)
    return jobs


@dataclass
class _Done:
    """What the runs gave: traces by (file, strategy) and (budget or None, seed); wall and CPU
    seconds and evaluations by strategy; the failed runs, one line each, and their count by
    strategy; the workers used."""

    traces: dict[tuple[str, str], dict] = field(default_factory=lambda: defaultdict(dict))
    wall_s: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    cpu: dict[str, dict[str, float]] = field(default_factory=lambda: defaultdict(lambda: {"cpu_s": 0.0, "evaluations": 0}))
    failed: list[str] = field(default_factory=list)
    failed_by: Counter = field(default_factory=Counter)
    workers: int = 1


def _run_jobs(jobs: list[tuple], stored: dict[tuple, tuple], traces_path: Path | None, max_workers: int,
              run_limit_s: float, *, progress: bool, started: float) -> _Done:
    """Run ``jobs`` in up to ``max_workers`` processes (those in ``stored`` are read instead),
    appending each finished run to ``traces_path``; a run that raises is listed as failed.

    Raises:
        OSError: ``traces_path`` cannot be opened for appending.
    """
    done = _Done()
    reused = [stored[_job_key(j)] for j in jobs if _job_key(j) in stored]
    jobs = [j for j in jobs if _job_key(j) not in stored]
    done.workers = max(1, min(max_workers, len(jobs)))
    count = 0
    with (traces_path.open("a") if traces_path else contextlib.nullcontext()) as sink, ProcessPoolExecutor(
            max_workers=done.workers, initializer=_init_worker, initargs=(run_limit_s,)) as pool:
        futures = [pool.submit(_task, *j) for j in jobs]
        for j, f in [*((None, r) for r in reused), *zip(jobs, futures)]:
            try:
                result = f if j is None else f.result()
            except Exception as exc:  # noqa: BLE001 - one broken run must not sink the benchmark
                done.failed.append(f"{j[2]} on {j[1].name}, seed {j[3]}, budget {j[4]}: {type(exc).__name__}: {exc}")
                done.failed_by[j[2]] += 1
                print(f"run failed: {done.failed[-1]}", file=sys.stderr)
                continue
            kind, dataset, name, seed, budget, trace, seconds, cpu_s = result
            if sink is not None and j is not None:
                sink.write(json.dumps([*result, list(_learns_from(j)), _identity(j)]) + "\n")
                sink.flush()
            done.traces[(dataset, name)][(budget if per_budget(kind, name) else None, seed)] = trace
            done.wall_s[name] += seconds
            done.cpu[name]["cpu_s"] += cpu_s
            done.cpu[name]["evaluations"] += len(trace)
            count += 1
            if progress and count % 50 == 0:
                print(f"{count}/{len(jobs) + len(reused)} runs, {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return done


def _objective_of(ds: Dataset) -> dict[str, Any]:
    """What ``ds`` is searched on: the recorded ``field``, ``maximize``, and how its values
    read as the cost of its best/optimum ratios (``"value"``, ``"ratio"`` or ``"range"``,
    :func:`reading_of`)."""
    return {"field": ds.field, "maximize": ds.maximize, "cost": ds.reading}


def _objective_note(datasets: dict[str, Dataset]) -> str:
    """A report paragraph naming the files searched on an objective other than time, and how
    their best/optimum reads; empty when every file is searched on time."""
    read = {"value": "the ratio of the values", "ratio": "how many times worse than the optimum",
            "range": "1 + the distance from the optimum as a fraction of the recorded range"}
    other = [f"{d.name} ({d.field}, {'maximised' if d.maximize else 'minimised'}; best/optimum is "
             f"{read[d.reading]})" for d in datasets.values() if d.field != "time"]
    return f"\n\nSearched on their objective, which is not a time: {'; '.join(other)}." if other else ""


def _write_report(args: argparse.Namespace, argv: list[str] | None, datasets: dict[str, Dataset], strategies: list[str],
            budgets: list[int], seeds: int, left_out: dict[str, str], reused_report: dict | None, done: _Done,
            started: float) -> None:
    """Summarise the runs (with an earlier report's strategies not run now), write
    ``search_efficiency.md``, ``.json`` and the figure to ``--out``, and print them."""
    traces, cpu, failed = done.traces, done.cpu, done.failed
    rows = summarise(traces, datasets, budgets)
    per_run = run_scores_by(traces, datasets, budgets[-1])
    score, errors = scores_of(per_run), score_errors_of(per_run)
    taken_from = ""
    if reused_report is not None:
        taken = sorted({r["strategy"] for r in reused_report["results"]} - set(strategies))
        rows = sorted([*rows, *(r for r in reused_report["results"] if r["strategy"] in taken
                                and r["dataset"] in datasets and r["budget"] in budgets)],
                      key=lambda r: (r["dataset"], r["strategy"], r["budget"]))
        score.update({k: v for k, v in reused_report["scores"].items() if k in taken})
        errors.update({k: v for k, v in reused_report.get("score_standard_errors", {}).items() if k in taken})
        cpu.update({k: v for k, v in reused_report.get("cpu_by_strategy", {}).items() if k in taken})
        left_out = {k: v for k, v in left_out.items() if k not in taken}
        for line in reused_report.get("failed_runs", []):  # the failures of what is taken count as before
            name = line.split(" on ", 1)[0] if isinstance(line, str) else None
            if name in taken:
                failed.append(line)
                done.failed_by[name] += 1
        taken_from = (f"Taken from `{args.reuse}` ({reused_report.get('host', 'host not recorded')}): "
                      f"{', '.join(taken)}.\n\n")
    mixes = [m for m in OUR_MIXES if m in score or m in strategies]
    lines = [line for m in mixes
             for line in (*verdict(rows, m, seeds), aggregate_line(score, m, errors, done.failed_by[m])) if line]
    html, png = figure(rows, args.out) if rows else (None, None)  # no run finished: nothing to draw
    elapsed = time.perf_counter() - started
    command = " ".join(["python -m benchmarks.search_efficiency", *(argv if argv is not None else sys.argv[1:])])
    ran = [s for s in strategies if s.startswith(("kt:", "optuna:"))]
    host = host_line()
    (args.out / "search_efficiency.md").write_text(
        f"# Search efficiency\n\nHost: {host}. `{command}`: {_seed_range(args.first_seed, seeds)}, budgets {budgets}, "
        f"{len(datasets)} recorded files, {elapsed:.0f} s with {done.workers} workers.\n\n"
        f"Peers run: {', '.join(ran) or 'none'}.\n\n{taken_from}Left out: "
        + "; ".join(f"{k} ({v})" for k, v in left_out.items())
        + f".\n\n`swarm` is a first run of the kernel (nothing learned before); `swarm:transfer` runs after "
        f"{PRIOR_BUDGET}-evaluation runs on the kernel's other files of the same parameters, and starts from their "
        "evidence (the same as `swarm` where a file has none"
        + (f": {', '.join(alone)}" if (alone := [d.name for d in datasets.values()
                                                  if not siblings(d, list(datasets.values()))]) else "")
        + ")."
        + _objective_note(datasets)
        + f"\n\n## Aggregate score (autotuning methodology, evaluations 1..{budgets[-1]})\n\n"
        + "The standard error is over runs (seeds), the files held fixed: with five or more runs per file, a "
        "difference between two strategies smaller than about twice the root of the sum of their squares is not "
        "resolved by this many runs.\n\n"
        + score_table(score, cpu, errors)
        + "".join(f"\n\n## {m} against the best peer (median best/optimum; ✗: {m} is behind, or some of its runs failed)\n\n"
                  + versus_table(rows, score, m, seeds) for m in mixes)
        + "\n\n## Targets\n\n" + "\n".join(f"- {line}" for line in lines)
        + "\n\n## Every strategy\n\n" + markdown(rows) + "\n"
    )
    payload = json.dumps({"host": host, "command": command, "first_seed": args.first_seed,
                          "files": {d.name: d.sha256 for d in datasets.values()},
                          "objectives": {d.name: _objective_of(d) for d in datasets.values()}, "results": [_row_to_json(r) for r in rows], "targets": lines, "scores": score,
                          "score_standard_errors": errors, "seconds": elapsed, "our_runs": _our_settings(args),
                          "cpu_by_strategy": {k: {**v, "cpu_ms_per_evaluation": 1000 * v["cpu_s"] / max(v["evaluations"], 1)}
                                              for k, v in cpu.items()},
                          "wall_seconds_by_strategy": dict(done.wall_s), "left_out": left_out, "failed_runs": failed},
                         indent=1, allow_nan=False)  # strict JSON: non-finite medians are null (_row_to_json)
    (args.out / "search_efficiency.json").write_text(payload + "\n")
    if args.json:
        print(payload)
    else:
        print(f"{taken_from}## Aggregate score\n\n{score_table(score, cpu, errors)}")
        for m in mixes:
            print(f"\n## {m} against the best peer\n\n{versus_table(rows, score, m, seeds)}")
        print("\n## Targets\n\n" + "\n".join(f"- {line}" for line in lines))
        if failed:
            print(f"{len(failed)} runs failed:\n" + "\n".join(failed))
        print(f"{elapsed:.0f} s; figure: {html or 'none (no run finished)'}" + (f", {png}" if png else ""))


if __name__ == "__main__":
    raise SystemExit(main())
