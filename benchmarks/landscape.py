"""How hard each recorded landscape makes its optimum to find: the figures behind the search
benchmark's medians.

    python -m benchmarks.landscape [--cache FILE ...] [--out DIR] [--json]

Per Kernel Tuner cache file (default: every file of the shared tuning-cache folder), over the
recorded configurations of its search space with a valid value of the field a search of it
minimises or maximises (``objective``: the ``time``, ms, or the objective of a file that records
none, such as a hyperparameter tuner's ``score``; ``TuningCache.searched``). Failures, legacy
``1e20`` markers and entries outside ``tune_params`` are left out (``failed``, ``outside``), and
a file with a valid time of 0 is refused, as the search benchmark does. Each value is read as
the search benchmark's cost (``benchmarks.search_efficiency.cost``): a time as itself; a rate or
energy as how many times worse than the optimum; a score, whose zero is arbitrary, as 1 plus
its distance from the optimum as a share of the recorded range. "Time" below is that cost.

- ``second_best``: the second-best time / the optimum (the optimum's margin).
- ``best_neighbour``: the best time among the optimum's recorded Hamming-1 neighbours (one
  parameter changed) / the optimum. A large value makes the optimum a lone spike: no
  neighbour leads to it.
- ``within_1pct``, ``within_5pct``: configurations within 1% / 5% of the optimum, and
  ``random_evals_1pct``: the expected number of uniform random evaluations without
  replacement to reach one of the ``k`` within 1% among ``n``, ``(n + 1) / (k + 1)`` (the
  expected position of the first of ``k`` marked items in a random order of ``n``).
- ``fdc``: fitness-distance correlation (Jones & Forrest, "Fitness Distance Correlation as a
  Measure of Problem Difficulty for Genetic Algorithms", ICGA 1995): the Pearson correlation
  of log(time / optimum) with the Hamming distance to the optimum (parameters that differ).
  Near 1, fast configurations sit near the optimum and a search is led to it; near 0 the
  distance says nothing.
- ``neighbour_corr``: the Pearson correlation of a configuration's log time with the mean
  log time of its recorded Hamming-1 neighbours (Weinberger's autocorrelation at distance
  one, "Correlated and uncorrelated fitness landscapes", Biological Cybernetics 63, 1990):
  1 for a smooth landscape, 0 for one whose neighbours are unrelated.
- ``neighbour_rank``: the rank of the optimum's best neighbour among all configurations
  (the optimum is 1): a search that climbs from its best ``k`` configurations steps onto the
  optimum from a neighbour only once ``k`` reaches this rank.

Output: ``<out>/landscape.md`` (table) and ``landscape.json``; ``--json`` prints the JSON.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._report import emit  # noqa: E402
from benchmarks.search_efficiency import default_caches, recorded_costs  # noqa: E402
from kernels.interchange.tuning_cache import TuningCacheError, load_cache  # noqa: E402
from kernels.interchange.values import value_kind  # noqa: E402

COLUMNS = ("dataset", "objective", "configurations", "failed", "outside", "second_best", "best_neighbour",
           "within_1pct", "within_5pct", "neighbour_rank", "random_evals_1pct", "fdc", "neighbour_corr")


def _pearson(x: np.ndarray, y: np.ndarray) -> float | None:
    """Pearson correlation, or None where it is undefined (constant or too few values)."""
    with np.errstate(all="ignore"):
        if len(x) < 3 or not np.std(x) > 0 or not np.std(y) > 0:
            return None
        r = float(np.corrcoef(x, y)[0, 1])
    return r if math.isfinite(r) else None


def _neighbour_corr(index: np.ndarray, log_t: np.ndarray, rows: np.ndarray, sizes: list[int]) -> float | None:
    """Correlation of log time with the mean log time of the recorded Hamming-1 neighbours, over
    ``rows`` (indices into ``index``, an [n, p] int array of value indices; ``sizes[j]`` values
    for parameter j) that have a neighbour among ``rows``."""
    where = {tuple(index[r]): r for r in rows}
    own, around = [], []
    for r in rows:
        key = list(index[r])
        found = []
        for j, size in enumerate(sizes):
            kept = key[j]
            for other in range(size):
                if other != kept:
                    key[j] = other
                    q = where.get(tuple(key))
                    if q is not None:
                        found.append(log_t[q])
            key[j] = kept
        if found:
            own.append(log_t[r])
            around.append(float(np.mean(found)))
    return _pearson(np.array(own), np.array(around))


def describe(path: Path) -> dict:
    """The difficulty figures of one cache file (see the module docstring).

    Raises:
        FileNotFoundError: no such file.
        kernels.interchange.tuning_cache.TuningCacheError: the file is not a Kernel Tuner cache, or it
            records no configuration with a valid value of its searched field.
        ValueError: a valid configuration records a time of 0 or less.
    """
    cache = load_cache(path)
    names = list(cache.tune_params_keys)
    values = {k: list(cache.tune_params[k]) for k in names}
    reading, _, costs = recorded_costs(cache, path)
    if not costs:
        what = "time" if cache.searched == "time" else f"'{cache.searched}'"
        raise TuningCacheError(f"{path}: no configuration with a valid {what}")
    keys = list(costs)
    t = np.array(list(costs.values()))
    # By value identity: 1 and True are two values of a parameter, as the loader keeps them.
    position = {k: {value_kind(v): i for i, v in enumerate(values[k])} for k in names}
    index = np.array([[position[k][value_kind(p[k])] for k in names] for p in map(cache.params_of, keys)])
    sizes = [len(values[k]) for k in names]
    opt = int(np.argmin(t))
    log_t = np.log(t / t[opt])
    hamming = (index != index[opt]).sum(axis=1)
    neighbours = np.flatnonzero(hamming == 1)
    within = {pct: int(np.count_nonzero(t <= t[opt] * (1 + pct / 100) + 1e-12)) for pct in (1, 5)}
    ordered = np.sort(t)
    return {
        "dataset": cache.name,
        "objective": cache.searched if reading == "value" else
        f"{cache.searched} ({'max' if cache.maximize else 'min'}, {reading})",
        "configurations": int(len(t)),
        "failed": int(len(cache.entries) - len(cache.outside) - len(t)),  # no valid value: failures and anything else
        "outside": len(cache.outside),
        "second_best": float(ordered[1] / ordered[0]) if len(t) > 1 else None,
        "best_neighbour": float(t[neighbours].min() / t[opt]) if len(neighbours) else None,
        "neighbour_rank": 1 + int(np.count_nonzero(t < t[neighbours].min())) if len(neighbours) else None,
        "within_1pct": within[1],
        "within_5pct": within[5],
        "random_evals_1pct": (len(t) + 1) / (within[1] + 1),
        "fdc": _pearson(hamming.astype(float), log_t),
        "neighbour_corr": _neighbour_corr(index, log_t, np.arange(len(t)), sizes),
    }


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 100 else f"{v:.4g}"
    return str(v)


def markdown(rows: list[dict]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(_fmt(r[c]) for c in COLUMNS) + " |" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", action="append", type=Path, help="Kernel Tuner cache file (repeatable)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    args = parser.parse_args(argv)
    caches = args.cache or default_caches()
    if not caches:
        parser.error("no cache files: pass --cache FILE")
    started = time.perf_counter()
    try:
        rows = [describe(Path(c)) for c in caches]
    except (OSError, TuningCacheError, ValueError) as exc:
        parser.error(str(exc))
    payload = {"results": rows, "seconds": time.perf_counter() - started}
    lone = [r["dataset"] for r in rows if (r["best_neighbour"] or 1.0) >= 1.1 and r["within_1pct"] == 1]
    verdict = (f"Lone-spike optima (no other configuration within 1%, best neighbour 10% or more behind): "
               f"{', '.join(lone) or 'none'}.")
    emit(args.out, "landscape", "Landscape difficulty of the recorded tuning data", argv,
         f"{len(rows)} file{'' if len(rows) == 1 else 's'}.",
         payload, markdown(rows), verdict, as_json=args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
