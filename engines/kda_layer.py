"""A Kimi Linear KDA layer (Kimi Delta Attention with its projections, short convolutions
and gates), prefill with the chunked ``kda`` workload and decode over a recurrent state.

    q, k, v = silu(conv4(x Wq^T)), silu(conv4(x Wk^T)), silu(conv4(x Wv^T))   (fused QKV GEMM)
    q, k    = l2norm(q), l2norm(k)                                  per head
    g       = lb * sigmoid(exp(A_log) * (x Wf_a^T Wf_b^T + dt_bias))  low-rank "safe" gate, lb = -5
    beta    = sigmoid(x Wb^T)
    o       = KDA(q, k, v, g, beta)                                  (chunked; decode: recurrent step)
    y       = (rmsnorm(o) * sigmoid(x Wg_a^T Wg_b^T + b_g)) Wo^T      per-head gated RMSNorm

following Kimi Linear (arXiv:2510.26692, Sec. 3-4) and FLA's ``KimiDeltaAttention`` layer
(``fla/layers/kda.py``: ShortConvolution of width 4 with SiLU on q/k/v, ``f_proj`` and
``g_proj`` low-rank with rank ``head_dim``, ``b_proj``, ``FusedRMSNormGated`` with a sigmoid
gate). Dimensions of moonshotai/Kimi-Linear-48B-A3B (hidden 2304, 32 KDA heads of 128);
``small`` for CPU tests. Seeded random weights. Validated against
:func:`engines._reference.kda_layer64` (float64), whose KDA core is cross-checked with
``shared/reference/kda_reference.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engines._binding import PRODUCTION
from engines._engine import Engine, glue, uniform_weights
from engines._graph import Graph, Operator, Profile
from engines._plan import Plan, PlanSpec


@dataclass(frozen=True)
class KdaConfig:
    """Layer dimensions."""

    name: str
    hidden: int
    heads: int
    head_dim: int
    conv: int = 4
    eps: float = 1e-5
    gate_lower_bound: float = -5.0

    @property
    def kd(self) -> int:
        return self.heads * self.head_dim


CONFIGS = {
    "kimi-linear": KdaConfig("kimi-linear", 2304, 32, 128),
    "small": KdaConfig("small", 192, 4, 32),
}

WORKLOADS = ("gemm", "gemm_bias", "kda", "rmsnorm")
PLAN_SPEC = PlanSpec(
    fusions={
        "FUSE_QKV": "one GEMM for the q, k and v projections instead of three",
        "FUSE_GATE_PROJ": "one GEMM for the first stages of the gate (f_a), beta (b) and output-gate (g_a) projections",
    },
    batch_sizes=(1, 4, 8),
    workloads=WORKLOADS,
    defaults={"FUSE_QKV": 1, "FUSE_GATE_PROJ": 1, "BATCH_SIZE": 1, "BUFFER_REUSE": 1,
              **{f"KERNEL_{w.upper()}": PRODUCTION for w in WORKLOADS}},
)


def kda_weights(cfg: KdaConfig, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded float32 weights (``nn.Linear`` init; A_log = log U(1, 16) and dt_bias as in
    FLA's initialisation; gate biases N(0, 1))."""
    rng = np.random.default_rng(seed)
    h, kd, D, H = cfg.hidden, cfg.kd, cfg.head_dim, cfg.heads
    dt = np.exp(rng.uniform(np.log(1e-3), np.log(1e-1), kd))
    return {
        "w_qkv": uniform_weights(rng, 3 * kd, h),
        "conv": (rng.uniform(-1, 1, (3 * kd, cfg.conv)) / np.sqrt(cfg.conv)).astype(np.float32),
        "w_in": uniform_weights(rng, D + H + D, h),  # rows: f_a (D), b (H), g_a (D)
        "w_f_b": uniform_weights(rng, kd, D),
        "dt_bias": (dt + np.log(-np.expm1(-dt))).astype(np.float32),
        "A_log": np.log(rng.uniform(1.0, 16.0, H)).astype(np.float32),
        "w_g_b": uniform_weights(rng, kd, D),
        "g_b_bias": rng.normal(0.0, 1.0, kd).astype(np.float32),
        "o_norm": rng.normal(1.0, 0.1, D).astype(np.float32),
        "w_o": uniform_weights(rng, h, kd),
    }


def split_weights(w: dict[str, np.ndarray], cfg: KdaConfig) -> dict[str, np.ndarray]:
    """The reference's weight names (views): ``w_f_a``, ``w_b``, ``w_g_a`` from ``w_in``."""
    D, H = cfg.head_dim, cfg.heads
    return {**w, "w_f_a": w["w_in"][:D], "w_b": w["w_in"][D: D + H], "w_g_a": w["w_in"][D + H:]}


class KdaState:
    """Decode state of ``batch`` sequences: the short convolutions' last ``conv - 1`` inputs
    ``conv`` [batch, conv - 1, 3 kd] and the KDA state ``S`` [batch * heads, dk, dv]."""

    def __init__(self, batch: int, cfg: KdaConfig) -> None:
        self.conv = np.zeros((batch, cfg.conv - 1, 3 * cfg.kd), np.float32)
        self.S = np.zeros((batch * cfg.heads, cfg.head_dim, cfg.head_dim), np.float32)
        self.length = 0


def _sigmoid(x):
    return np.float32(0.5) * (np.float32(1.0) + np.tanh(np.float32(0.5) * x))


def _silu(x):
    return x * _sigmoid(x)


class KdaLayer(Engine):
    """One Kimi Linear KDA layer.

    Args:
        config: ``"kimi-linear"`` or ``"small"``, or a :class:`KdaConfig`.
        seed: weight seed.
    """

    name = "kda-layer"
    plan_spec = PLAN_SPEC
    modes = ("prefill", "decode")

    def __init__(self, config: str | KdaConfig = "small", seed: int = 0, **kw) -> None:
        super().__init__(**kw)
        self.cfg = CONFIGS[config] if isinstance(config, str) else config
        self.weights = kda_weights(self.cfg, seed)

    def build_graph(self, mode: str, plan: Plan) -> Graph:
        c, w = self.cfg, self.weights
        H, D, kd, W = c.heads, c.head_dim, c.kd, c.conv
        sw = split_weights(w, c)
        const = {**w, "w_q": w["w_qkv"][:kd], "w_k": w["w_qkv"][kd: 2 * kd], "w_v": w["w_qkv"][2 * kd:],
                 "w_f_a": sw["w_f_a"], "w_b": sw["w_b"], "w_g_a": sw["w_g_a"],
                 "gate_scale": np.exp(w["A_log"]).astype(np.float32)}
        rows = 1 if mode == "decode" else 512

        def gemm(name, a, b, out, n, k, label=""):
            return Operator(name, "gemm", {"A": a, "B": b}, {"C": out}, label=label or name,
                            shape_hint={"M": rows, "N": n, "K": k})

        ops: list[Operator] = []
        if plan.on("FUSE_QKV"):
            ops.append(gemm("qkv_proj", "x", "w_qkv", "qkv_pre", 3 * kd, c.hidden))
        else:
            ops += [gemm("q_proj", "x", "w_q", "q_pre", kd, c.hidden), gemm("k_proj", "x", "w_k", "k_pre", kd, c.hidden),
                    gemm("v_proj", "x", "w_v", "v_pre", kd, c.hidden),
                    glue("concat_qkv", lambda a, b, cc: np.concatenate([a, b, cc], axis=1), ["q_pre", "k_pre", "v_pre"],
                         ["qkv_pre"])]
        conv = _conv_prefill if mode == "prefill" else _conv_step
        ops.append(glue("short_conv", lambda t, cw, st, seg: conv(t, cw, st, seg, W), ["qkv_pre", "conv", "state", "segments"],
                        ["qkv"]))
        ops.append(glue("l2norm_heads", lambda t, seg: _heads_first(t, seg, H, D, kd), ["qkv", "segments"], ["q", "k", "v"]))
        if plan.on("FUSE_GATE_PROJ"):
            ops.append(gemm("in_gate_proj", "x", "w_in", "fab", 2 * D + H, c.hidden))
            ops.append(glue("split_gate_proj", lambda t: (np.ascontiguousarray(t[:, :D]), t[:, D: D + H],
                                                         np.ascontiguousarray(t[:, D + H:])), ["fab"], ["f_a", "b_raw", "g_a"]))
        else:
            ops += [gemm("f_a_proj", "x", "w_f_a", "f_a", D, c.hidden), gemm("b_proj", "x", "w_b", "b_raw", H, c.hidden),
                    gemm("g_a_proj", "x", "w_g_a", "g_a", D, c.hidden)]
        ops += [
            gemm("f_b_proj", "f_a", "w_f_b", "f", kd, D),
            glue("kda_gate", lambda f, bias, sc, b, seg: _gates(f, bias, sc, b, seg, H, D, c.gate_lower_bound),
                 ["f", "dt_bias", "gate_scale", "b_raw", "segments"], ["g", "beta"]),
        ]
        if mode == "prefill":
            ops.append(Operator("kda", "kda", {"q": "q", "k": "k", "v": "v", "g": "g", "beta": "beta"},
                                {"o": "o_hf", "state": "S_new"},
                                shape_hint={"batch_heads": H, "seq": rows, "dk": D, "dv": D}))
            ops.append(glue("kda_state_write", _state_write, ["S_new", "state"], []))
        else:
            ops.append(glue("kda_decode", _kda_step, ["q", "k", "v", "g", "beta", "state"], ["o_hf"], label="kda_decode"))
        ops += [
            glue("heads_to_rows", lambda o, seg: _token_major(o, seg, H, D), ["o_hf", "segments"], ["o_rows"]),
            Operator("o_norm", "rmsnorm", {"x": "o_rows", "w": "o_norm"}, {"y": "o_normed"}, {"eps": c.eps},
                     shape_hint={"rows": rows * H, "hidden": D}),
            Operator("g_b_proj", "gemm_bias", {"A": "g_a", "B": "w_g_b", "bias": "g_b_bias"}, {"C": "g_out"}, {"act": 0.0},
                     shape_hint={"M": rows, "N": kd, "K": D}),
            glue("output_gate", lambda o, gt: (o.reshape(-1, kd) * _sigmoid(gt)), ["o_normed", "g_out"], ["o_gated"]),
            gemm("o_proj", "o_gated", "w_o", "out", c.hidden, kd),
        ]
        return Graph(f"{self.name}.{mode}", ops, const, ("out",))

    def new_state(self, batch: int) -> KdaState:
        return KdaState(batch, self.cfg)

    def prefill(self, x: np.ndarray, plan: Plan | None = None, state: KdaState | None = None,
                profile: Profile | None = None) -> np.ndarray:
        """Run the layer over prompts: x float32 [batch, seq, hidden] -> [batch, seq, hidden];
        ``state`` (if given) receives the conv and KDA states for decoding."""
        plan = self.plan(plan)
        b, s, h = x.shape
        feeds = {"x": np.ascontiguousarray(x.reshape(b * s, h), np.float32), "segments": (b, s),
                 "state": state if state is not None else KdaState(b, self.cfg)}
        out = self.program("prefill", plan).run(feeds, profile=profile)["out"]
        if state is not None:
            state.length = s
        return out.reshape(b, s, h)

    def decode(self, x: np.ndarray, state: KdaState, plan: Plan | None = None,
               profile: Profile | None = None) -> np.ndarray:
        """One decode step: x float32 [batch, hidden] -> [batch, hidden]; updates ``state``."""
        plan = self.plan(plan)
        feeds = {"x": np.ascontiguousarray(x, np.float32), "segments": (x.shape[0], 1), "state": state}
        out = self.program("decode", plan).run(feeds, profile=profile)["out"]
        state.length += 1
        return out


# -- glue steps -------------------------------------------------------------------------------

def _conv_prefill(t, cw, state, seg, W):
    """Causal depthwise conv + SiLU over each sequence of the packed [B*T, C] input; keeps the
    last W - 1 inputs of every sequence in ``state.conv``."""
    b, s = seg
    x = t.reshape(b, s, -1)
    xp = np.concatenate([np.zeros((b, W - 1, x.shape[2]), np.float32), x], axis=1)
    y = np.zeros_like(x)
    for j in range(W):
        y += cw[:, j] * xp[:, j: j + s]
    state.conv[...] = xp[:, s:]
    return _silu(y).reshape(b * s, -1)


def _conv_step(t, cw, state, seg, W):
    """One token per sequence: y = silu(sum_j w_j x_{t-W+1+j}) with the kept inputs."""
    window = np.concatenate([state.conv, t[:, None, :]], axis=1)  # [B, W, C]
    y = np.einsum("bwc,cw->bc", window, cw)
    state.conv[...] = window[:, 1:]
    return _silu(y)


def _heads_first(t, seg, H, D, kd):
    b, s = seg
    out = []
    for j in range(3):
        a = t[:, j * kd: (j + 1) * kd].reshape(b, s, H, D)
        if j < 2:  # l2norm q and k per head (eps 1e-6, FLA's in-kernel l2norm)
            a = a / np.sqrt(np.sum(a * a, axis=-1, keepdims=True) + np.float32(1e-6))
        out.append(np.ascontiguousarray(a.transpose(0, 2, 1, 3).reshape(b * H, s, D)))
    return tuple(out)


def _gates(f, dt_bias, scale, b_raw, seg, H, D, lb):
    b, s = seg
    z = (f.reshape(b, s, H, D) + dt_bias.reshape(H, D)) * scale[:, None]
    g = np.float32(lb) * _sigmoid(z)
    beta = _sigmoid(b_raw.reshape(b, s, H))
    return (np.ascontiguousarray(g.transpose(0, 2, 1, 3).reshape(b * H, s, D)),
            np.ascontiguousarray(beta.transpose(0, 2, 1).reshape(b * H, s)))


def _state_write(S_new, state):
    state.S[...] = S_new
    return ()


def _kda_step(q, k, v, g, beta, state):
    """One recurrent KDA step per head (Eq. (1)) on ``state.S`` [BH, dk, dv], float32."""
    S = state.S
    S *= np.exp(g[:, 0])[:, :, None]
    pred = np.einsum("hk,hkv->hv", k[:, 0], S)
    S += k[:, 0, :, None] * (beta[:, 0, None] * (v[:, 0] - pred))[:, None, :]
    o = np.einsum("hk,hkv->hv", q[:, 0] * np.float32(q.shape[-1] ** -0.5), S)
    return o[:, None, :]


def _token_major(o, seg, H, D):
    b, s = seg
    return np.ascontiguousarray(o.reshape(b, H, s, D).transpose(0, 2, 1, 3).reshape(b * s * H, D))
