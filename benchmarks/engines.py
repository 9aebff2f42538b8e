"""Inference engines against what people run today, side by side in one run.

    python -m benchmarks.engines [--threads N] [--rounds R] [--quick] [--json] [--out DIR]

- MiniLM-L6 encoder: sentences/s at batch 1 and 32, on short (about 10 tokens) and long
  (230-250 tokens) inputs, against ``sentence-transformers`` (PyTorch, CPU) in the same run
  (interleaved rounds), for the default plan (production kernels, else NumPy/BLAS
  baselines), the all-templates plan and the naive unfused plan.
- Llama-3-8B decoder layer and Kimi Linear KDA layer (real dimensions; ``--quick``: reduced):
  prefill latency per sequence and decode latency per token against PyTorch eager on the
  CPU with the same weights and thread count (outputs checked equal within the layers'
  tolerance) and a plain NumPy float32 implementation.
- Serving: requests/s and p50/p99 latency of ``/v1/embeddings`` with 1, 8 and 32 concurrent
  clients on loopback.
- Where the engines lose: every scenario below 1.0x against the PyTorch side, with the
  engine's dominant operators (per-operator timing of a profiled run), the PyTorch side's
  dominant operators (``torch.profiler``) and, for decode, the rate at which each side
  streams the weights (GB/s).

Each part runs as ``python -m engines bench`` in its own process with the thread counts set
before NumPy loads; the figures are medians over rounds with their samples kept in the JSON.
Results: ``<out>/engines.json`` and ``<out>/engines.md`` (default ``benchmarks/results``),
headed by the host and the date.
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


def run(threads: int, rounds: int, quick: bool, *, serving: bool = True) -> dict:
    from engines._loadtest import load_benchmark  # noqa: PLC0415

    t0 = time.time()
    layer = ["--config", "small", "--prompt", "32", "--decode-steps", "4"] if quick else ["--prompt", "128", "--decode-steps", "8"]
    kda = ["--config", "small", "--prompt", "32", "--decode-steps", "4"] if quick else ["--prompt", "128", "--decode-steps", "8"]
    report = {
        "host": host_info(), "threads": threads, "rounds": rounds, "quick": quick,
        "minilm": _bench("minilm", threads, rounds, []),
        "llama_layer": _bench("llama-layer", threads, rounds, layer),
        "kda_layer": _bench("kda-layer", threads, rounds, kda),
    }
    if serving:
        report["serving"] = load_benchmark(threads=threads, requests_per_client=10 if quick else 30)
    report["seconds"] = time.time() - t0
    return report


def _fmt(v: float) -> str:
    return f"{v:.3g}" if abs(v) < 100 else f"{v:.0f}"


def minilm_table(m: dict) -> str:
    """Markdown: sentences/s of each side per scenario, and each engine plan's ratio."""
    rates, sp = m["sentences_per_s"], m["speedup_vs_sentence_transformers"]
    keys = list(rates["sentence-transformers"])
    tok = m.get("tokens_per_input", {})
    head = "| side | " + " | ".join(f"{k.replace('_', ' ')} ({tok.get(k.split('_')[0], 0):.0f} tok)" for k in keys) + " |"
    lines = [head, "|---" * (len(keys) + 1) + "|"]
    for name, r in rates.items():
        cells = [f"{_fmt(r[k])}" + (f" ({sp[name][k]:.2f}x)" if name in sp else "") for k in keys]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def layer_table(b: dict) -> str:
    """Markdown: prefill and decode latency of each side, ratio against PyTorch and NumPy."""
    lat, vt, vn = b["latency"], b.get("speedup_vs_torch", {}), b["speedup_vs_numpy"]
    gbs, agree = b.get("decode_weight_gb_per_s", {}), b.get("agreement_with_torch", {})
    lines = ["| side | prefill (ms) | vs torch | vs numpy | decode (ms/token) | vs torch | vs numpy | decode weights GB/s | max rel. error vs torch |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, v in lat.items():
        def r(d, k):
            return f"{d[name][k]:.2f}x" if name in d else "-"
        err = f"{agree[name]:.1e}" if name in agree else "-"
        lines.append(f"| {name} | {_fmt(v['prefill_ms'])} | {r(vt, 'prefill_ms')} | {r(vn, 'prefill_ms')} | "
                     f"{_fmt(v['decode_ms_per_token'])} | {r(vt, 'decode_ms_per_token')} | "
                     f"{r(vn, 'decode_ms_per_token')} | {gbs.get(name, 0):.2f} | {err} |")
    return "\n".join(lines)


def _top(rows: list[dict], n: int = 3) -> str:
    return ", ".join(f"{r['label']} {100 * r['share']:.0f}%" for r in rows[:n])


def _top_torch(rows: list, n: int = 3) -> str:
    return ", ".join(f"{k} {100 * share:.0f}%" for k, _ms, share in rows[:n])


def losses(r: dict) -> list[str]:
    """One line per scenario where an engine plan is slower than the PyTorch side (ratio < 1),
    with where its time goes."""
    out = []
    m = r.get("minilm", {})
    if "error" not in m and m:
        prof = m.get("torch_profile", {})
        for plan, per in m["speedup_vs_sentence_transformers"].items():
            for key, ratio in per.items():
                if ratio >= 1.0:
                    continue
                bd = m.get("breakdown", {}).get(f"{plan}/{key}")
                line = f"- MiniLM `{plan}` {key.replace('_', ' ')}: {ratio:.2f}x sentence-transformers"
                if bd:
                    line += f"; engine time: {_top(bd)}"
                tp = prof.get(key) or prof.get(key.replace("_batch_1", "_batch_32"))
                if tp:
                    line += f"; torch time ({key.split('_')[0]} batch 32): {_top_torch(tp)}"
                out.append(line)
    for key in ("llama_layer", "kda_layer"):
        b = r.get(key, {})
        if "error" in b or "speedup_vs_torch" not in b:
            continue
        for plan, per in b["speedup_vs_torch"].items():
            if plan == "numpy":
                continue
            for phase, ratio in per.items():
                if ratio >= 1.0:
                    continue
                mode = "prefill" if phase.startswith("prefill") else "decode"
                bd = b["breakdown"].get(mode if plan == "default" else f"{plan}/{mode}")
                line = f"- {b['engine']} ({b['config']}) `{plan}` {mode}: {ratio:.2f}x PyTorch"
                if bd:
                    line += f"; engine time: {_top(bd)}"
                if mode == "decode":
                    g = b["decode_weight_gb_per_s"]
                    line += f"; weights streamed at {g[plan]:.1f} GB/s against PyTorch's {g['torch']:.1f} GB/s"
                out.append(line)
    return out


def markdown(r: dict, argv: list[str]) -> str:
    env = r["host"]
    parts = ["# Inference engines against PyTorch and sentence-transformers\n",
             f"Host `{env['hostname']}` ({env['cpus']} CPUs, {env['machine']}), {env['date']}; "
             f"`python -m benchmarks.engines {' '.join(argv)}`: {r['seconds']:.0f} s, {r['threads']} threads a side, "
             f"{r['rounds']} interleaved rounds, medians. Load average at the start "
             f"{', '.join(f'{x:.1f}' for x in env['load_avg'])}: the host is shared with other work and was loaded "
             "during the run, so ratios (both sides measured round by round under the same load) are more "
             "trustworthy than absolute figures.\n"]
    m = r["minilm"]
    if "error" in m:
        parts.append(f"MiniLM: error\n\n```\n{m['error'][-1500:]}\n```\n")
    else:
        parts.append("## MiniLM-L6 (sentences/s; ratio against sentence-transformers)\n\n" + minilm_table(m) + "\n")
    for key, title in (("llama_layer", "Llama-3-8B decoder layer"), ("kda_layer", "Kimi Linear KDA layer")):
        b = r[key]
        if "error" in b:
            parts.append(f"## {title}: error\n\n```\n{b['error'][-1500:]}\n```\n")
            continue
        parts.append(f"## {title} (`{b['config']}`, prompt {b['prompt']}, decode context {b['decode_context']}; "
                     f"PyTorch {b.get('torch', {}).get('torch', '?')})\n\n" + layer_table(b) + "\n")
    rows = r.get("serving", {}).get("results", [])
    if rows:
        parts.append("## Serving `/v1/embeddings` (one-sentence requests, loopback)\n\n| clients | requests/s | p50 (ms) | p99 (ms) | errors |\n|---|---|---|---|---|\n"
                     + "\n".join(f"| {x['concurrency']} | {x['requests_per_s']:.1f} | {x['p50_ms']:.1f} | {x['p99_ms']:.1f} | {x['errors']} |"
                                 for x in rows) + "\n")
    lost = losses(r)
    parts.append("## Where the engines lose\n\n" + ("\n".join(lost) if lost else "Nowhere in this run.") + "\n")
    return "\n".join(parts)


def summary(r: dict) -> str:
    lines = [f"threads={r['threads']} rounds={r['rounds']}"]
    if "error" not in r["minilm"]:
        lines.append(minilm_table(r["minilm"]))
    for key in ("llama_layer", "kda_layer"):
        b = r[key]
        lines.append(f"{key}: error {b['error'][-300:]}" if "error" in b else layer_table(b))
    lines += losses(r)
    return "\n".join(lines)


def host_info() -> dict:
    import datetime  # noqa: PLC0415
    import platform  # noqa: PLC0415

    return {"hostname": platform.node(), "machine": platform.machine(), "cpus": os.cpu_count(),
            "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "load_avg": list(os.getloadavg()) if hasattr(os, "getloadavg") else [], "python": platform.python_version()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="reduced layer dimensions")
    p.add_argument("--json", action="store_true")
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "results",
                   help="folder for engines.json and engines.md")
    p.add_argument("--no-serving", action="store_true", help="skip the serving part")
    args = p.parse_args(argv)
    report = run(args.threads, args.rounds, args.quick, serving=not args.no_serving)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "engines.json").write_text(json.dumps(report, indent=1, default=str))
    (args.out / "engines.md").write_text(markdown(report, sys.argv[1:] if argv is None else argv))
    print(json.dumps(report, default=str) if args.json else summary(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
