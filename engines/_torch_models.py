"""PyTorch (CPU, eager) implementations of the layers: what people run on a CPU without
the engines, and the layer benchmarks' second peer.

* :class:`TorchLlamaLayer`: Hugging Face ``LlamaDecoderLayer``'s computation (RMSNorm,
  ``F.linear``, rotate-half RoPE, ``F.scaled_dot_product_attention`` with GQA, SwiGLU MLP),
  decode over a KV cache grown by ``torch.cat`` (``transformers``' ``DynamicCache``).
* :class:`TorchKdaLayer`: FLA's ``KimiDeltaAttention`` on CPU: ``F.linear`` projections, a
  depthwise causal ``F.conv1d`` (``ShortConvolution``'s PyTorch path) with SiLU, the gates,
  and the token-by-token recurrence of FLA's ``naive_recurrent_kda`` (FLA's chunked kernels
  are Triton, GPU only).

Both take the engines' weight dicts (float32 NumPy, shared with ``torch.from_numpy``):
``prefill(x [T, hidden])`` then ``decode(x [hidden])``, float32 tensors in and out.

``python -m engines._torch_models ENGINE CONFIG THREADS PROMPT DECODE_STEPS OUT.npy``
runs one as the benchmark's child process (torch's OpenMP runtime stays out of the engine's
process): it builds the engine's seeded weights (seed 0) and inputs (:func:`bench_inputs`),
saves its prefill and decode outputs to ``OUT.npy`` for the equality check, prints one
JSON line, then answers each stdin line with ``[prefill_ms, decode_ms_per_token]`` of one
round.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np


def bench_inputs(hidden: int, prompt: int, decode_steps: int, seed: int = 3) -> np.ndarray:
    """float32 [prompt + decode_steps, hidden]: the layer benchmark's residual-stream inputs."""
    from engines.llama import residual_stream  # noqa: PLC0415

    return residual_stream(np.random.default_rng(seed), prompt + decode_steps, hidden)


def _torch():
    import torch  # noqa: PLC0415

    return torch


class TorchLlamaLayer:
    """Llama decoder layer in PyTorch eager, float32 (see the module docstring)."""

    def __init__(self, weights: dict, cfg) -> None:
        torch = _torch()
        t = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in weights.items()}
        qd, kvd = cfg.q_dim, cfg.kv_dim
        self.c, self.t = cfg, t
        self.wq, self.wk, self.wv = t["w_qkv"][:qd], t["w_qkv"][qd:qd + kvd], t["w_qkv"][qd + kvd:]
        self.wg, self.wu = t["w_gate_up"][: cfg.inter], t["w_gate_up"][cfg.inter:]
        inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2, dtype=torch.float64) / cfg.head_dim))
        self.inv_freq = inv
        self.k = self.v = None

    def _rms(self, x, w):
        torch = _torch()
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.c.eps) * w

    def _rope(self, x, pos):  # x [T, heads, D]; HF's rotate_half
        torch = _torch()
        ang = pos.to(torch.float64)[:, None] * self.inv_freq[None]
        emb = torch.cat([ang, ang], -1)
        cos, sin = emb.cos().float()[:, None], emb.sin().float()[:, None]
        d = x.shape[-1] // 2
        rot = torch.cat([-x[..., d:], x[..., :d]], -1)
        return x * cos + rot * sin

    def _forward(self, x, pos, causal: bool):
        torch = _torch()
        F = torch.nn.functional
        c, t = self.c, self.t
        T = x.shape[0]
        h = self._rms(x, t["ln1"])
        q = self._rope(F.linear(h, self.wq).view(T, c.heads, c.head_dim), pos)
        k = self._rope(F.linear(h, self.wk).view(T, c.kv_heads, c.head_dim), pos)
        v = F.linear(h, self.wv).view(T, c.kv_heads, c.head_dim)
        self.k = k if self.k is None else torch.cat([self.k, k])
        self.v = v if self.v is None else torch.cat([self.v, v])
        a = F.scaled_dot_product_attention(q.transpose(0, 1)[None], self.k.transpose(0, 1)[None],
                                           self.v.transpose(0, 1)[None], is_causal=causal, enable_gqa=True)
        r = x + F.linear(a[0].transpose(0, 1).reshape(T, -1), t["w_o"])
        h2 = self._rms(r, t["ln2"])
        return r + F.linear(F.silu(F.linear(h2, self.wg)) * F.linear(h2, self.wu), t["w_down"])

    def prefill(self, x):
        torch = _torch()
        self.k = self.v = None
        with torch.inference_mode():
            return self._forward(x, torch.arange(x.shape[0]), causal=True)

    def decode(self, x):
        torch = _torch()
        with torch.inference_mode():
            return self._forward(x[None], torch.tensor([self.k.shape[0]]), causal=False)[0]


class TorchKdaLayer:
    """Kimi Linear KDA layer in PyTorch eager, float32 (see the module docstring)."""

    def __init__(self, weights: dict, cfg) -> None:
        from engines.kda_layer import split_weights  # noqa: PLC0415

        torch = _torch()
        self.c = cfg
        self.t = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in split_weights(weights, cfg).items()}
        self.conv_w = self.t["conv"][:, None, :]  # [3kd, 1, conv] depthwise
        self.S = self.conv = None

    def _run(self, x):
        torch = _torch()
        F = torch.nn.functional
        c, t = self.c, self.t
        H, D, kd, T = c.heads, c.head_dim, c.kd, x.shape[0]
        pre = F.linear(x, t["w_qkv"])  # [T, 3kd]
        xp = torch.cat([self.conv, pre])  # left context of conv - 1 tokens
        self.conv = xp[-(c.conv - 1):]
        y = F.silu(F.conv1d(xp.T[None], self.conv_w, groups=3 * kd)[0].T)  # [T, 3kd]
        q, k, v = (y[:, i * kd:(i + 1) * kd].reshape(T, H, D) for i in range(3))
        q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6)
        k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
        f = F.linear(F.linear(x, t["w_f_a"]), t["w_f_b"])
        g = c.gate_lower_bound * torch.sigmoid((f.view(T, H, D) + t["dt_bias"].view(H, D)) * t["A_log"].exp()[:, None])
        beta = torch.sigmoid(F.linear(x, t["w_b"]))
        o = torch.empty_like(v)
        S, scale = self.S, D ** -0.5
        for i in range(T):  # FLA naive_recurrent_kda
            S.mul_(g[i].exp()[:, :, None])
            pred = torch.einsum("hk,hkv->hv", k[i], S)
            S.add_(k[i][:, :, None] * (beta[i][:, None] * (v[i] - pred))[:, None, :])
            o[i] = torch.einsum("hk,hkv->hv", q[i] * scale, S)
        gate = torch.sigmoid(F.linear(F.linear(x, t["w_g_a"]), t["w_g_b"]) + t["g_b_bias"]).view(T, H, D)
        on = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + c.eps) * t["o_norm"]
        return F.linear((on * gate).reshape(T, kd), t["w_o"])

    def prefill(self, x):
        torch = _torch()
        c = self.c
        self.S = torch.zeros(c.heads, c.head_dim, c.head_dim)
        self.conv = torch.zeros(c.conv - 1, 3 * c.kd)
        with torch.inference_mode():
            return self._run(x)

    def decode(self, x):
        torch = _torch()
        with torch.inference_mode():
            return self._run(x[None])[0]


def make_layer(engine: str, config: str):
    """(the PyTorch layer, its config) for ``engine`` ``llama-layer`` or ``kda-layer`` with
    the engines' seed-0 weights.

    Raises:
        KeyError: unknown engine or config.
    """
    if engine == "llama-layer":
        from engines.llama import CONFIGS, llama_weights  # noqa: PLC0415

        cfg = CONFIGS[config]
        return TorchLlamaLayer(llama_weights(cfg, 0), cfg), cfg
    if engine == "kda-layer":
        from engines.kda_layer import CONFIGS, kda_weights  # noqa: PLC0415

        cfg = CONFIGS[config]
        return TorchKdaLayer(kda_weights(cfg, 0), cfg), cfg
    raise KeyError(f"no PyTorch layer for engine {engine!r} (llama-layer, kda-layer)")


def run_rounds(layer, x, prompt: int, decode_steps: int) -> tuple[float, float, np.ndarray]:
    """One round: prefill ``x[:prompt]`` then ``decode_steps`` decode steps.

    Returns:
        (prefill ms, decode ms per token, float32 [prompt + decode_steps, hidden] outputs).
    """
    torch = _torch()
    xt = torch.from_numpy(x)
    t0 = time.perf_counter()
    pre = layer.prefill(xt[:prompt])
    t1 = time.perf_counter()
    dec = [layer.decode(xt[prompt + i]) for i in range(decode_steps)]
    t2 = time.perf_counter()
    out = torch.cat([pre, *(d[None] for d in dec)]).numpy() if dec else pre.numpy()
    return 1e3 * (t1 - t0), 1e3 * (t2 - t1) / max(decode_steps, 1), out


def main(argv: list[str]) -> None:
    engine, config, threads, prompt, steps, out_path = argv
    torch = _torch()
    torch.set_num_threads(int(threads))
    layer, cfg = make_layer(engine, config)
    x = bench_inputs(cfg.hidden, int(prompt), int(steps))
    _, _, out = run_rounds(layer, x, int(prompt), int(steps))  # warm-up, and the outputs to compare
    np.save(out_path, out)
    print(json.dumps({"ready": True, "torch": torch.__version__, "threads": torch.get_num_threads()}), flush=True)
    for _ in sys.stdin:
        p, d, _ = run_rounds(layer, x, int(prompt), int(steps))
        print(json.dumps([p, d]), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
