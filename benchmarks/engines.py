"""Inference engines against what people run today, in one reproducible run.

    python -m benchmarks.engines [--threads N] [--rounds R] [--quick] [--json] [--out FILE]

- MiniLM-L6 encoder: sentences/s at batch 1 and 32 against ``sentence-transformers``
  (PyTorch, CPU) in the same run (interleaved rounds), for the default plan (production
  kernels, else NumPy/BLAS baselines), the all-templates plan and the naive unfused plan.
  Targets: >= 1.0x at batch 1, >= 0.8x at batch 32.
- Llama-3-8B decoder layer (real dimensions) and Kimi Linear KDA layer (real dimensions):
  prefill latency per sequence and decode latency per token against a plain NumPy float32
  implementation (``--quick``: reduced dimensions). On a GPU target the comparison is
  against PyTorch eager; without a GPU that row is reported as unavailable.
- Serving: requests/s and p50/p99 latency of ``/v1/embeddings`` with 1, 8 and 32 concurrent
  clients on loopback.
- Time per operator of every engine (from the benchmarks' profiled runs).

Each part runs as ``python -m engines bench`` in its own process with the thread counts set
before NumPy loads; the figures are medians over rounds with their samples kept in the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path


def _bench(engine: str, threads: int, rounds: int, extra: list[str]) -> dict:
    cmd = [sys.executable, "-m", "engines", "bench", "--engine", engine, "--threads", str(threads),
           "--rounds", str(rounds), "--json", *extra]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        return {"error": out.stderr[-3000:], "command": " ".join(cmd)}
    return json.loads(out.stdout)


def run(threads: int, rounds: int, quick: bool) -> dict:
    from engines._loadtest import load_benchmark  # noqa: PLC0415

    t0 = time.time()
    layer = ["--config", "small", "--prompt", "32", "--decode-steps", "4"] if quick else ["--prompt", "128", "--decode-steps", "8"]
    kda = ["--config", "small", "--prompt", "32", "--decode-steps", "4"] if quick else ["--prompt", "128", "--decode-steps", "8"]
    report = {
        "threads": threads, "rounds": rounds, "quick": quick,
        "minilm": _bench("minilm", threads, rounds, []),
        "llama_layer": _bench("llama-layer", threads, rounds, layer),
        "kda_layer": _bench("kda-layer", threads, rounds, kda),
    }
    report["serving"] = load_benchmark(threads=threads, requests_per_client=10 if quick else 30)
    report["seconds"] = time.time() - t0
    return report


def summary(r: dict) -> str:
    lines = [f"threads={r['threads']} rounds={r['rounds']}"]
    m = r["minilm"]
    if "error" not in m:
        st = m["sentences_per_s"]["sentence-transformers"]
        lines.append(f"MiniLM sentences/s  sentence-transformers: b1 {st['batch_1']:.1f}  b32 {st['batch_32']:.1f}")
        for name, s in m["speedup_vs_sentence_transformers"].items():
            rate = m["sentences_per_s"][name]
            lines.append(f"  {name:<10} b1 {rate['batch_1']:.1f} ({s['batch_1']:.2f}x)  b32 {rate['batch_32']:.1f} ({s['batch_32']:.2f}x)")
    for key in ("llama_layer", "kda_layer"):
        b = r[key]
        if "error" in b:
            lines.append(f"{key}: error {b['error'][-300:]}")
            continue
        n = b["latency"]["numpy"]
        lines.append(f"{key} ({b['config']}): numpy prefill {n['prefill_ms']:.1f} ms, decode {n['decode_ms_per_token']:.2f} ms/token")
        for name, lat in b["latency"].items():
            if name != "numpy":
                sp = b["speedup_vs_numpy"][name]
                lines.append(f"  {name:<10} prefill {lat['prefill_ms']:.1f} ms ({sp['prefill_ms']:.2f}x)  "
                             f"decode {lat['decode_ms_per_token']:.2f} ms ({sp['decode_ms_per_token']:.2f}x)")
    for row in r["serving"]["results"]:
        lines.append(f"serving c={row['concurrency']:<3} {row['requests_per_s']:.1f} req/s  p50 {row['p50_ms']:.1f} ms  "
                     f"p99 {row['p99_ms']:.1f} ms  errors {row['errors']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="reduced layer dimensions")
    p.add_argument("--json", action="store_true")
    p.add_argument("--out", type=Path, help="also write the JSON report here")
    args = p.parse_args(argv)
    report = run(args.threads, args.rounds, args.quick)
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    print(json.dumps(report) if args.json else summary(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
