"""Best found against the physical limit, both sides measured in the same run on this CPU.

    python -m benchmarks.kernels_limits [--points 12] [--gemm-points N] [--seed 0] \
        [--timeout 120] [--only rmsnorm,softmax,gemm] [--out benchmarks/results] [--json]

For each row, ``--points`` distinct valid points of the template's default CPU design space
(:func:`kernels.default_space`) are drawn with ``numpy.random.default_rng(--seed)``
(``DesignSpace.sample``) and evaluated one after the other with :func:`kernels.evaluate`
(sandboxed child, full validation, default ``BenchSettings``, evaluation seed ``--seed``);
only ``ok`` candidates count. The best candidate is the one with the lowest
``metrics["latency_ms"]`` (sum over the shape set of per-shape median latencies).

- Memory-bound rows, ``rmsnorm`` and ``softmax`` on ``llama3-8b``: best GB/s =
  sum of ``Workload.bytes`` over the set / best latency, against a memcpy of the same bytes:
  :func:`kernels.baselines.copy_latency_ms` (``numpy.copyto`` of each shape's compulsory
  traffic, half read and half written, timed with the same ``timing.bench`` protocol: warm-up,
  cache flush before every rep, sum of per-shape medians). Target: best >= 70% of memcpy GB/s.
- Compute rows, ``gemm`` on ``square-1024`` and ``llama3-8b-o-decode`` (M = 1, 16, 64;
  N = K = 4096): best GFLOP/s = sum of ``Workload.flops`` / best latency, against
  ``numpy.matmul`` of the same shapes (:func:`kernels.baselines.baseline_latency_ms`, same
  bench protocol), with NumPy's BLAS on its default thread count, which is every CPU of this
  process, as the candidate's OpenMP team in the sandbox child. Target: best >= 40%.

The baseline is timed twice, before and after the row's candidates, and the faster of the two
is used (the stricter comparison); both are reported. Units: latency ms, bandwidth GB/s
(1e9 B/s), compute GFLOP/s (1e9 FLOP/s). The table goes to stdout and
``<out>/kernels_limits.md``, the rows to ``<out>/kernels_limits.json``; ``--json`` prints one
JSON object on stdout instead.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import kernels  # noqa: E402
from benchmarks._report import emit  # noqa: E402
from kernels import hostperf  # noqa: E402
from kernels.baselines import baseline_latency_ms, copy_latency_ms  # noqa: E402
from kernels.workloads import get_workload  # noqa: E402

# (workload, shape set, kind, target fraction of the baseline)
ROWS: list[tuple[str, str, str, float]] = [
    ("rmsnorm", "llama3-8b", "memory", 0.70),
    ("softmax", "llama3-8b", "memory", 0.70),
    ("gemm", "square-1024", "compute", 0.40),
    ("gemm", "llama3-8b-o-decode", "compute", 0.40),
]


def _blas_threads() -> str:
    try:
        from threadpoolctl import threadpool_info  # noqa: PLC0415

        np.matmul(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32))
        info = [f"{i.get('internal_api')}:{i.get('num_threads')}" for i in threadpool_info()
                if i.get("user_api") == "blas"]
        return ",".join(info) or "unknown"
    except Exception:  # noqa: BLE001 - informational only
        return f"default (OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')})"


def run_row(workload: str, shape_set: str, kind: str, target: float, n: int, seed: int,
            timeout_s: float, quiet: bool) -> dict:
    wl = get_workload(workload)
    shapes = wl.shapes(shape_set)
    total_bytes = float(sum(wl.bytes(s) for s in shapes))
    total_flops = float(sum(wl.flops(s) for s in shapes))
    work = total_bytes if kind == "memory" else total_flops  # units of the rate compared

    def baseline() -> float:
        return (copy_latency_ms if kind == "memory" else baseline_latency_ms)(workload, shape_set)

    base_before = baseline()
    source = kernels.load_template(workload)
    points = kernels.default_space(workload).sample(np.random.default_rng(seed), n)
    evals = []
    t_row = time.perf_counter()
    for i, p in enumerate(points):
        ev = kernels.evaluate(workload, source, p, shape_set=shape_set, seed=seed, timeout_s=timeout_s)
        lat = ev.metrics.get("latency_ms") if ev.status == kernels.Outcome.ok else None
        evals.append({"params": p, "status": str(ev.status), "latency_ms": lat, "duration_s": ev.duration_s})
        if not quiet:
            print(f"  {workload} {shape_set} {i + 1}/{len(points)} {ev.status} "
                  f"{'' if lat is None else f'{lat:.3f} ms'} ({ev.duration_s:.1f} s)", file=sys.stderr)
    eval_s = time.perf_counter() - t_row
    base_after = baseline()
    base_ms = min(base_before, base_after)
    ok = [e for e in evals if e["latency_ms"]]
    best = min(ok, key=lambda e: e["latency_ms"]) if ok else None
    unit = "GB/s" if kind == "memory" else "GFLOP/s"
    base_rate = work / (base_ms * 1e-3) / 1e9
    row = {
        "workload": workload, "shape_set": shape_set, "kind": kind, "unit": unit,
        "baseline": "memcpy (numpy.copyto)" if kind == "memory" else "numpy.matmul",
        "points": len(points), "ok": len(ok), "eval_seconds": eval_s,
        "baseline_ms": base_ms, "baseline_ms_before": base_before, "baseline_ms_after": base_after,
        "baseline_rate": base_rate, "bytes": total_bytes, "flops": total_flops, "target": target,
        "best_params": best["params"] if best else None,
        "best_latency_ms": best["latency_ms"] if best else None,
        "best_rate": work / (best["latency_ms"] * 1e-3) / 1e9 if best else None,
        "evaluations": evals,
    }
    row["ratio"] = row["best_rate"] / base_rate if best else None
    row["pass"] = bool(best) and row["ratio"] >= target
    return row


def _fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def markdown(rows: list[dict]) -> str:
    lines = ["| workload | shape set | ok / points | best latency (ms) | best | baseline | baseline latency (ms) "
             "| baseline rate | best / baseline | target | verdict |", "|" + "---|" * 11]
    for r in rows:
        u = r["unit"]
        lines.append(
            f"| {r['workload']} | {r['shape_set']} | {r['ok']} / {r['points']} | {_fmt(r['best_latency_ms'], '.3f')} "
            f"| {_fmt(r['best_rate'], '.1f')} {u} | {r['baseline']} | {r['baseline_ms']:.3f} "
            f"| {r['baseline_rate']:.1f} {u} | {_fmt(None if r['ratio'] is None else 100 * r['ratio'], '.0f')}% "
            f"| >= {100 * r['target']:.0f}% | {'pass' if r['pass'] else 'FAIL'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", type=int, default=12, help="random points per row")
    parser.add_argument("--gemm-points", type=int, default=None, help="points for the gemm rows (default --points)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the point sample and of the evaluations")
    parser.add_argument("--timeout", type=float, default=120.0, help="evaluate() timeout_s per candidate")
    parser.add_argument("--only", default="", help="comma-separated workloads (rmsnorm,softmax,gemm)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    args = parser.parse_args(argv)
    only = {w.strip() for w in args.only.split(",") if w.strip()}

    started = time.perf_counter()
    limits = hostperf.physical_limits()  # measured once, before anything competes
    rows = []
    for workload, shape_set, kind, target in ROWS:
        if only and workload not in only:
            continue
        n = args.gemm_points if (workload == "gemm" and args.gemm_points is not None) else args.points
        if not args.json:
            print(f"{workload} {shape_set}: {n} points", file=sys.stderr)
        rows.append(run_row(workload, shape_set, kind, target, n, args.seed, args.timeout, args.json))
    elapsed = time.perf_counter() - started
    table = markdown(rows)
    verdict = f"{sum(r['pass'] for r in rows)} of {len(rows)} rows meet their target"
    payload = {"results": rows, "target": verdict, "seconds": elapsed, "cpus": os.cpu_count(),
               "blas_threads": _blas_threads(), "seed": args.seed, "limits": limits}
    emit(args.out, "kernels_limits", "Best found against the physical limit", argv,
         f"{elapsed:.0f} s on {os.cpu_count()} CPUs, BLAS threads {payload['blas_threads']}.",
         payload, table, verdict, as_json=args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
