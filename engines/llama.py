"""A Llama-3-8B decoder layer (prefill and decode over a KV cache) from workload kernels.

    h   = rmsnorm(x) ; q, k, v = h Wq^T, h Wk^T, h Wv^T   (fused: one GEMM with [Wq; Wk; Wv])
    q, k = rope(q), rope(k) ;  a = attention(q, k, v)     (causal GQA prefill, or decode over
                                                            the KV cache)
    r   = x + a Wo^T ; h2 = rmsnorm(r)                      (fused: fused_add_rmsnorm)
    y   = r + down(swiglu(h2 [Wgate; Wup]^T))               (fused: one gate/up GEMM)

Dimensions of meta-llama/Meta-Llama-3-8B (``config.json``: hidden 4096, 32 query and 8
key-value heads of 128, intermediate 14336, rms_norm_eps 1e-5, rope_theta 500000) with
seeded random weights (``nn.Linear``'s initialisation); ``small`` keeps the head ratios at
reduced width for CPU tests. Validated against :func:`engines._reference.llama_layer64`, an
independent float64 NumPy model of the same layer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engines._binding import PRODUCTION
from engines._engine import Engine, glue, same_shape, seg_split, uniform_weights
from engines._graph import Graph, Operator, Profile
from engines._plan import Plan, PlanSpec


@dataclass(frozen=True)
class LlamaConfig:
    """Layer dimensions."""

    name: str
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    inter: int
    eps: float = 1e-5
    rope_theta: float = 500000.0

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim


CONFIGS = {
    "llama3-8b": LlamaConfig("llama3-8b", 4096, 32, 8, 128, 14336),
    "small": LlamaConfig("small", 256, 8, 2, 32, 896),
}

PLAN_SPEC = PlanSpec(
    fusions={
        "FUSE_QKV": "one GEMM for the q, k and v projections ([Wq; Wk; Wv], N = 6144) instead of three",
        "FUSE_ADD_RMSNORM": "residual add and post-attention RMSNorm in one pass (fused_add_rmsnorm)",
        "FUSE_GATE_UP": "one GEMM for the gate and up projections (N = 2 x 14336) feeding swiglu directly",
    },
    batch_sizes=(1, 4, 8),
    workloads=("rmsnorm", "gemm", "rope", "attention", "decode_attention", "fused_add_rmsnorm", "swiglu"),
    defaults={"FUSE_QKV": 1, "FUSE_ADD_RMSNORM": 1, "FUSE_GATE_UP": 1, "BATCH_SIZE": 1, "BUFFER_REUSE": 1,
              **{f"KERNEL_{w.upper()}": PRODUCTION for w in
                 ("rmsnorm", "gemm", "rope", "attention", "decode_attention", "fused_add_rmsnorm", "swiglu")}},
)


class KVCache:
    """Keys and values of ``batch`` sequences: ``k``, ``v`` float32 [batch, max_len, kv_heads,
    head_dim] (token-major), ``length`` tokens filled (the same for every sequence)."""

    def __init__(self, batch: int, max_len: int, kv_heads: int, head_dim: int) -> None:
        self.k = np.zeros((batch, max_len, kv_heads, head_dim), np.float32)
        self.v = np.zeros_like(self.k)
        self.length = 0


def llama_weights(cfg: LlamaConfig, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded float32 weights: ``w_qkv`` [q_dim + 2 kv_dim, hidden] (rows Wq, Wk, Wv),
    ``w_o`` [hidden, q_dim], ``w_gate_up`` [2 inter, hidden] (rows Wgate, Wup), ``w_down``
    [hidden, inter], ``ln1``, ``ln2`` [hidden] (N(1, 0.1^2)). Unfused plans use row-slices
    (views) of the fused matrices, so both layouts cost the memory of one."""
    rng = np.random.default_rng(seed)
    h = cfg.hidden
    return {
        "w_qkv": uniform_weights(rng, cfg.q_dim + 2 * cfg.kv_dim, h),
        "w_o": uniform_weights(rng, h, cfg.q_dim),
        "w_gate_up": uniform_weights(rng, 2 * cfg.inter, h),
        "w_down": uniform_weights(rng, h, cfg.inter),
        "ln1": rng.normal(1.0, 0.1, h).astype(np.float32),
        "ln2": rng.normal(1.0, 0.1, h).astype(np.float32),
    }


def rope_tables(positions: np.ndarray, head_dim: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
    from kernels.workloads.rope import angles  # noqa: PLC0415

    return angles(positions, head_dim, theta)


def residual_stream(rng: np.random.Generator, rows: int, hidden: int) -> np.ndarray:
    """float32 [rows, hidden] residual-stream-like inputs: N(0, 1) times a log-normal row
    scale with a few massive channels (Sun et al. 2024, arXiv:2402.17762)."""
    x = rng.standard_normal((rows, hidden)) * np.exp(rng.normal(0.0, 0.3, (rows, 1)))
    ch = rng.choice(hidden, size=max(1, hidden // 1024), replace=False)
    x[:, ch] = rng.uniform(20.0, 50.0, (rows, ch.size)) * rng.choice([-1.0, 1.0], ch.size)
    return x.astype(np.float32)


class LlamaLayer(Engine):
    """One Llama-3-8B decoder layer.

    Args:
        config: ``"llama3-8b"`` (real dimensions) or ``"small"``, or a :class:`LlamaConfig`.
        seed: weight seed.
        registry, target: see :class:`~engines._engine.Engine`.
    """

    name = "llama-layer"
    plan_spec = PLAN_SPEC
    modes = ("prefill", "decode")

    def __init__(self, config: str | LlamaConfig = "small", seed: int = 0, **kw) -> None:
        super().__init__(**kw)
        self.cfg = CONFIGS[config] if isinstance(config, str) else config
        self.weights = llama_weights(self.cfg, seed)

    # -- graph ------------------------------------------------------------------------------
    def build_graph(self, mode: str, plan: Plan) -> Graph:
        c, w = self.cfg, self.weights
        H, KVH, D = c.heads, c.kv_heads, c.head_dim
        const = {"ln1": w["ln1"], "ln2": w["ln2"], "w_qkv": w["w_qkv"], "w_o": w["w_o"], "w_down": w["w_down"],
                 "w_q": w["w_qkv"][: c.q_dim], "w_k": w["w_qkv"][c.q_dim: c.q_dim + c.kv_dim],
                 "w_v": w["w_qkv"][c.q_dim + c.kv_dim:], "w_gate_up": w["w_gate_up"],
                 "w_gate": w["w_gate_up"][: c.inter], "w_up": w["w_gate_up"][c.inter:]}
        rows = 1 if mode == "decode" else 512
        hint = {"rows": rows, "hidden": c.hidden}
        eps = {"eps": c.eps}
        ops: list[Operator] = [
            Operator("input_norm", "rmsnorm", {"x": "x", "w": "ln1"}, {"y": "h"}, eps, shape_hint=hint),
        ]

        def gemm(name, a, b, out, n, k, label=""):
            return Operator(name, "gemm", {"A": a, "B": b}, {"C": out}, label=label or name,
                            shape_hint={"M": rows, "N": n, "K": k})

        if plan.on("FUSE_QKV"):
            ops.append(gemm("qkv_proj", "h", "w_qkv", "qkv", c.q_dim + 2 * c.kv_dim, c.hidden))
            ops.append(glue("split_qkv", lambda t: (
                np.ascontiguousarray(t[:, : c.q_dim]).reshape(-1, H, D),
                np.ascontiguousarray(t[:, c.q_dim: c.q_dim + c.kv_dim]).reshape(-1, KVH, D),
                np.ascontiguousarray(t[:, c.q_dim + c.kv_dim:]).reshape(-1, KVH, D)),
                ["qkv"], ["q_raw", "k_raw", "v"]))
        else:
            ops += [gemm("q_proj", "h", "w_q", "q2", c.q_dim, c.hidden),
                    gemm("k_proj", "h", "w_k", "k2", c.kv_dim, c.hidden),
                    gemm("v_proj", "h", "w_v", "v2", c.kv_dim, c.hidden),
                    glue("heads", lambda q, k, v: (q.reshape(-1, H, D), k.reshape(-1, KVH, D), v.reshape(-1, KVH, D)),
                         ["q2", "k2", "v2"], ["q_raw", "k_raw", "v"])]
        ops += [
            Operator("rope_q", "rope", {"x": "q_raw", "cos": "cos", "sin": "sin"}, {"y": "q"}, label="rope",
                     shape_hint={"tokens": rows, "heads": H, "head_dim": D}),
            Operator("rope_k", "rope", {"x": "k_raw", "cos": "cos", "sin": "sin"}, {"y": "k"}, label="rope",
                     shape_hint={"tokens": rows, "heads": KVH, "head_dim": D}),
        ]
        if mode == "prefill":
            ops.append(glue("kv_cache_write", _cache_write, ["k", "v", "cache", "segments"], [], label="kv_cache"))
            ops.append(Operator("attention", "attention", {"q": "q", "k": "k", "v": "v"}, {"o": "attn"},
                                {"causal": 1.0}, split=seg_split(("q", "k", "v"), ("o",)), out_shapes=same_shape("q"),
                                shape_hint={"batch": 1, "seq": rows, "heads": H, "kv_heads": KVH, "head_dim": D}))
        else:
            ops.append(glue("kv_cache_append", _cache_append, ["k", "v", "cache"], [], label="kv_cache"))
            ops.append(Operator("attention", "decode_attention", {"q": "q", "k": "k_cache", "v": "v_cache"},
                                {"o": "attn"}, split=_decode_split, out_shapes=same_shape("q"),
                                shape_hint={"batch": 1, "kv_len": 512, "heads": H, "kv_heads": KVH, "head_dim": D}))
        ops.append(glue("merge_heads", lambda a: a.reshape(a.shape[0], -1), ["attn"], ["attn2"]))
        ops.append(gemm("o_proj", "attn2", "w_o", "o", c.hidden, c.q_dim))
        if plan.on("FUSE_ADD_RMSNORM"):
            ops.append(Operator("post_attn_add_norm", "fused_add_rmsnorm", {"x": "o", "residual": "x", "w": "ln2"},
                                {"y": "h2", "residual_out": "r"}, eps, shape_hint=hint))
        else:
            ops.append(glue("residual_add", np.add, ["o", "x"], ["r"], label="residual_add"))
            ops.append(Operator("post_attn_norm", "rmsnorm", {"x": "r", "w": "ln2"}, {"y": "h2"}, eps, shape_hint=hint))
        if plan.on("FUSE_GATE_UP"):
            ops.append(gemm("gate_up_proj", "h2", "w_gate_up", "gu", 2 * c.inter, c.hidden))
        else:
            ops += [gemm("gate_proj", "h2", "w_gate", "g", c.inter, c.hidden),
                    gemm("up_proj", "h2", "w_up", "u", c.inter, c.hidden),
                    glue("concat_gate_up", lambda g, u: np.concatenate([g, u], axis=1), ["g", "u"], ["gu"])]
        ops += [
            Operator("swiglu", "swiglu", {"x": "gu"}, {"y": "act"}, shape_hint={"rows": rows, "inter": c.inter}),
            gemm("down_proj", "act", "w_down", "d", c.hidden, c.inter),
            glue("residual_add_mlp", np.add, ["d", "r"], ["out"], label="residual_add"),
        ]
        return Graph(f"{self.name}.{mode}", ops, const, ("out",))

    # -- running ----------------------------------------------------------------------------
    def new_cache(self, batch: int, max_len: int) -> KVCache:
        return KVCache(batch, max_len, self.cfg.kv_heads, self.cfg.head_dim)

    def prefill(self, x: np.ndarray, plan: Plan | None = None, cache: KVCache | None = None,
                profile: Profile | None = None) -> np.ndarray:
        """Run the layer over prompts.

        Args:
            x: float32 [batch, seq, hidden], positions 0..seq-1.
            cache: if given, receives the keys and values (``length`` becomes ``seq``).

        Returns:
            float32 [batch, seq, hidden].
        """
        plan = self.plan(plan)
        b, s, hdim = x.shape
        cos, sin = rope_tables(np.tile(np.arange(s), b), self.cfg.head_dim, self.cfg.rope_theta)
        feeds = {"x": np.ascontiguousarray(x.reshape(b * s, hdim), np.float32), "cos": cos, "sin": sin,
                 "segments": [(i * s, s) for i in range(b)], "cache": cache}
        out = self.program("prefill", plan).run(feeds, profile=profile)["out"]
        if cache is not None:
            cache.length = s
        return out.reshape(b, s, hdim)

    def decode(self, x: np.ndarray, cache: KVCache, plan: Plan | None = None,
               profile: Profile | None = None) -> np.ndarray:
        """One decode step for every sequence of the cache.

        Args:
            x: float32 [batch, hidden], the new token of each sequence (position
                ``cache.length``).

        Returns:
            float32 [batch, hidden]; the cache grows by one token.

        Raises:
            ValueError: the cache is full.
        """
        plan = self.plan(plan)
        if cache.length >= cache.k.shape[1]:
            raise ValueError(f"KV cache full ({cache.length} tokens)")
        b = x.shape[0]
        cos, sin = rope_tables(np.full(b, cache.length), self.cfg.head_dim, self.cfg.rope_theta)
        feeds = {"x": np.ascontiguousarray(x, np.float32), "cos": cos, "sin": sin, "cache": cache,
                 "k_cache": cache.k, "v_cache": cache.v}
        out = self.program("decode", plan).run(feeds, profile=profile)["out"]
        cache.length += 1
        return out


def _cache_write(k, v, cache, segments):
    if cache is not None:
        for b, (start, length) in enumerate(segments):
            cache.k[b, :length] = k[start: start + length]
            cache.v[b, :length] = v[start: start + length]
    return ()


def _cache_append(k, v, cache):
    cache.k[:, cache.length] = k
    cache.v[:, cache.length] = v
    return ()


def _decode_split(ins, outs, env):
    n = env["cache"].length + 1  # the new token is appended before attending
    return [({"q": ins["q"][b: b + 1], "k": ins["k"][b: b + 1, :n], "v": ins["v"][b: b + 1, :n]},
             {"o": outs["o"][b: b + 1]}) for b in range(ins["q"].shape[0])]
