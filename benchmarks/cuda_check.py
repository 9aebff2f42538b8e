"""CUDA backend check on a real GPU: ceilings, template points, CuPy's own implementations.

    python -m benchmarks.cuda_check [--out DIR] [--budget-s 300] [--quick]

Measures, in order (each step is skipped once the time budget is spent):

1. the device (name, compute capability, L2, driver/runtime/NVRTC/cupy versions);
2. the two ceilings of METHOD.md: device-to-device copy bandwidth (a 1 GiB ``copyto``,
   counting bytes read plus written) and float32 ``cupy.matmul`` at 4096^3 (cuBLAS SGEMM;
   TF32 stays off unless ``CUPY_TF32=1``);
3. CuPy references for the workloads: ``cupy.matmul(A, B.T)`` at the gemm shape sets, an
   RMSNorm written with CuPy array operations, ``cupy`` softmax, at the same shapes;
4. a few points of each CUDA template through the full evaluation protocol
   (:func:`kernels.evaluate` with ``backend="cuda"``: sandbox, validation, CUDA-event timing
   with an L2 flush), reporting status, latency, GB/s, GFLOP/s and % of roofline; the best
   point per workload is then timed once more in-process (:meth:`CudaBackend.run`) to show
   what the sandboxed protocol adds.

Writes ``cuda_check.json`` (everything, including failing evaluations' logs) and
``cuda_check.md`` (tables) to ``--out`` (default ``$OUT`` or ``benchmarks/results``) and
prints the markdown last. Exit status 0 when the templates evaluated ``ok`` at every point
tried, 1 otherwise, 2 without cupy or a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

RMSNORM_POINTS = [
    {"BLOCK_SIZE": 256, "THREADS_PER_ROW": 256, "VEC": 4, "UNROLL": 2, "USE_SMEM": 0},
    {"BLOCK_SIZE": 512, "THREADS_PER_ROW": 512, "VEC": 4, "UNROLL": 2, "USE_SMEM": 0},
    {"BLOCK_SIZE": 1024, "THREADS_PER_ROW": 1024, "VEC": 4, "UNROLL": 1, "USE_SMEM": 0},
    {"BLOCK_SIZE": 128, "THREADS_PER_ROW": 128, "VEC": 4, "UNROLL": 4, "USE_SMEM": 1},
    {"BLOCK_SIZE": 256, "THREADS_PER_ROW": 32, "VEC": 4, "UNROLL": 2, "USE_SMEM": 0},
    {"BLOCK_SIZE": 128, "THREADS_PER_ROW": 64, "VEC": 2, "UNROLL": 2, "USE_SMEM": 1},
]
GEMM_POINTS = [
    {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 16, "THREAD_M": 4, "THREAD_N": 4, "VEC": 4, "SMEM_PAD": 1, "USE_SMEM": 1, "SPLIT_K": 1},
    {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 8, "THREAD_M": 8, "THREAD_N": 8, "VEC": 4, "SMEM_PAD": 1, "USE_SMEM": 1, "SPLIT_K": 1},
    {"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 16, "THREAD_M": 8, "THREAD_N": 4, "VEC": 4, "SMEM_PAD": 1, "USE_SMEM": 1, "SPLIT_K": 1},
    {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 32, "THREAD_M": 1, "THREAD_N": 4, "VEC": 4, "SMEM_PAD": 1, "USE_SMEM": 1, "SPLIT_K": 4},
    {"BLOCK_M": 16, "BLOCK_N": 128, "BLOCK_K": 32, "THREAD_M": 1, "THREAD_N": 4, "VEC": 4, "SMEM_PAD": 1, "USE_SMEM": 1, "SPLIT_K": 8},
    {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 8, "THREAD_M": 1, "THREAD_N": 1, "VEC": 1, "SMEM_PAD": 0, "USE_SMEM": 0, "SPLIT_K": 2},
]
SOFTMAX_POINTS = [
    {"BLOCK_SIZE": 1024, "THREADS_PER_ROW": 1024, "VEC": 4, "ONLINE": 1, "USE_SMEM": 0},
    {"BLOCK_SIZE": 1024, "THREADS_PER_ROW": 1024, "VEC": 4, "ONLINE": 0, "USE_SMEM": 0},
]
FUSED_POINTS = [
    {"BLOCK_SIZE": 512, "THREADS_PER_ROW": 512, "VEC": 4, "UNROLL": 1, "USE_SMEM": 1},
    {"BLOCK_SIZE": 256, "THREADS_PER_ROW": 256, "VEC": 4, "UNROLL": 2, "USE_SMEM": 0},
]
KDA_POINTS = [  # FAST_EXP = 0: whether __expf stays within tolerance over long sequences is open
    {"DV_BLOCK": 8, "THREADS_PER_COL": 8, "VEC": 4, "CHUNK": 32, "STATE_SMEM": 0, "ASYNC_COPY": 1,
     "FAST_EXP": 0, "PREP": 0, "PIPELINE": 1},
    {"DV_BLOCK": 4, "THREADS_PER_COL": 16, "VEC": 4, "CHUNK": 64, "STATE_SMEM": 0, "ASYNC_COPY": 1,
     "FAST_EXP": 0, "PREP": 1, "PIPELINE": 1},
]
# (workload, shape set, points); decode shapes first: they matter most for serving
PLAN = [
    ("rmsnorm", "llama3-8b", RMSNORM_POINTS),
    ("gemm", "llama3-8b-o-decode", [p for p in GEMM_POINTS if p["SPLIT_K"] > 1] + GEMM_POINTS[:1]),
    ("gemm", "square-1024", [p for p in GEMM_POINTS if p["SPLIT_K"] == 1]),
    ("fused_add_rmsnorm", "llama3-8b", FUSED_POINTS),
    ("softmax", "llama3-8b", SOFTMAX_POINTS),
    ("kda", "kimi-linear", KDA_POINTS),
]


def _events_ms(cp, fn, reps: int = 20, warmup: int = 3) -> list[float]:
    for _ in range(warmup):
        fn()
    cp.cuda.runtime.deviceSynchronize()
    starts = [cp.cuda.Event() for _ in range(reps)]
    ends = [cp.cuda.Event() for _ in range(reps)]
    for s, e in zip(starts, ends):
        s.record()
        fn()
        e.record()
    ends[-1].synchronize()
    return [float(cp.cuda.get_elapsed_time(s, e)) for s, e in zip(starts, ends)]


def ceilings(cp) -> dict[str, Any]:
    """Copy bandwidth (GB/s, read + write) and float32 matmul rate (GFLOP/s)."""
    n = 1 << 28  # 1 GiB of float32
    a = cp.random.random(n, dtype=cp.float32)
    b = cp.empty_like(a)
    t = float(np.median(_events_ms(cp, lambda dst=b, src=a: cp.copyto(dst, src), reps=10)))
    copy_gbps = 2 * a.nbytes / (t * 1e-3) / 1e9
    del a, b
    m = 4096
    x = cp.random.standard_normal((m, m), dtype=cp.float32)
    y = cp.random.standard_normal((m, m), dtype=cp.float32)
    t2 = float(np.median(_events_ms(cp, lambda: cp.matmul(x, y), reps=10)))
    return {"copy_gbps": copy_gbps, "copy_ms": t, "sgemm_4096_gflops": 2 * m**3 / (t2 * 1e-3) / 1e9,
            "sgemm_4096_ms": t2, "tf32": os.environ.get("CUPY_TF32", "0")}


def cupy_references(cp) -> list[dict[str, Any]]:
    """CuPy's own implementations at the template shape sets, timed with events (no flush:
    best case for the reference)."""
    from kernels.workloads import get_workload

    rows: list[dict[str, Any]] = []
    for set_name in ("llama3-8b-o-decode", "square-1024"):
        wl = get_workload("gemm")
        for shape in wl.shapes(set_name):
            inp = wl.generate(shape, 1)
            a, b = cp.asarray(inp["A"]), cp.asarray(inp["B"])
            t = float(np.median(_events_ms(cp, lambda: cp.matmul(a, b.T))))
            rows.append({"impl": "cupy.matmul(A, B.T)", "workload": "gemm", "shape_set": set_name, "shape": dict(shape),
                         "latency_ms": t, "gflops": wl.flops(shape) / (t * 1e-3) / 1e9,
                         "gbps": wl.bytes(shape) / (t * 1e-3) / 1e9})
    wl = get_workload("rmsnorm")
    eps = float(wl.attrs["eps"])
    for shape in wl.shapes("llama3-8b"):
        inp = wl.generate(shape, 1)
        x, w = cp.asarray(inp["x"]), cp.asarray(inp["w"])

        def rms():
            return x * (1.0 / cp.sqrt(cp.mean(x * x, axis=-1, keepdims=True) + np.float32(eps))) * w

        t = float(np.median(_events_ms(cp, rms)))
        rows.append({"impl": "cupy array ops", "workload": "rmsnorm", "shape_set": "llama3-8b", "shape": dict(shape),
                     "latency_ms": t, "gbps": wl.bytes(shape) / (t * 1e-3) / 1e9})
    wl = get_workload("softmax")
    for shape in wl.shapes("llama3-8b"):
        x = cp.asarray(wl.generate(shape, 1)["x"])

        def smax():
            e = cp.exp(x - x.max(axis=-1, keepdims=True))
            return e / e.sum(axis=-1, keepdims=True)

        t = float(np.median(_events_ms(cp, smax)))
        rows.append({"impl": "cupy array ops", "workload": "softmax", "shape_set": "llama3-8b", "shape": dict(shape),
                     "latency_ms": t, "gbps": wl.bytes(shape) / (t * 1e-3) / 1e9})
    return rows


def evaluate_points(deadline: float, quick: bool) -> list[dict[str, Any]]:
    from kernels import evaluate, load_template

    out = []
    for workload, shape_set, points in PLAN:
        src = load_template(workload, "cuda")
        for params in points[:2] if quick else points:
            if time.monotonic() > deadline:
                out.append({"workload": workload, "shape_set": shape_set, "params": params, "status": "skipped",
                            "reason": "time budget spent"})
                continue
            t0 = time.monotonic()
            try:
                ev = evaluate(workload, src, params, shape_set=shape_set, backend="cuda", timeout_s=180)
                rec = {"workload": workload, "shape_set": shape_set, "params": params, "status": str(ev.status),
                       "metrics": ev.metrics, "static": ev.static, "fingerprint": ev.fingerprint,
                       "log": ev.log if ev.status != "ok" else ev.log[-1500:]}
            except Exception as exc:  # noqa: BLE001 - record and go on
                rec = {"workload": workload, "shape_set": shape_set, "params": params, "status": "error",
                       "reason": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-3000:]}
            rec["wall_s"] = time.monotonic() - t0
            out.append(rec)
            print(f"  {workload:18s} {shape_set:20s} {rec['status']:13s} "
                  f"{rec.get('metrics', {}).get('latency_ms', float('nan')):9.4f} ms  {rec['wall_s']:5.1f} s  {params}",
                  flush=True)
    return out


def in_process(cp, best: dict[str, Any]) -> dict[str, Any] | None:
    """The best rmsnorm point timed in this process on rows=512 (no sandbox, no rotation)."""
    from kernels import load_template
    from kernels.backends.cuda import CudaBackend
    from kernels.evaluation.launch_plan import LaunchPlan, plan_env, plan_names
    from kernels.space import format_defines
    from kernels.templates import default_launch_plan
    from kernels.workloads import get_workload

    wl = get_workload(best["workload"])
    params = best["params"]
    shape = dict(wl.shapes(best["shape_set"])[-1])
    be = CudaBackend()
    art = be.compile(load_template(wl.name, "cuda"), format_defines(params))
    plan = LaunchPlan.from_dict(default_launch_plan(wl.name, params), plan_names(wl, params))
    launches, scratch = plan.resolve(plan_env(wl, shape, params), list(wl.inputs) + list(wl.outputs))
    inp = wl.generate(shape, 3)
    bufs = {k: cp.asarray(v) for k, v in inp.items()}
    bufs.update({k: cp.empty(int(np.prod(s)), cp.float32) for k, s in wl.output_shapes(shape).items()})
    bufs.update({k: cp.empty(n, cp.float32) for k, n in scratch.items()})
    samples = be.run(art, launches, bufs, reps=50)
    return {"workload": wl.name, "shape": shape, "params": params, "median_ms": float(np.median(samples)),
            "min_ms": float(np.min(samples)), "sandboxed_median_ms": best["metrics"].get(
                f"latency_ms[{','.join(f'{k}={v}' for k, v in shape.items())}]")}


def markdown(report: dict[str, Any]) -> str:
    lines = ["# CUDA backend check", ""]
    d = report.get("device", {})
    lines += [f"- GPU: {d.get('gpu')} (cc {d.get('compute_capability')}, {d.get('sm_count')} SMs, "
              f"L2 {int(d.get('l2_bytes') or 0) >> 20} MiB), driver {d.get('driver_version')}, "
              f"runtime {d.get('runtime_version')}, NVRTC {d.get('nvrtc_version')}, cupy {d.get('cupy')}",
              f"- nvcc: {report.get('nvcc')}", f"- host: {report.get('host')}", ""]
    c = report.get("ceilings")
    if c:
        lines += ["## Ceilings (measured)", "",
                  f"- device-to-device copy: {c['copy_gbps']:.0f} GB/s (read + write, 1 GiB)",
                  f"- cupy.matmul float32 4096^3: {c['sgemm_4096_gflops'] / 1e3:.1f} TFLOP/s (CUPY_TF32={c['tf32']})", ""]
    refs = report.get("references", [])
    if refs:
        lines += ["## CuPy references", "", "| impl | workload | shape | latency ms | GB/s | GFLOP/s |", "|---|---|---|---|---|---|"]
        for r in refs:
            lines.append(f"| {r['impl']} | {r['workload']} | {r['shape']} | {r['latency_ms']:.4f} | "
                         f"{r.get('gbps', float('nan')):.0f} | {r.get('gflops', float('nan')):.0f} |")
        lines.append("")
    lines += ["## Template points (full protocol: sandbox, validation, L2 flush)", "",
              "| workload | shape set | status | latency ms (sum) | GB/s | GFLOP/s | % roofline | occupancy min | params |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in report.get("points", []):
        m = r.get("metrics", {})
        lines.append(f"| {r['workload']} | {r['shape_set']} | {r['status']} | {m.get('latency_ms', float('nan')):.4f} | "
                     f"{m.get('gbps', float('nan')):.0f} | {m.get('gflops', float('nan')):.0f} | "
                     f"{m.get('roofline_pct', float('nan')):.1f} | {m.get('occupancy_min', float('nan')):.2f} | "
                     f"{json.dumps(r['params'], separators=(',', ':'))} |")
    best = report.get("best", {})
    if best:
        lines += ["", "## Best point per (workload, shape set)", ""]
        for key, b in best.items():
            lines.append(f"- {key}: {b['metrics']['latency_ms']:.4f} ms, {json.dumps(b['params'])}")
    ip = report.get("in_process")
    if ip:
        lines += ["", f"In-process timing of the best rmsnorm point at {ip['shape']}: median {ip['median_ms']:.4f} ms "
                      f"(sandboxed protocol: {ip['sandboxed_median_ms']} ms)"]
    if report.get("errors"):
        lines += ["", "## Errors", ""] + [f"- {e}" for e in report["errors"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or "benchmarks/results")
    ap.add_argument("--budget-s", type=float, default=300.0, help="stop starting evaluations after this many seconds")
    ap.add_argument("--quick", action="store_true", help="two points per workload")
    args = ap.parse_args(argv)
    start = time.monotonic()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "host": platform.node(), "errors": []}
    from kernels.evaluation import static

    report["nvcc"] = static.nvcc_version()
    try:
        from kernels.backends.cuda import device_info, import_cupy

        cp = import_cupy()
        report["device"] = device_info(cp)
    except Exception as exc:  # noqa: BLE001
        report["errors"].append(f"no usable GPU: {type(exc).__name__}: {exc}")
        (out / "cuda_check.json").write_text(json.dumps(report, indent=1, default=str))
        print(markdown(report))
        return 2
    for name, step in (("ceilings", lambda: ceilings(cp)), ("references", lambda: cupy_references(cp))):
        try:
            report[name] = step()
        except Exception as exc:  # noqa: BLE001
            report["errors"].append(f"{name}: {type(exc).__name__}: {exc}")
        cp.get_default_memory_pool().free_all_blocks()
    print(f"evaluating template points (budget {args.budget_s:.0f} s) ...", flush=True)
    report["points"] = evaluate_points(start + args.budget_s, args.quick)
    best: dict[str, Any] = {}
    for r in report["points"]:
        if r["status"] == "ok":
            key = f"{r['workload']}/{r['shape_set']}"
            if key not in best or r["metrics"]["latency_ms"] < best[key]["metrics"]["latency_ms"]:
                best[key] = r
    report["best"] = {k: {"params": v["params"], "metrics": v["metrics"]} for k, v in best.items()}
    if "rmsnorm/llama3-8b" in best:
        try:
            report["in_process"] = in_process(cp, best["rmsnorm/llama3-8b"])
        except Exception as exc:  # noqa: BLE001
            report["errors"].append(f"in-process timing: {type(exc).__name__}: {exc}")
    report["wall_s"] = time.monotonic() - start
    (out / "cuda_check.json").write_text(json.dumps(report, indent=1, default=str, allow_nan=True))
    md = markdown(report)
    (out / "cuda_check.md").write_text(md)
    print(md)
    tried = [r for r in report["points"] if r["status"] != "skipped"]
    return 0 if tried and all(r["status"] == "ok" for r in tried) else 1


if __name__ == "__main__":
    sys.exit(main())
