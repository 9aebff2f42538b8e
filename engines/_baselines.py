"""Baseline implementations of every workload an engine uses: NumPy float32 + BLAS on CPU.

Each function has the calling convention of :class:`engines._binding.BoundKernel`:
``fn(inputs, outputs, shape, attrs)`` reads the workload's named inputs (float32,
C-contiguous, read-only), writes every named output in place (preallocated float32), and
returns nothing. ``numpy.matmul`` uses the BLAS that NumPy ships with (OpenBLAS), on its
default threads. These are what an engine runs for an operator that has no production kernel
(and what a CuPy/cuBLAS baseline would be on a GPU target).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

Arrays = Mapping[str, np.ndarray]
BaselineFn = Callable[[Arrays, dict, Mapping[str, int], Mapping[str, float]], None]

_SQRT1_2 = np.float32(0.7071067811865476)


def _erf(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    from scipy.special import erf  # noqa: PLC0415 - scipy is imported on first use only

    return erf(x, out=out)


def gelu_(x: np.ndarray) -> np.ndarray:
    """Exact GELU of ``x`` in place (float32): ``0.5 x (1 + erf(x / sqrt 2))``."""
    t = x * _SQRT1_2
    _erf(t, out=t)
    t += np.float32(1.0)
    x *= t
    x *= np.float32(0.5)
    return x


def rmsnorm(i, o, s, a):
    x = i["x"]
    ms = np.einsum("ij,ij->i", x, x, dtype=np.float32)[:, None] / np.float32(x.shape[1])
    np.multiply(x, 1.0 / np.sqrt(ms + np.float32(a["eps"])), out=o["y"])
    o["y"] *= i["w"]


def fused_add_rmsnorm(i, o, s, a):
    r = o["residual_out"]
    np.add(i["x"], i["residual"], out=r)
    rmsnorm({"x": r, "w": i["w"]}, {"y": o["y"]}, s, a)


def layernorm(i, o, s, a):
    x, y = i["x"], o["y"]
    mu = x.mean(axis=1, keepdims=True)
    np.subtract(x, mu, out=y)
    var = np.einsum("ij,ij->i", y, y, dtype=np.float32)[:, None] / np.float32(x.shape[1])
    y *= 1.0 / np.sqrt(var + np.float32(a["eps"]))
    y *= i["w"]
    y += i["b"]


def gelu(i, o, s, a):
    np.copyto(o["y"], i["x"])
    gelu_(o["y"])


def gemm(i, o, s, a):
    np.matmul(i["A"], i["B"].T, out=o["C"])


def gemm_bias(i, o, s, a):
    C = o["C"]
    np.matmul(i["A"], i["B"].T, out=C)
    C += i["bias"]
    if float(a.get("act", 0.0)) == 1.0:
        gelu_(C)


def softmax(i, o, s, a):
    x, y = i["x"], o["y"]
    np.subtract(x, x.max(axis=1, keepdims=True), out=y)
    np.exp(y, out=y)
    y /= y.sum(axis=1, keepdims=True)


def _softmax_rows(sc: np.ndarray) -> np.ndarray:
    sc -= sc.max(axis=-1, keepdims=True)
    np.exp(sc, out=sc)
    sc /= sc.sum(axis=-1, keepdims=True)
    return sc


def attention(i, o, s, a):
    q, k, v = i["q"], i["k"], i["v"]
    B, S, H, D = q.shape
    KVH = k.shape[2]
    G = H // KVH
    # [B, KVH, G*S, D] x [B, KVH, D, S]: the G query heads of a group share K and V (no repeat)
    qg = q.reshape(B, S, KVH, G, D).transpose(0, 2, 3, 1, 4).reshape(B, KVH, G * S, D)
    sc = np.matmul(qg, k.transpose(0, 2, 3, 1)) * np.float32(D**-0.5)
    if float(a.get("causal", 1.0)) == 1.0:
        mask = np.triu(np.ones((S, S), dtype=bool), 1)
        sc.reshape(B, KVH, G, S, S)[..., mask] = -np.inf
    _softmax_rows(sc)
    out = np.matmul(sc, v.transpose(0, 2, 1, 3))  # [B, KVH, G*S, D]
    o["o"][...] = out.reshape(B, KVH, G, S, D).transpose(0, 3, 1, 2, 4).reshape(B, S, H, D)


def decode_attention(i, o, s, a):
    q, k, v = i["q"], i["k"], i["v"]
    B, H, D = q.shape
    KVH = k.shape[2]
    G = H // KVH
    qg = q.reshape(B, KVH, G, D)
    sc = np.matmul(qg, k.transpose(0, 2, 3, 1)) * np.float32(D**-0.5)  # [B, KVH, G, L]
    _softmax_rows(sc)
    o["o"][...] = np.matmul(sc, v.transpose(0, 2, 1, 3)).reshape(B, H, D)


def rope(i, o, s, a):
    x, y = i["x"], o["y"]
    half = x.shape[-1] // 2
    c, sn = i["cos"][:, None, :], i["sin"][:, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    np.subtract(x1 * c, x2 * sn, out=y[..., :half])
    np.add(x2 * c, x1 * sn, out=y[..., half:])


def swiglu(i, o, s, a):
    x, y = i["x"], o["y"]
    n = y.shape[1]
    g = x[:, :n]
    with np.errstate(over="ignore"):
        np.exp(-g, out=y)
    y += np.float32(1.0)
    np.divide(g, y, out=y)
    y *= x[:, n:]


def kda(i, o, s, a):
    """Token-by-token KDA in float32, vectorised over heads (:func:`kernels.baselines.numpy_kda`):
    measured faster in NumPy than the chunked form at Kimi Linear's sizes (128-token prompt, 32
    heads of 128: 0.5 s vs 1.3 s), whose [heads, C, C, d] decay tensors dominate."""
    from kernels.baselines import numpy_kda  # noqa: PLC0415

    out, state = numpy_kda(i["q"], i["k"], i["v"], i["g"], i["beta"])
    o["o"][...] = out
    o["state"][...] = state


BASELINES: dict[str, BaselineFn] = {
    "rmsnorm": rmsnorm,
    "fused_add_rmsnorm": fused_add_rmsnorm,
    "layernorm": layernorm,
    "gelu": gelu,
    "gemm": gemm,
    "gemm_bias": gemm_bias,
    "softmax": softmax,
    "attention": attention,
    "decode_attention": decode_attention,
    "rope": rope,
    "swiglu": swiglu,
    "kda": kda,
}
