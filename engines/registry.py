"""The engines this package builds, by name (lazy: importing it loads no model)."""

from __future__ import annotations

import importlib
from typing import Any

ENGINES: dict[str, str] = {
    "minilm": "engines.minilm:MiniLM",
    "llama-layer": "engines.llama:LlamaLayer",
    "kda-layer": "engines.kda_layer:KdaLayer",
}
# Size configurations of the layers: ``small`` for CPU tests, the real model dimensions.
CONFIGS: dict[str, tuple[str, ...]] = {"minilm": (), "llama-layer": ("small", "llama3-8b"), "kda-layer": ("small", "kimi-linear")}
# Every engine's workloads on the CPU target (what a kernel promotion can affect).
WORKLOADS: dict[str, tuple[str, ...]] = {
    "minilm": ("layernorm", "gemm_bias", "attention", "gelu"),
    "llama-layer": ("rmsnorm", "gemm", "rope", "attention", "decode_attention", "fused_add_rmsnorm", "swiglu"),
    "kda-layer": ("gemm", "gemm_bias", "kda", "rmsnorm"),
}


def engine_class(name: str) -> Any:
    """The engine class registered as ``name``.

    Raises:
        KeyError: unknown engine (the message lists the known ones).
    """
    try:
        spec = ENGINES[name]
    except KeyError:
        raise KeyError(f"unknown engine {name!r} (known: {', '.join(ENGINES)})") from None
    mod, _, cls = spec.partition(":")
    return getattr(importlib.import_module(mod), cls)


def make_engine(name: str, *, config: str | None = None, registry=None, target: str = "cpu-x86_64", **kw) -> Any:
    """An engine instance: ``minilm`` loads the real model; the layers take ``config``
    (default ``small``).

    Raises:
        KeyError: unknown engine or config.
    """
    cls = engine_class(name)
    if name == "minilm":
        return cls(registry=registry, target=target, **kw)
    config = config or "small"
    if config not in CONFIGS[name]:
        raise KeyError(f"engine {name!r} has no config {config!r} (known: {', '.join(CONFIGS[name])})")
    return cls(config, registry=registry, target=target, **kw)
