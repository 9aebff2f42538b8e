"""Plain NumPy float32 implementations of the layers: what an engineer writes without kernels
or a plan (BLAS matmuls, no fusion, a list-free growing KV cache). The layer benchmarks'
baseline ("against a plain NumPy implementation on CPU")."""

from __future__ import annotations

import numpy as np

f32 = np.float32


def _rms(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + f32(eps)) * w


def _rope(x, pos, theta):
    d = x.shape[-1]
    inv = (theta ** (-np.arange(0, d, 2, dtype=np.float64) / d))
    ang = np.asarray(pos, np.float64)[:, None] * inv
    c, s = np.cos(ang).astype(f32)[:, None], np.sin(ang).astype(f32)[:, None]
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)


def _softmax(s):
    s = s - s.max(axis=-1, keepdims=True)
    e = np.exp(s)
    return e / e.sum(axis=-1, keepdims=True)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


class NumpyLlamaLayer:
    """Llama decoder layer in float32 NumPy: ``prefill(x [S, hidden])`` then ``decode(x [hidden])``."""

    def __init__(self, weights: dict, cfg) -> None:
        self.w, self.c = weights, cfg
        qd, kvd = cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
        self.wq, self.wk, self.wv = weights["w_qkv"][:qd], weights["w_qkv"][qd:qd + kvd], weights["w_qkv"][qd + kvd:]
        self.wg, self.wu = weights["w_gate_up"][: cfg.inter], weights["w_gate_up"][cfg.inter:]
        self.k = self.v = None

    def _attn_mlp(self, x, q, k_all, v_all, causal_offset):
        c, w = self.c, self.w
        S, G = q.shape[0], c.heads // c.kv_heads
        out = np.empty((S, c.heads, c.head_dim), f32)
        for h in range(c.heads):
            sc = q[:, h] @ k_all[:, h // G].T * f32(c.head_dim ** -0.5)
            if S > 1:
                sc[np.arange(k_all.shape[0])[None, :] > (causal_offset + np.arange(S))[:, None]] = -np.inf
            out[:, h] = _softmax(sc) @ v_all[:, h // G]
        r = x + out.reshape(S, -1) @ w["w_o"].T
        h2 = _rms(r, w["ln2"], c.eps)
        g = h2 @ self.wg.T
        return r + (g * _sigmoid(g) * (h2 @ self.wu.T)) @ w["w_down"].T

    def _qkv(self, x, pos):
        c = self.c
        h = _rms(x, self.w["ln1"], c.eps)
        S = x.shape[0]
        q = _rope((h @ self.wq.T).reshape(S, c.heads, c.head_dim), pos, c.rope_theta)
        k = _rope((h @ self.wk.T).reshape(S, c.kv_heads, c.head_dim), pos, c.rope_theta)
        return q, k, (h @ self.wv.T).reshape(S, c.kv_heads, c.head_dim)

    def prefill(self, x):
        q, k, v = self._qkv(x, np.arange(x.shape[0]))
        self.k, self.v = k, v
        return self._attn_mlp(x, q, k, v, 0)

    def decode(self, x):
        pos = self.k.shape[0]
        q, k, v = self._qkv(x[None], np.array([pos]))
        self.k, self.v = np.concatenate([self.k, k]), np.concatenate([self.v, v])
        return self._attn_mlp(x[None], q, self.k, self.v, pos)[0]


class NumpyKdaLayer:
    """Kimi Linear KDA layer in float32 NumPy (token-by-token recurrence, as FLA's
    ``naive_recurrent_kda``): ``prefill(x [T, hidden])`` then ``decode(x [hidden])``."""

    def __init__(self, weights: dict, cfg) -> None:
        from engines.kda_layer import split_weights  # noqa: PLC0415

        self.w, self.c = split_weights(weights, cfg), cfg
        self.S = self.conv = None

    def _project(self, x, conv_in):
        c, w = self.c, self.w
        kd, H, D = c.kd, c.heads, c.head_dim
        pre = x @ w["w_qkv"].T  # [T, 3kd]
        xp = np.concatenate([conv_in, pre])
        T = x.shape[0]
        y = sum(w["conv"][:, j] * xp[j: j + T] for j in range(c.conv))
        self.conv = xp[-(c.conv - 1):]
        y = y * _sigmoid(y)
        q, k, v = (y[:, i * kd:(i + 1) * kd].reshape(T, H, D) for i in range(3))
        q = q / np.sqrt((q * q).sum(-1, keepdims=True) + f32(1e-6))
        k = k / np.sqrt((k * k).sum(-1, keepdims=True) + f32(1e-6))
        f = (x @ w["w_f_a"].T) @ w["w_f_b"].T
        g = f32(c.gate_lower_bound) * _sigmoid((f.reshape(T, H, D) + w["dt_bias"].reshape(H, D)) * np.exp(w["A_log"])[:, None])
        beta = _sigmoid(x @ w["w_b"].T)
        return q, k, v, g, beta

    def _run(self, x, conv_in):
        c, w = self.c, self.w
        q, k, v, g, beta = self._project(x, conv_in)
        T = x.shape[0]
        o = np.empty_like(v)
        S = self.S
        for t in range(T):
            S *= np.exp(g[t])[:, :, None]
            pred = np.einsum("hk,hkv->hv", k[t], S)
            S += k[t][:, :, None] * (beta[t][:, None] * (v[t] - pred))[:, None, :]
            o[t] = np.einsum("hk,hkv->hv", q[t] * f32(c.head_dim ** -0.5), S)
        gate = _sigmoid((x @ w["w_g_a"].T) @ w["w_g_b"].T + w["g_b_bias"]).reshape(T, c.heads, c.head_dim)
        return (_rms(o, w["o_norm"], c.eps) * gate).reshape(T, c.kd) @ w["w_o"].T

    def prefill(self, x):
        c = self.c
        self.S = np.zeros((c.heads, c.head_dim, c.head_dim), f32)
        return self._run(x, np.zeros((c.conv - 1, 3 * c.kd), f32))

    def decode(self, x):
        return self._run(x[None], self.conv)[0]
