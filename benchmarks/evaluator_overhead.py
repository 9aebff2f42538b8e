"""Evaluator overhead, as three figures per candidate: does the evaluator time the kernel as a
bare benchmark would (fidelity), what does it add once per candidate against that candidate's
compile (fixed cost), and how many candidates a run of the demo goal evaluates per minute.

    python -m benchmarks.evaluator_overhead [--no-gemm] [--repeats 1] [--seed 0] \
        [--rep-ms 150 [1000 ...]] [--timeout 300] [--demo-budget 24 | --no-demo] \
        [--out benchmarks/results] [--json]

Candidates: the ``rmsnorm`` template at three points on shape set ``llama3-8b`` and (unless
``--no-gemm``) the ``gemm`` template at one point on ``square-1024``, CPU backend.

Per candidate and repeat, both sides compile the candidate cold: each side's source carries a
comment with a fresh token, so neither finds the other's ``.so`` (or an earlier run's) in the
compile cache. What a worker does once per process, not per candidate, is done before anything
is timed: this host's physical limits are measured (:func:`kernels.hostperf.physical_limits`)
and one small evaluation (``rmsnorm`` on ``test-small``) starts the fork server and compiles
the cache-eviction helper.

- **evaluator**: wall time (``time.perf_counter``) of one ``kernels.evaluate(...)`` call with
  default ``BenchSettings`` (compile, plan, validation child, timing child, judging), or with
  each timing budget of ``--rep-ms`` (:func:`budget`: ``rep_ms`` and ``max_reps`` scaled
  together, so that short kernels are not capped at the default's 200 calls).
- **bare benchmark**: what an engineer does without the evaluator, in this process:
  ``CpuBackend.compile`` + ``ctypes.CDLL`` load, then per timed shape the same benchmark
  protocol on one input set of that shape: :func:`kernels.evaluation.timing.bench` itself (warm-up calls
  until ``warmup_ms`` of kernel time, at least 3), with exactly as many timed calls as the
  evaluator took samples (``len(evidence.samples_ms[label])``), each after the same cache
  flush (:class:`kernels.evaluation.timing.Evictor` over the call's buffers). No sandbox, no validation,
  no NaN fill, no guards, no reference. Input generation is timed apart (``gen_s``) and is
  not part of it. OpenMP runs with ``OMP_WAIT_POLICY=PASSIVE`` here, as in the evaluator's
  timing child.

The three figures (medians over ``--repeats``; (a) and (b) at the default budget,
``BenchSettings().rep_ms``, or the first ``--rep-ms`` given when that is not among them):

(a) **fidelity** (:func:`fidelity`): per timed shape, the kernel's median time in the evaluator
    (``median(evidence.samples_ms[label])``) over its median in the bare benchmark; for the
    total, the sum of the evaluator's per-shape medians (``metrics["latency_ms"]``) over the
    sum of the bare ones. PASS when ``|ratio - 1| <= FIDELITY_TOL`` (0.03).
(b) **fixed cost per candidate** (:func:`fixed_costs`), s, against the candidate's bare compile
    time, s; PASS when fixed / compile <= :data:`FIXED_MAX_RATIO` (1x). With
    :data:`FIT_MIN_BUDGETS` or more budgets whose bare work spans :data:`FIT_MIN_SPREAD` times
    or more, :func:`fit` fits the evaluator's time less the bare compile as
    ``fixed + slope * work`` (least squares, :func:`numpy.polyfit`; with its r2), ``work``
    being the bare benchmark less its compile (load, warm-up, flushed calls): ``fixed`` is what
    the evaluator adds once per candidate whatever the budget (a compile slowed by the input
    generation it overlaps, the validation child, two children starting cold, saving and
    judging outputs), ``slope - 1`` what it adds per second of timing (NaN fills, checks
    between calls), and ``compile`` the median bare compile over those budgets. Otherwise the
    fixed cost is the evaluator's time less the bare benchmark at that one budget: an upper
    bound, as it holds the per-call cost of that budget's timed work too. The report says
    which.
(c) **candidates per minute on the demo goal** (:func:`run_demo`): ``manage.py factory run``
    on the goal ``scripts/demo`` creates (``rmsnorm``, ``cpu-x86_64``, shape set
    ``llama3-8b``, the default agent mix) with ``--demo-budget`` evaluations (default 24), as a
    subprocess with a fresh SQLite database (migrated first) and a fresh compile cache that
    holds only this host's measured limits; evaluated candidates per minute of the command's
    wall time, and per minute of the run's own time (``wall_s`` of the JSON: created to
    finished). ``--no-demo`` skips it.

Supporting detail, where it explains them: where the evaluator's time goes at each budget
(compile, the validation and timing children's wall times, the rest: this process's input
generation and references not hidden behind the compiler, judging, cleanup) next to the bare
benchmark's parts, and the fit. The tables go to stdout and ``<out>/evaluator_overhead.md``, the
raw rows, fits and figures to ``<out>/evaluator_overhead.json``; ``--json`` prints one JSON
object instead.
"""

from __future__ import annotations

import os

_OMP_GIVEN = "OMP_WAIT_POLICY" in os.environ  # the demo run gets the caller's environment
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before libgomp loads (first CDLL)

import argparse
import ctypes
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import kernels  # noqa: E402
from benchmarks._report import emit  # noqa: E402
from kernels import hostperf  # noqa: E402
from kernels.backends.cpu import CpuBackend  # noqa: E402
from kernels.evaluation.timing import BenchSettings, Evictor, bench, evict_library  # noqa: E402
from kernels.sandbox.child import bind  # noqa: E402  (the child's own binding)
from kernels.space import format_defines  # noqa: E402
from kernels.workloads import get_workload, shape_label  # noqa: E402

FIDELITY_TOL = 0.03  # |evaluator median / bare median - 1|
FIXED_MAX_RATIO = 1.0  # fixed cost per candidate / its bare compile
FIT_MIN_BUDGETS = 3  # a line through two noisy points is not a measurement
FIT_MIN_SPREAD = 3.0  # largest / smallest bare work of a fit
DEFAULT_DEMO_BUDGET = 24
# The goal scripts/demo creates (swarm/management/commands/setup_demo.py).
DEMO_GOAL = {"workload": "rmsnorm", "target": "cpu-x86_64", "shape_set": "llama3-8b"}

CANDIDATES: list[tuple[str, str, dict]] = [
    ("rmsnorm", "llama3-8b", {"ROWS_PER_CHUNK": 4, "UNROLL": 2, "VEC": 8, "ACC_DOUBLE": 0}),
    ("rmsnorm", "llama3-8b", {"ROWS_PER_CHUNK": 1, "UNROLL": 1, "VEC": 1, "ACC_DOUBLE": 1}),
    ("rmsnorm", "llama3-8b", {"ROWS_PER_CHUNK": 16, "UNROLL": 4, "VEC": 16, "ACC_DOUBLE": 0}),
]
GEMM_CANDIDATE = ("gemm", "square-1024", {
    "MR": 4, "NR": 4, "NV": 2, "VEC": 8, "KC": 256, "NC": 128, "MC": 64,
    "PACK_MIN_M": 8, "LOOP_ORDER": 0, "SCHEDULE": 0, "REG_PIN": 0,
})


class _cache_dir:
    """``KERNELS_CACHE_DIR`` pointed at a fresh empty directory for the ``with`` block (the whole
    run: the candidates' uniquely marked ``.so`` files do not pile up in the user's cache)."""

    def __enter__(self) -> Path:
        self.tmp = tempfile.TemporaryDirectory(prefix="overhead-cache-")
        self.old = os.environ.get("KERNELS_CACHE_DIR")
        os.environ["KERNELS_CACHE_DIR"] = self.tmp.name
        return Path(self.tmp.name)

    def __exit__(self, *exc) -> None:
        if self.old is None:
            os.environ.pop("KERNELS_CACHE_DIR", None)
        else:
            os.environ["KERNELS_CACHE_DIR"] = self.old
        self.tmp.cleanup()


def cold(source: str) -> str:
    """``source`` with a comment holding a fresh token: a compile-cache miss, same kernel."""
    return f"{source}\n/* evaluator_overhead {uuid.uuid4().hex} */\n"


def _call_args(wl, shape: dict, inputs: dict, outs: dict) -> tuple[list, list]:
    """(ctypes arguments of the entry point, the arrays they point into)."""
    keep, args = [], []
    for a in wl.args:
        if a.kind == "in":
            arr = np.ascontiguousarray(inputs[a.name], dtype=np.float32)
            keep.append(arr)
            args.append(arr.ctypes.data)
        elif a.kind == "out":
            keep.append(outs[a.name])
            args.append(outs[a.name].ctypes.data)
        elif a.kind == "int":
            args.append(int(shape[a.name]))
        else:
            args.append(float(wl.attrs[a.name]))
    return args, keep


def bare_run(workload: str, shape_set: str, source: str, params: dict, reps: dict[str, int], seed: int,
             settings: BenchSettings, evictor: Evictor | None) -> dict:
    """Cold compile + load, then per timed shape the by-hand benchmark (warm-up, flushed timed
    calls): seconds per part and the kernel's median (ms) per timed shape (module docstring)."""
    wl = get_workload(workload).for_shape_set(shape_set)
    clock = time.perf_counter
    t0 = clock()
    art = CpuBackend().compile(cold(source), format_defines(params))
    t1 = clock()
    fn = bind(ctypes.CDLL(str(art.path)), wl)
    t2 = clock()
    gen_s = bench_s = 0.0
    median_ms: dict[str, float] = {}  # per timed shape: the kernel's median here, by hand
    for i, shape in enumerate(wl.shapes(shape_set)):
        g0 = clock()
        inputs = wl.generate(dict(shape), seed + i)
        outs = {k: np.empty(s, np.float32) for k, s in wl.output_shapes(shape).items()}
        args, keep = _call_args(wl, shape, inputs, outs)
        evict = evictor.plan(keep) if evictor is not None else (lambda: None)
        gen_s += clock() - g0
        n = reps[shape_label(shape)]
        # The evaluator's own protocol (kernels.evaluation.timing.bench): the same warm-up (same cap),
        # then exactly n timed calls (rep_ms 0: min_reps decides), each after the flush.
        b0 = clock()
        samples = bench(lambda: fn(*args), replace(settings, rep_ms=0, min_reps=n), flush=evict)
        bench_s += clock() - b0
        median_ms[shape_label(shape)] = statistics.median(samples)
    compile_s, load_s = t1 - t0, t2 - t1
    return {"compile_s": compile_s, "load_s": load_s, "bench_s": bench_s, "gen_s": gen_s,
            "cached": art.cached, "bare_median_ms": median_ms, "bare_s": compile_s + load_s + bench_s}


def budget(rep_ms: float) -> BenchSettings:
    """Default :class:`BenchSettings` with ``rep_ms`` of timed kernel time per shape and
    ``max_reps`` scaled by the same factor (never below the default's)."""
    base = BenchSettings()
    return replace(base, rep_ms=rep_ms, max_reps=max(base.max_reps, round(base.max_reps * rep_ms / base.rep_ms)))


def measure(workload: str, shape_set: str, params: dict, seed: int, timeout_s: float,
            evictor: Evictor | None, settings: BenchSettings) -> dict:
    """One candidate at one budget: the evaluator's row, then (if ``ok``) the bare benchmark's."""
    source = kernels.load_template(workload)
    t0 = time.perf_counter()
    ev = kernels.evaluate(workload, cold(source), params, shape_set=shape_set, seed=seed, timeout_s=timeout_s,
                          bench=settings)
    eval_s = time.perf_counter() - t0
    children = ev.fingerprint.get("child_wall_s", {})
    row = {"evaluator_s": eval_s, "status": str(ev.status), "latency_ms": ev.metrics.get("latency_ms"),
           "duration_s": ev.duration_s, "child_wall_s": children,
           # Where the evaluator's time goes: the compiler, each child's wall time, and the rest
           # (this process: inputs and references not hidden behind the compiler, judging, cleanup).
           "ev_compile_s": ev.fingerprint.get("compile_s"), "ev_validation_s": children.get("validation"),
           "ev_timing_s": children.get("timing")}
    if None not in (row["ev_compile_s"], row["ev_validation_s"], row["ev_timing_s"]):
        row["ev_rest_s"] = eval_s - row["ev_compile_s"] - row["ev_validation_s"] - row["ev_timing_s"]
    if ev.status != kernels.Outcome.ok or not ev.samples_ms:
        row["reason"] = ev.log.rsplit("== verdict ==", 1)[-1].strip()[:300]
        return row
    row["reps"] = {label: len(s) for label, s in ev.samples_ms.items()}
    row["median_ms"] = {label: statistics.median(s) for label, s in ev.samples_ms.items()}
    row.update(bare_run(workload, shape_set, source, params, row["reps"], seed, settings, evictor))
    return row


def warm_up(timeout_s: float) -> dict:
    """Once per process, untimed: physical limits, fork server, eviction helper."""
    limits = hostperf.physical_limits()
    ev = kernels.evaluate("rmsnorm", kernels.load_template("rmsnorm"),
                          {"ROWS_PER_CHUNK": 1, "UNROLL": 1, "VEC": 1, "ACC_DOUBLE": 0},
                          shape_set="test-small", seed=0, timeout_s=timeout_s)
    if ev.status != kernels.Outcome.ok:
        raise SystemExit(f"warm-up evaluation failed ({ev.status}): {ev.log[-500:]}")
    return limits


def _measured(row: dict) -> bool:
    """Both sides ran: the evaluator said ``ok`` and the bare benchmark timed every shape."""
    return "bare_s" in row and bool(row.get("median_ms")) and bool(row.get("bare_median_ms"))


def _median_rows(rows: list[dict]) -> dict:
    """One row per candidate and budget: medians over the repeats (per timed shape for the
    kernel's medians); a candidate not measured in every repeat gets the first failing
    repeat's row (no figures, not fitted)."""
    failed = [r for r in rows if not _measured(r)]
    if failed:
        return {**failed[0], "status": f"{failed[0]['status']} ({len(failed)} of {len(rows)} repeats)",
                "repeats": len(rows)}
    out = dict(rows[-1])
    for k in ("evaluator_s", "bare_s", "compile_s", "load_s", "bench_s", "gen_s", "latency_ms", "ev_compile_s",
              "ev_validation_s", "ev_timing_s", "ev_rest_s"):
        vals = [r[k] for r in rows if r.get(k) is not None]
        if vals:
            out[k] = statistics.median(vals)
    for k in ("median_ms", "bare_median_ms"):
        out[k] = {label: statistics.median(r[k][label] for r in rows) for label in rows[-1][k]}
    out["repeats"] = len(rows)
    return out


def within_fidelity(ratio: float) -> bool:
    """``|ratio - 1| <= FIDELITY_TOL`` (a small tolerance for the float error of the ratio)."""
    return abs(ratio - 1.0) <= FIDELITY_TOL + 1e-12


def fidelity(row: dict) -> dict:
    """Figure (a) of one measured row: the evaluator's median over the bare median.

    Args:
        row: with ``median_ms`` and ``bare_median_ms``: ``{shape label: ms}``, the same labels.

    Returns:
        ``{"shapes": {label: entry}, "total": entry}``, each entry ``{"evaluator_ms",
        "bare_ms", "ratio", "pass"}``; the total's ms are the sums over the timed shapes.

    Raises:
        ValueError: the two sides timed different shapes, or a bare median is not positive.
    """
    ev, bare = row["median_ms"], row["bare_median_ms"]
    if set(ev) != set(bare):
        raise ValueError(f"the evaluator timed {sorted(ev)}, the bare benchmark {sorted(bare)}")

    def entry(e: float, b: float) -> dict:
        if not b > 0:
            raise ValueError(f"bare median {b} ms is not positive")
        return {"evaluator_ms": e, "bare_ms": b, "ratio": e / b, "pass": within_fidelity(e / b)}

    return {"shapes": {label: entry(ev[label], bare[label]) for label in ev},
            "total": entry(sum(ev.values()), sum(bare.values()))}


def _key(r: dict) -> str:
    return f"{r['workload']}|{r['shape_set']}|{sorted(r['params'].items())}"


def headline_rows(results: list[dict], rep_ms: float) -> list[dict]:
    """Per candidate (first seen order), its row at budget ``rep_ms``, else its first row."""
    picked: dict[str, dict] = {}
    for r in results:
        k = _key(r)
        if k not in picked or (picked[k]["rep_ms"] != rep_ms and r["rep_ms"] == rep_ms):
            picked[k] = r
    return list(picked.values())


def fixed_costs(rows: list[dict], fits: list[dict]) -> list[dict]:
    """Figure (b) per candidate: its fixed cost (s) against its bare compile (s).

    Args:
        rows: one per candidate (:func:`headline_rows`).
        fits: :func:`fit`'s; a candidate with a fit takes ``fixed_s`` and ``compile_s`` from it,
            one without takes ``evaluator_s - bare_s`` and ``compile_s`` of its row.

    Returns:
        Per row: ``workload``, ``shape_set``, ``params``, ``rep_ms``, ``status``, and when
        measured ``fixed_s``, ``compile_s``, ``ratio`` (fixed / compile), ``pass`` (ratio <=
        :data:`FIXED_MAX_RATIO`) and ``method``: ``"fit"`` or ``"single budget"``.
    """
    by_key = {_key(f): f for f in fits}
    out = []
    for r in rows:
        item = {k: r[k] for k in ("workload", "shape_set", "params", "rep_ms", "status")}
        f = by_key.get(_key(r))
        if f is not None:
            item.update(fixed_s=f["fixed_s"], compile_s=f["compile_s"], method="fit",
                        budgets=len(f["points"]), r2=f["r2"])
        elif _measured(r):
            item.update(fixed_s=r["evaluator_s"] - r["bare_s"], compile_s=r["compile_s"], method="single budget")
        else:
            out.append(item)
            continue
        item["ratio"] = item["fixed_s"] / item["compile_s"] if item["compile_s"] > 0 else float("inf")
        item["pass"] = item["ratio"] <= FIXED_MAX_RATIO
        out.append(item)
    return out


def fit(results: list[dict]) -> tuple[list[dict], list[str]]:
    """Fixed cost and cost per second of timing, per candidate (module docstring).

    Fitted where a candidate was measured at :data:`FIT_MIN_BUDGETS` or more budgets whose bare
    work spans at least :data:`FIT_MIN_SPREAD` times (else the slope is noise). Each fit:
    ``fixed_s``, ``slope``, ``r2`` (coefficient of determination), ``compile_s`` (median bare
    compile), ``work_s`` (smallest and largest bare work measured), ``points``.

    Returns:
        (fits, reasons): ``reasons`` says, per candidate not fitted, why.
    """
    groups: dict[str, list[dict]] = {}
    for r in results:
        if _measured(r):
            groups.setdefault(_key(r), []).append(r)
    fits, reasons = [], []
    for rows in groups.values():
        head = f"{rows[0]['workload']} {_label(rows[0]['params'])}"
        # evaluator - bare compile (the evaluator's compile, slowed by the input generation it
        # overlaps, is its cost) against the bare benchmark less its compile.
        x = np.array([r["bare_s"] - r["compile_s"] for r in rows])
        y = np.array([r["evaluator_s"] - r["compile_s"] for r in rows])
        if len({r["rep_ms"] for r in rows}) < FIT_MIN_BUDGETS:
            reasons.append(f"{head}: not fitted, fewer than {FIT_MIN_BUDGETS} budgets measured ok")
            continue
        if x.min() <= 0 or x.max() / x.min() < FIT_MIN_SPREAD:
            reasons.append(f"{head}: not fitted, the bare work spans {x.min():.3f}-{x.max():.3f} s "
                           f"(less than {FIT_MIN_SPREAD:g} times)")
            continue
        slope, fixed = np.polyfit(x, y, 1)
        r2 = 1.0 - float(np.sum((y - (fixed + slope * x)) ** 2)) / max(float(np.sum((y - y.mean()) ** 2)), 1e-30)
        fits.append({"workload": rows[0]["workload"], "shape_set": rows[0]["shape_set"], "params": rows[0]["params"],
                     "fixed_s": float(fixed), "slope": float(slope), "r2": r2,
                     "compile_s": statistics.median(r["compile_s"] for r in rows),
                     "work_s": [float(x.min()), float(x.max())],
                     "points": [(r["rep_ms"], float(xi), float(yi)) for r, xi, yi in zip(rows, x, y)]})
    return fits, reasons


def _demo_env(db: Path, cache: Path) -> dict[str, str]:
    """The caller's environment for the demo run: its own database and compile cache, embedded
    mode (no Redis), and OpenMP's wait policy as the caller had it."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    if not _OMP_GIVEN:
        env.pop("OMP_WAIT_POLICY", None)
    env.update(DATABASE_URL=f"sqlite:///{db}", KERNELS_CACHE_DIR=str(cache), LOG_LEVEL="WARNING")
    return env


def demo_command(budget_n: int, seed: int) -> list[str]:
    """The headless run of the demo goal (``manage.py factory run``), one JSON object out."""
    return [sys.executable, "manage.py", "factory", "run", "--workload", DEMO_GOAL["workload"],
            "--target", DEMO_GOAL["target"], "--shape-set", DEMO_GOAL["shape_set"], "--budget", str(budget_n),
            "--seed", str(seed), "--no-baseline", "--json"]


def demo_rate(summary: dict, wall_s: float, budget_n: int) -> dict:
    """Figure (c) from a ``factory run --json`` summary and the command's wall time (s).

    Returns:
        ``budget``, ``evaluated``, ``status_counts``, ``wall_s``, ``per_min_wall`` (evaluated /
        wall_s * 60), and ``run_s`` and ``per_min_run`` from the summary's ``wall_s`` (None where
        the summary has none).

    Raises:
        ValueError: ``wall_s`` is not positive.
    """
    if not wall_s > 0:
        raise ValueError(f"wall time {wall_s} s is not positive")
    evaluated = int(summary["evaluated"])
    run_s = summary.get("wall_s")
    return {"budget": budget_n, "evaluated": evaluated, "status_counts": summary.get("status_counts", {}),
            "wall_s": wall_s, "per_min_wall": 60.0 * evaluated / wall_s, "run_s": run_s,
            "per_min_run": 60.0 * evaluated / run_s if run_s else None}


def run_demo(budget_n: int, seed: int, timeout_s: float, limits_from: Path | None = None) -> dict:
    """Figure (c): migrate a fresh SQLite database, run the demo goal headless, time it.

    Args:
        budget_n: evaluations; seed: the run's seed; timeout_s: limit on the run (s).
        limits_from: a compile cache whose measured host limits (``hostperf-*.json``) the run's
            fresh cache starts with (measured once per host, not per run).

    Raises:
        RuntimeError: migrate or the run failed or timed out (with the tail of its stderr), or
            its output is not one JSON object.
    """
    with tempfile.TemporaryDirectory(prefix="overhead-demo-") as tmp:
        cache = Path(tmp) / "cache"
        cache.mkdir()
        for f in (limits_from.glob("hostperf-*.json") if limits_from else ()):
            shutil.copy(f, cache / f.name)
        env = _demo_env(Path(tmp) / "db.sqlite3", cache)

        def call(cmd: list[str], limit: float) -> subprocess.CompletedProcess:
            try:
                out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=limit)
            except subprocess.TimeoutExpired as exc:
                raise RuntimeError(f"{' '.join(cmd[1:])}: no result after {limit:g} s") from exc
            except OSError as exc:
                raise RuntimeError(f"{' '.join(cmd[1:])} could not start: {exc}") from exc
            if out.returncode != 0:
                raise RuntimeError(f"{' '.join(cmd[1:])} exited {out.returncode}:\n{out.stderr[-2000:]}")
            return out

        call([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], 600)
        t0 = time.perf_counter()
        out = call(demo_command(budget_n, seed), timeout_s)
        wall_s = time.perf_counter() - t0
    try:
        summary = json.loads(out.stdout)
    except ValueError as exc:
        raise RuntimeError(f"factory run printed no JSON object ({exc}):\n{out.stdout[-1000:]}") from exc
    return {**demo_rate(summary, wall_s, budget_n), "seed": seed, "goal": DEMO_GOAL,
            "command": " ".join(demo_command(budget_n, seed)[1:])}


def _label(params: dict) -> str:
    """``NAME=value,...``: a candidate's parameters in a table cell."""
    return ",".join(f"{k}={v}" for k, v in params.items())


def _fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def _table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def headline_markdown(rows: list[dict], costs: list[dict], demo: dict | None) -> str:
    """The three figures: per candidate (a) total fidelity and (b) fixed cost; (a) per timed
    shape; (c) the demo goal's rate (``demo`` None: not measured)."""
    head = ["workload", "params", "budget (ms)", "status", "(a) evaluator / bare median, total", "(a)",
            "(b) fixed cost (s)", "how", "bare compile (s)", "(b) fixed / compile", "(b)"]
    body = []
    for r, c in zip(rows, costs):
        fid = fidelity(r)["total"] if _measured(r) else None
        how = {"fit": f"fit over {c.get('budgets')} budgets", "single budget": "evaluator - bare (upper bound)"}
        body.append([r["workload"], _label(r["params"]), f"{r['rep_ms']:g}", r["status"],
                     "-" if fid is None else f"{fid['ratio']:.3f}", "-" if fid is None else _verdict(fid["pass"]),
                     _fmt(c.get("fixed_s"), ".2f"), how.get(c.get("method"), "-"), _fmt(c.get("compile_s"), ".2f"),
                     "-" if "ratio" not in c else f"{c['ratio']:.2f}x", "-" if "pass" not in c else _verdict(c["pass"])])
    parts = ["## (a) fidelity and (b) fixed cost per candidate", _table(head, body)]
    shapes = []
    for r in rows:
        if _measured(r):
            for label, e in fidelity(r)["shapes"].items():
                shapes.append([r["workload"], _label(r["params"]), label, f"{e['evaluator_ms']:.4f}",
                               f"{e['bare_ms']:.4f}", f"{e['ratio']:.3f}", _verdict(e["pass"])])
    if shapes:
        parts += ["## (a) fidelity per timed shape",
                  _table(["workload", "params", "shape", "evaluator median (ms)", "bare median (ms)", "ratio",
                          f"within {100 * FIDELITY_TOL:g}%"], shapes)]
    parts.append("## (c) candidates per minute on the demo goal")
    if demo is None:
        parts.append("not measured (--no-demo)")
    else:
        counts = ", ".join(f"{k}: {v}" for k, v in sorted(demo["status_counts"].items()))
        parts.append(_table(["goal", "budget", "evaluated", "statuses", "wall (s)", "per minute of wall time",
                             "run's own time (s)", "per minute of the run's time"],
                            [[f"{demo['goal']['workload']} / {demo['goal']['target']} / {demo['goal']['shape_set']}",
                              str(demo["budget"]), str(demo["evaluated"]), counts, f"{demo['wall_s']:.1f}",
                              f"{demo['per_min_wall']:.1f}", _fmt(demo["run_s"], ".1f"),
                              _fmt(demo["per_min_run"], ".1f")]]))
    return "\n\n".join(parts)


def markdown(results: list[dict]) -> str:
    """Supporting detail: where the evaluator's time goes, per candidate and budget, next to
    the bare benchmark's parts."""
    head = ["workload", "shape set", "params", "timed budget (ms)", "status", "kernel latency (ms)", "evaluator (s)",
            "compile / validation child / timing child / rest (s)", "bare benchmark (s)",
            "compile / load / warm-up + flushed calls (s)"]
    body = []
    for r in results:
        parts = "-" if "bare_s" not in r else f"{r['compile_s']:.2f} / {r['load_s']:.3f} / {r['bench_s']:.3f}"
        split = ("-" if "ev_rest_s" not in r else
                 " / ".join(f"{r[k]:.2f}" for k in ("ev_compile_s", "ev_validation_s", "ev_timing_s", "ev_rest_s")))
        body.append([r["workload"], r["shape_set"], _label(r["params"]), f"{r['rep_ms']:g}", r["status"],
                     _fmt(r.get("latency_ms"), ".3f"), _fmt(r.get("evaluator_s"), ".2f"), split,
                     _fmt(r.get("bare_s"), ".2f"), parts])
    return _table(head, body)


def fit_markdown(fits: list[dict], reasons: list[str] = ()) -> str:
    """Supporting detail of (b): the fits and, per candidate not fitted, why."""
    body = [[f["workload"], f["shape_set"], _label(f["params"]), f"{f['fixed_s']:.2f}", f"{100 * (f['slope'] - 1):+.0f}%",
             f"{f['r2']:.3f}", f"{f['compile_s']:.2f}", f"{f['work_s'][0]:.2f}-{f['work_s'][1]:.2f}"] for f in fits]
    table = _table(["workload", "shape set", "params", "fixed (s)", "per second of timing", "r2", "bare compile (s)",
                    "bare work measured (s)"], body) if fits else ""
    notes = "\n".join(f"- {r}" for r in reasons)
    return "\n\n".join(part for part in (table, notes) if part)


def summary_line(rows: list[dict], costs: list[dict], demo: dict | None) -> str:
    """One line: how many candidates pass (a) and (b), and (c)'s rate."""
    fids = [fidelity(r) for r in rows if _measured(r)]
    shapes = [e for f in fids for e in f["shapes"].values()]
    judged = [c for c in costs if "pass" in c]
    line = (f"(a) fidelity within {100 * FIDELITY_TOL:g}%: {sum(f['total']['pass'] for f in fids)} of {len(rows)} "
            f"candidates in total, {sum(e['pass'] for e in shapes)} of {len(shapes)} timed shapes; "
            f"(b) fixed cost <= {FIXED_MAX_RATIO:g}x the compile: {sum(c['pass'] for c in judged)} of {len(rows)} "
            f"candidates; (c) demo goal: ")
    if demo is None:
        return line + "not measured"
    return line + f"{demo['per_min_wall']:.1f} candidates per minute ({demo['evaluated']} in {demo['wall_s']:.0f} s)"


def _positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {n}")
    return n


def _budget_ms(text: str) -> float:
    """``--rep-ms`` value: ms of timed kernel time per shape, in (0, 60000]."""
    try:
        ms = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of ms: {text!r}") from None
    if not 0 < ms <= 60_000:
        raise argparse.ArgumentTypeError(f"must be in (0, 60000] ms, not {text}")
    return ms


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-gemm", action="store_true", help="skip the gemm square-1024 candidate")
    parser.add_argument("--repeats", type=_positive_int, default=1, help="measurements per candidate (median reported)")
    parser.add_argument("--seed", type=int, default=0, help="evaluation seed (inputs) and the demo run's seed")
    parser.add_argument("--rep-ms", type=_budget_ms, nargs="+", default=[BenchSettings().rep_ms],
                        help=f"timed kernel time per shape (ms), one run per value; three or more are fitted "
                             f"(default: {BenchSettings().rep_ms:g}, the evaluator's)")
    parser.add_argument("--timeout", type=float, default=300.0, help="evaluate() timeout_s per candidate")
    parser.add_argument("--demo-budget", type=_positive_int, default=None,
                        help=f"evaluations of the demo goal's run (default: {DEFAULT_DEMO_BUDGET})")
    parser.add_argument("--no-demo", action="store_true", help="skip the demo goal's run (figure c)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results",
                        help="folder of evaluator_overhead.md and .json (default: benchmarks/results)")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    args = parser.parse_args(argv)
    if args.no_demo and args.demo_budget is not None:
        parser.error("argument --demo-budget: not allowed with --no-demo")
    demo_budget = args.demo_budget or DEFAULT_DEMO_BUDGET

    started = time.perf_counter()
    cands = CANDIDATES + ([] if args.no_gemm else [GEMM_CANDIDATE])
    results = []
    demo = None
    with _cache_dir() as cache:
        limits = warm_up(args.timeout)  # once per process, as in a worker: not charged to a candidate
        try:
            evictor = Evictor(evict_library())
        except (OSError, RuntimeError) as exc:  # the evaluator falls back to rewriting; say so
            print(f"no eviction helper ({exc}): the bare benchmark runs without a flush", file=sys.stderr)
            evictor = None
        for rep_ms in dict.fromkeys(args.rep_ms):  # each budget once, in the order given
            settings = budget(rep_ms)
            for workload, shape_set, params in cands:
                rows = []
                for rep in range(args.repeats):
                    if not args.json:
                        print(f"{workload} {shape_set} {params} rep_ms={rep_ms:g} (repeat {rep + 1}/{args.repeats})",
                              file=sys.stderr)
                    rows.append(measure(workload, shape_set, params, args.seed + rep, args.timeout, evictor, settings))
                results.append({"workload": workload, "shape_set": shape_set, "params": params, "rep_ms": rep_ms,
                                **_median_rows(rows)})
        if not args.no_demo:
            if not args.json:
                print(f"demo goal: factory run, {demo_budget} candidates", file=sys.stderr)
            # The fresh cache starts with the limits warm_up measured into this one.
            demo = run_demo(demo_budget, args.seed, args.timeout * demo_budget, limits_from=cache)
    elapsed = time.perf_counter() - started
    fits, unfitted = fit(results)
    heads = headline_rows(results, BenchSettings().rep_ms)
    costs = fixed_costs(heads, fits)
    verdict = summary_line(heads, costs, demo)
    table = headline_markdown(heads, costs, demo) + "\n\n## Supporting detail\n\n" + markdown(results)
    if len(set(args.rep_ms)) > 1:
        table += "\n\n" + fit_markdown(fits, unfitted)
    payload = {"fidelity": [{k: r[k] for k in ("workload", "shape_set", "params", "rep_ms")} | fidelity(r)
                            for r in results if _measured(r)],
               "fixed_cost": costs, "demo": demo, "summary": verdict, "fidelity_tol": FIDELITY_TOL,
               "fixed_max_ratio": FIXED_MAX_RATIO, "results": results, "fits": fits, "not_fitted": unfitted,
               "seconds": elapsed, "cpus": os.cpu_count(), "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
               "limits": limits}
    emit(args.out, "evaluator_overhead", "Evaluator overhead", argv, f"{elapsed:.0f} s on {os.cpu_count()} CPUs.",
         payload, f"{verdict}\n\n{table}", verdict, as_json=args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
