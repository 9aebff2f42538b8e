"""Independent float64 NumPy models of the engines' layers (validation oracles).

Written from the papers and model cards, sharing no code with the engines' graphs: plain
float64 expressions, one sequence at a time, the whole sequence at once (so an engine's
prefill + decode over a KV cache must reproduce a single full-sequence forward).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np


def rmsnorm64(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def silu64(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def rope64(x: np.ndarray, positions: np.ndarray, theta: float) -> np.ndarray:
    """Rotate-half RoPE of x [S, heads, D] at ``positions`` [S], angles in float64."""
    d = x.shape[-1]
    inv = theta ** (-np.arange(0, d, 2) / d)
    ang = positions[:, None].astype(np.float64) * inv[None, :]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)


def causal_gqa64(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """q [S, H, D], k/v [S, KVH, D] -> [S, H, D], causal, scale D^-0.5, float64."""
    S, H, D = q.shape
    G = H // k.shape[1]
    out = np.empty((S, H, D))
    mask = np.triu(np.ones((S, S), dtype=bool), 1)
    for h in range(H):
        sc = q[:, h] @ k[:, h // G].T / np.sqrt(D)
        sc[mask] = -np.inf
        p = np.exp(sc - sc.max(axis=1, keepdims=True))
        out[:, h] = (p / p.sum(axis=1, keepdims=True)) @ v[:, h // G]
    return out


def llama_layer64(x: np.ndarray, weights: dict[str, np.ndarray], cfg) -> np.ndarray:
    """A Llama decoder layer in float64 over one whole sequence.

    Args:
        x: [S, hidden] (positions 0..S-1).
        weights: :func:`engines.llama.llama_weights` (float32, converted here).
        cfg: :class:`engines.llama.LlamaConfig`.

    Returns:
        float64 [S, hidden].
    """
    W = {k: v.astype(np.float64) for k, v in weights.items()}
    x = x.astype(np.float64)
    S = x.shape[0]
    qd, kvd = cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
    wq, wk, wv = W["w_qkv"][:qd], W["w_qkv"][qd: qd + kvd], W["w_qkv"][qd + kvd:]
    h = rmsnorm64(x, W["ln1"], cfg.eps)
    pos = np.arange(S)
    q = rope64((h @ wq.T).reshape(S, cfg.heads, cfg.head_dim), pos, cfg.rope_theta)
    k = rope64((h @ wk.T).reshape(S, cfg.kv_heads, cfg.head_dim), pos, cfg.rope_theta)
    v = (h @ wv.T).reshape(S, cfg.kv_heads, cfg.head_dim)
    r = x + causal_gqa64(q, k, v).reshape(S, qd) @ W["w_o"].T
    h2 = rmsnorm64(r, W["ln2"], cfg.eps)
    gate, up = h2 @ W["w_gate_up"][: cfg.inter].T, h2 @ W["w_gate_up"][cfg.inter:].T
    return r + (silu64(gate) * up) @ W["w_down"].T


# -- KDA ------------------------------------------------------------------------------------

SHARED_KDA = Path(__file__).resolve().parents[2] / "shared" / "reference" / "kda_reference.py"


def shared_kda_reference():
    """The independent ``shared/reference/kda_reference.py`` module, or None if absent."""
    for base in Path(__file__).resolve().parents:
        path = base / "shared" / "reference" / "kda_reference.py"
        if path.is_file():
            spec = importlib.util.spec_from_file_location("kda_reference_shared", path)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            return mod
    return None


def kda_recurrent64(q, k, v, g, beta, state=None):
    """Token-by-token KDA (Kimi Linear Eq. (1)) in float64, heads-first: q, k, g [H, T, dk],
    v [H, T, dv], beta [H, T], optional initial state [H, dk, dv]. Returns (o, final state)."""
    H, T, dk = q.shape
    S = np.zeros((H, dk, v.shape[-1])) if state is None else np.array(state, dtype=np.float64)
    o = np.empty((H, T, v.shape[-1]))
    for t in range(T):
        S = S * np.exp(g[:, t])[:, :, None]
        pred = np.einsum("hk,hkv->hv", k[:, t], S)
        S = S + k[:, t, :, None] * (beta[:, t, None] * (v[:, t] - pred))[:, None, :]
        o[:, t] = np.einsum("hk,hkv->hv", q[:, t] * dk**-0.5, S)
    return o, S


def short_conv64(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Causal depthwise conv over time + SiLU: x [T, C], w [C, W] -> [T, C]:
    ``y[t] = silu(sum_j w[:, j] x[t - W + 1 + j])`` with zeros before the sequence."""
    T, C = x.shape
    W = w.shape[1]
    xp = np.concatenate([np.zeros((W - 1, C)), x], axis=0)
    y = sum(w[:, j] * xp[j: j + T] for j in range(W))
    return silu64(y)


def l2norm64(x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    return x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + eps)


def sigmoid64(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def kda_layer64(x: np.ndarray, weights: dict[str, np.ndarray], cfg, core: str = "recurrent") -> np.ndarray:
    """A Kimi Linear KDA layer in float64 over one whole sequence.

    Args:
        x: [T, hidden].
        weights: :func:`engines.kda_layer.kda_weights`.
        cfg: :class:`engines.kda_layer.KdaConfig`.
        core: ``"recurrent"`` (this module's token-by-token form) or ``"shared"`` (the chunked
            form of ``shared/reference/kda_reference.py``).

    Returns:
        float64 [T, hidden].
    """
    W = {k: v.astype(np.float64) for k, v in weights.items()}
    x = x.astype(np.float64)
    T = x.shape[0]
    H, D, kd = cfg.heads, cfg.head_dim, cfg.heads * cfg.head_dim
    qkv = x @ W["w_qkv"].T
    q = short_conv64(qkv[:, :kd], W["conv"][:kd]).reshape(T, H, D)
    k = short_conv64(qkv[:, kd: 2 * kd], W["conv"][kd: 2 * kd]).reshape(T, H, D)
    v = short_conv64(qkv[:, 2 * kd:], W["conv"][2 * kd:]).reshape(T, H, D)
    q, k = l2norm64(q), l2norm64(k)
    f = (x @ W["w_f_a"].T) @ W["w_f_b"].T  # low-rank gate projection [T, kd]
    f = (f.reshape(T, H, D) + W["dt_bias"].reshape(H, D)) * np.exp(W["A_log"])[:, None]
    g = cfg.gate_lower_bound * sigmoid64(f)  # [T, H, D], log decay in [lower_bound, 0)
    beta = sigmoid64(x @ W["w_b"].T)  # [T, H]
    args = [np.moveaxis(a, 1, 0) for a in (q, k, v, g)] + [beta.T]
    if core == "shared":
        mod = shared_kda_reference()
        if mod is None:
            raise FileNotFoundError("shared/reference/kda_reference.py not found")
        o, _ = mod.chunk_kda(*[np.moveaxis(a, 0, 1)[None] for a in args[:4]], args[4].T[None], chunk_size=64)
        o = o[0]  # [T, H, D]
    else:
        o, _ = kda_recurrent64(*args)
        o = np.moveaxis(o, 0, 1)  # [T, H, D]
    gate = sigmoid64((x @ W["w_g_a"].T) @ W["w_g_b"].T + W["g_b_bias"]).reshape(T, H, D)
    o = rmsnorm64(o, W["o_norm"], cfg.eps) * gate
    return o.reshape(T, kd) @ W["w_o"].T
