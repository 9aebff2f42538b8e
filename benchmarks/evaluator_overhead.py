"""Evaluator overhead: wall time of ``kernels.evaluate`` per candidate against the bare cost of
benchmarking the same kernel by hand in this process.

    python -m benchmarks.evaluator_overhead [--no-gemm] [--repeats 1] [--seed 0] \
        [--rep-ms 150 [1000 ...]] [--timeout 300] [--out benchmarks/results] [--json]

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
- **bare benchmark** (judged): what an engineer does without the evaluator, in this process:
  ``CpuBackend.compile`` + ``ctypes.CDLL`` load, then per timed shape the same benchmark
  protocol on one input set of that shape: :func:`kernels.timing.bench` itself (warm-up calls
  until ``warmup_ms`` of kernel time, at least 3), with exactly as many timed calls as the
  evaluator took samples (``len(evidence.samples_ms[label])``), each after the same cache
  flush (:class:`kernels.timing.Evictor` over the call's buffers). No sandbox, no validation,
  no NaN-fill, no guards, no reference.
- **bare calls**: the stricter figure: compile + load + only those timed calls (no warm-up,
  no flush), reported next to it.

Input generation is timed separately (``gen_s``) and is part of neither bare total. OpenMP
runs with ``OMP_WAIT_POLICY=PASSIVE`` here, as in the evaluator's timing child.

Reported per candidate (medians over ``--repeats``): evaluator total (s) and where it goes
(compile, the validation and timing children's wall times, and the rest: this process's input
generation and references not hidden behind the compiler, judging, cleanup), bare benchmark and
bare calls totals (s) and their parts, overhead % = (evaluator - bare) / bare * 100 against
each, the evaluator's own time (evaluator minus its compile, less bare benchmark minus its
compile: without the compiler's run-to-run noise, and without the evaluator's compile being
slower, as it is on few cores, for the inputs it generates meanwhile), and the kernel's
own latency (ms: ``Evidence.metrics["latency_ms"]``, the sum over the shape set of per-shape
medians).

With several budgets, the evaluator's time less the bare compile is fitted per candidate as
``fixed + slope * work`` (least squares, :func:`numpy.polyfit`; with its r2), ``work`` being
the bare benchmark's time less its compile (load, warm-up and flushed calls), over at least
:data:`FIT_MIN_BUDGETS` budgets whose work spans :data:`FIT_MIN_SPREAD` times or more:
``fixed`` (s) is what the evaluator adds once per candidate whatever the budget (a compile
slowed by the input generation it overlaps, the validation child, two children starting
cold, saving and judging outputs), ``slope - 1`` what it adds per second of timing (NaN fills,
checks between calls). Then overhead(work) = (fixed + (slope - 1) work) / (c + work), with
``c`` the bare compile, and the bare work from which it stays within the target ``t`` = 0.15
is ``(fixed - t c) / (1 + t - slope)`` (for slope < 1 + t; else never).

Last, per workload and timed shape, what the flush before each timed call costs right after a
call (:func:`flush_cost`): the bare benchmark's eviction against the evaluator's NaN fill
(streaming stores) and eviction, next to the kernel's median time on that shape in the
evaluator and by hand (the protocol's rotating input sets and NaN-filled outputs should not
change what a call costs). For a
memory-bound kernel this is most of the per-call part of the overhead (the checks between
calls come on top): the rule that outputs are NaN-filled before every call is one more
write of the outputs to memory per call.

The target (issue): overhead <= 15% for kernels that run 1 ms or more, judged against the bare
benchmark; kernels below 1 ms are shown but not judged. The tables go to stdout and
``<out>/evaluator_overhead.md``, the raw rows and fits to ``<out>/evaluator_overhead.json``;
``--json`` prints one JSON object instead.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before libgomp loads (first CDLL)

import argparse
import ctypes
import statistics
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
from kernels._sandbox_child import bind  # noqa: E402  (the child's own binding)
from kernels.backends.cpu import CpuBackend  # noqa: E402
from kernels.space import format_defines  # noqa: E402
from kernels.timing import BenchSettings, Evictor, bench, evict_library  # noqa: E402
from kernels.workloads import get_workload, shape_label  # noqa: E402

TARGET_PCT = 15.0
FLUSH_SAMPLES = 15
FIT_MIN_BUDGETS = 3  # a line through two noisy points is not a measurement
FIT_MIN_SPREAD = 3.0  # largest / smallest bare work of a fit
JUDGED_FROM_MS = 1.0

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
    calls) and, separately, the bare timed calls; seconds per part (module docstring)."""
    wl = get_workload(workload).for_shape_set(shape_set)
    clock = time.perf_counter
    t0 = clock()
    art = CpuBackend().compile(cold(source), format_defines(params))
    t1 = clock()
    fn = bind(ctypes.CDLL(str(art.path)), wl)
    t2 = clock()
    gen_s = bench_s = calls_s = 0.0
    calls = 0
    flush_us: dict[str, dict] = {}
    median_ms: dict[str, float] = {}  # per timed shape: the kernel's median here, by hand
    for i, shape in enumerate(wl.shapes(shape_set)):
        g0 = clock()
        inputs = wl.generate(dict(shape), seed + i)
        outs = {k: np.empty(s, np.float32) for k, s in wl.output_shapes(shape).items()}
        args, keep = _call_args(wl, shape, inputs, outs)
        evict = evictor.plan(keep) if evictor is not None else (lambda: None)
        gen_s += clock() - g0
        n = reps[shape_label(shape)]
        # The evaluator's own protocol (kernels.timing.bench): the same warm-up (same cap),
        # then exactly n timed calls (rep_ms 0: min_reps decides), each after the flush.
        b0 = clock()
        samples = bench(lambda: fn(*args), replace(settings, rep_ms=0, min_reps=n), flush=evict)
        b1 = clock()
        for _ in range(n):  # the calls alone
            fn(*args)
        b2 = clock()
        bench_s += b1 - b0
        calls_s += b2 - b1
        calls += n
        median_ms[shape_label(shape)] = statistics.median(samples)
        if evictor is not None:  # untimed here: what each flush costs right after a call
            flush_us[shape_label(shape)] = flush_cost(lambda: fn(*args), keep, list(outs.values()), evictor)
    compile_s, load_s = t1 - t0, t2 - t1
    return {"compile_s": compile_s, "load_s": load_s, "bench_s": bench_s, "calls_s": calls_s, "gen_s": gen_s,
            "calls": calls, "cached": art.cached, "flush_us": flush_us, "bare_median_ms": median_ms,
            "bare_s": compile_s + load_s + bench_s, "bare_calls_s": compile_s + load_s + calls_s}


def budget(rep_ms: float) -> BenchSettings:
    """Default :class:`BenchSettings` with ``rep_ms`` of timed kernel time per shape and
    ``max_reps`` scaled by the same factor (never below the default's)."""
    base = BenchSettings()
    return replace(base, rep_ms=rep_ms, max_reps=max(base.max_reps, round(base.max_reps * rep_ms / base.rep_ms)))


def flush_cost(call, arrays: list[np.ndarray], outputs: list[np.ndarray], evictor: Evictor,
               n: int = FLUSH_SAMPLES) -> dict:
    """Median µs of the bare benchmark's flush (evict ``arrays``) and of the evaluator's (NaN-fill
    ``outputs`` with streaming stores, then evict), each timed right after a ``call`` (its
    outputs dirty in the cache, its inputs cached), ``n`` times; with the bytes involved and
    ``fills`` (False: the helper has no fill, the second figure is an eviction alone)."""
    clock = time.perf_counter_ns
    filling = evictor.plan(arrays, fill=outputs)
    out = {"output_bytes": sum(a.nbytes for a in outputs), "bytes": sum(a.nbytes for a in arrays),
           "fills": bool(getattr(filling, "fills", False))}
    for name, plan in (("evict_us", evictor.plan(arrays)), ("fill_evict_us", filling)):
        times = []
        for _ in range(n):
            call()
            t0 = clock()
            plan()
            times.append((clock() - t0) / 1e3)
        out[name] = statistics.median(times)
    return out


def measure(workload: str, shape_set: str, params: dict, seed: int, timeout_s: float,
            evictor: Evictor | None, settings: BenchSettings) -> dict:
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
    reps = {label: len(s) for label, s in ev.samples_ms.items()}
    row["reps"] = reps
    row["median_ms"] = {label: statistics.median(s) for label, s in ev.samples_ms.items()}
    row.update(bare_run(workload, shape_set, source, params, reps, seed, settings, evictor))
    row["overhead_pct"] = 100.0 * (row["evaluator_s"] - row["bare_s"]) / row["bare_s"]
    if row.get("ev_compile_s") is not None:  # each side less its own compile
        row["own_s"] = (row["evaluator_s"] - row["ev_compile_s"]) - (row["bare_s"] - row["compile_s"])
    row["overhead_calls_pct"] = 100.0 * (row["evaluator_s"] - row["bare_calls_s"]) / row["bare_calls_s"]
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


def _median_rows(rows: list[dict]) -> dict:
    """One row per candidate and budget: medians over the repeats; a candidate that was not
    ``ok`` in every repeat gets the first failing repeat's row (not judged, not fitted)."""
    failed = [r for r in rows if "overhead_pct" not in r]
    if failed:
        return {**failed[0], "status": f"{failed[0]['status']} ({len(failed)} of {len(rows)} repeats)",
                "repeats": len(rows)}
    out = dict(rows[-1])
    for k in ("evaluator_s", "bare_s", "bare_calls_s", "compile_s", "load_s", "bench_s", "calls_s", "gen_s",
              "latency_ms", "overhead_pct", "overhead_calls_pct", "ev_compile_s", "ev_validation_s", "ev_timing_s",
              "ev_rest_s", "own_s"):
        vals = [r[k] for r in rows if r.get(k) is not None]
        if vals:
            out[k] = statistics.median(vals)
    out["repeats"] = len(rows)
    return out


def _label(params: dict) -> str:
    """``NAME=value,...``: a candidate's parameters in a table cell."""
    return ",".join(f"{k}={v}" for k, v in params.items())


def _fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def markdown(results: list[dict]) -> str:
    head = ("| workload | shape set | params | timed budget (ms) | status | kernel latency (ms) | evaluator (s) "
            "| compile / validation child / timing child / rest (s) | bare benchmark (s) "
            "| compile / load / warm-up + flushed calls (s) | overhead % | target <= 15% "
            "| evaluator's own time (s) | bare calls (s) | overhead vs calls % |")
    lines = [head, "|" + "---|" * 15]
    for r in results:
        p = _label(r["params"])
        lat = r.get("latency_ms")
        if "overhead_pct" not in r:
            verdict = "n/a"
        elif lat is not None and lat < JUDGED_FROM_MS:
            verdict = f"not judged (< {JUDGED_FROM_MS:g} ms)"
        else:
            verdict = "pass" if r["overhead_pct"] <= TARGET_PCT else "FAIL"
        parts = ("-" if "bare_s" not in r else
                 f"{r['compile_s']:.2f} / {r['load_s']:.3f} / {r['bench_s']:.3f}")
        split = ("-" if "ev_rest_s" not in r else
                 " / ".join(f"{r[k]:.2f}" for k in ("ev_compile_s", "ev_validation_s", "ev_timing_s", "ev_rest_s")))
        lines.append(f"| {r['workload']} | {r['shape_set']} | {p} | {r['rep_ms']:g} | {r['status']} "
                     f"| {_fmt(lat, '.3f')} | {_fmt(r.get('evaluator_s'), '.2f')} | {split} "
                     f"| {_fmt(r.get('bare_s'), '.2f')} | {parts} | {_fmt(r.get('overhead_pct'), '.0f')} | {verdict} "
                     f"| {_fmt(r.get('own_s'), '.2f')} | {_fmt(r.get('bare_calls_s'), '.2f')} "
                     f"| {_fmt(r.get('overhead_calls_pct'), '.0f')} |")
    return "\n".join(lines)


def flush_markdown(results: list[dict]) -> str:
    """Per workload and timed shape (first row measured): the flush before each timed call,
    by hand and in the evaluator, against the kernel's median time on that shape."""
    lines = ["| workload | params | shape | kernel median (ms) | by hand (ms) | outputs / all buffers (MiB) "
             "| evict (µs) | NaN fill + evict (µs) | fill's extra per timed call (of kernel + evict) |", "|" + "---|" * 9]
    seen = set()
    for r in results:
        p = _label(r["params"])
        for label, f in (r.get("flush_us") or {}).items():
            if (r["workload"], p, label) in seen:  # the first budget's
                continue
            seen.add((r["workload"], p, label))
            kernel_us = 1e3 * r["median_ms"][label]
            fills = f.get("fills", True)
            extra = (f["fill_evict_us"] - f["evict_us"]) / (kernel_us + f["evict_us"])
            bare_ms = (r.get("bare_median_ms") or {}).get(label)
            lines.append(f"| {r['workload']} | {p} | {label} | {kernel_us / 1e3:.3f} | {_fmt(bare_ms, '.3f')} "
                         f"| {f['output_bytes'] / 2**20:.2f} / {f['bytes'] / 2**20:.2f} | {f['evict_us']:.0f} "
                         f"| {f['fill_evict_us']:.0f} | {f'{100 * extra:+.0f}%' if fills else '- (no fill helper)'} |")
    return "\n".join(lines)


def fit(results: list[dict]) -> tuple[list[dict], list[str]]:
    """Fixed cost and cost per second of timing, per candidate (module docstring).

    Fitted where a candidate was measured ``ok`` at :data:`FIT_MIN_BUDGETS` or more budgets
    whose bare work spans at least :data:`FIT_MIN_SPREAD` times (else the slope is noise).
    Each fit: ``fixed_s``, ``slope``, ``r2`` (coefficient of determination), ``compile_s``
    (median bare compile), ``work_s`` (smallest and largest bare work measured) and
    ``breakeven_work_s``: the bare work (s) from which the overhead stays within the target,
    0.0 where it always is, None where it does not stay within it from any work on.

    Returns:
        (fits, reasons): ``reasons`` says, per candidate not fitted, why.
    """
    groups: dict[str, list[dict]] = {}
    for r in results:
        if "overhead_pct" in r:
            groups.setdefault(f"{r['workload']}|{r['shape_set']}|{sorted(r['params'].items())}", []).append(r)
    fits, reasons = [], []
    t = TARGET_PCT / 100.0
    for rows in groups.values():
        head = f"{rows[0]['workload']} {_label(rows[0]['params'])}"
        # What the overhead's numerator and denominator are made of: evaluator - bare compile
        # (the evaluator's compile, slowed by the input generation it overlaps, is its cost),
        # and the bare benchmark less its compile (load, warm-up, flushed calls).
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
        c = statistics.median(r["compile_s"] for r in rows)
        # overhead(x) = (fixed + (slope - 1) x) / (c + x) <= t  <=>  fixed - t c <= (1 + t - slope) x
        if slope < 1.0 + t:
            breakeven = max(0.0, float((fixed - t * c) / (1.0 + t - slope)))
        else:
            breakeven = 0.0 if slope == 1.0 + t and fixed <= t * c else None
        fits.append({"workload": rows[0]["workload"], "shape_set": rows[0]["shape_set"], "params": rows[0]["params"],
                     "fixed_s": float(fixed), "slope": float(slope), "r2": r2, "compile_s": c,
                     "work_s": [float(x.min()), float(x.max())], "breakeven_work_s": breakeven,
                     "points": [(r["rep_ms"], float(xi), float(yi)) for r, xi, yi in zip(rows, x, y)]})
    return fits, reasons


def fit_markdown(fits: list[dict], reasons: list[str] = ()) -> str:
    lines = ["| workload | shape set | params | fixed (s) | per second of timing | r2 | bare compile (s) "
             "| bare work measured (s) | bare work for <= 15% (s) |", "|" + "---|" * 9]
    for f in fits:
        p = _label(f["params"])
        be = "never" if f["breakeven_work_s"] is None else f"{f['breakeven_work_s']:.1f}"
        lines.append(f"| {f['workload']} | {f['shape_set']} | {p} | {f['fixed_s']:.2f} | {100 * (f['slope'] - 1):+.0f}% "
                     f"| {f['r2']:.3f} | {f['compile_s']:.2f} | {f['work_s'][0]:.2f}-{f['work_s'][1]:.2f} | {be} |")
    body = "\n".join(lines) if fits else ""
    notes = "\n".join(f"- {r}" for r in reasons)
    return "\n\n".join(part for part in (body, notes) if part)


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
    parser.add_argument("--seed", type=int, default=0, help="evaluation seed (inputs)")
    parser.add_argument("--rep-ms", type=_budget_ms, nargs="+", default=[BenchSettings().rep_ms],
                        help=f"timed kernel time per shape (ms), one run per value; three or more are fitted "
                             f"(default: {BenchSettings().rep_ms:g}, the evaluator's)")
    parser.add_argument("--timeout", type=float, default=300.0, help="evaluate() timeout_s per candidate")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results",
                        help="folder of evaluator_overhead.md and .json (default: benchmarks/results)")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    args = parser.parse_args(argv)

    started = time.perf_counter()
    cands = CANDIDATES + ([] if args.no_gemm else [GEMM_CANDIDATE])
    results = []
    with _cache_dir():
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
    elapsed = time.perf_counter() - started
    fits, unfitted = fit(results)
    table = markdown(results)
    if len(set(args.rep_ms)) > 1:
        table += "\n\n" + fit_markdown(fits, unfitted)
    if any(r.get("flush_us") for r in results):
        table += "\n\n" + flush_markdown(results)
    judged = [r for r in results if "overhead_pct" in r and (r.get("latency_ms") or 0) >= JUDGED_FROM_MS]
    verdict = (f"{sum(r['overhead_pct'] <= TARGET_PCT for r in judged)} of {len(judged)} judged rows (candidate and budget) "
               f"(kernel latency >= {JUDGED_FROM_MS:g} ms) within {TARGET_PCT:g}% overhead")
    payload = {"results": results, "fits": fits, "not_fitted": unfitted, "target": verdict, "seconds": elapsed, "cpus": os.cpu_count(),
               "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"), "limits": limits}
    emit(args.out, "evaluator_overhead", "Evaluator overhead", argv, f"{elapsed:.0f} s on {os.cpu_count()} CPUs.",
         payload, table, verdict, as_json=args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
