"""End-to-end timing scenarios of the engines, shared by engine goals and the promotion guard.

A scenario is one end-to-end call measured as a whole (wall clock, ms):

* ``minilm``: ``batch-1`` (encode one sentence, tokenisation included), ``batch-32`` (encode
  32 sentences in one pass), ``throughput`` (128 sentences in batches of the plan's
  ``BATCH_SIZE``);
* layers: ``prefill`` (one prompt of ``prompt`` tokens), ``decode`` (one token over a KV
  cache / state of ``prompt`` tokens; the cache is reset to that length before each call).

:func:`time_plans` interleaves plans call by call (A, B, A, B, ...), so drift of a shared
machine affects every plan alike.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Mapping

import numpy as np

from engines._plan import Plan

SCENARIOS = {"minilm": ("batch-1", "batch-32", "throughput"), "llama-layer": ("prefill", "decode"),
             "kda-layer": ("prefill", "decode")}


def default_prompt(engine) -> int:
    return 24 if getattr(engine.cfg, "name", "") == "small" else 128


def make_scenario(engine, plan: Plan, scenario: str, *, prompt: int | None = None, seed: int = 0) -> Callable[[], None]:
    """A zero-argument callable running ``scenario`` once with ``plan``.

    Raises:
        KeyError: unknown scenario for the engine.
    """
    if scenario not in SCENARIOS[engine.name]:
        raise KeyError(f"engine {engine.name} has no scenario {scenario!r} (known: {', '.join(SCENARIOS[engine.name])})")
    if engine.name == "minilm":
        from engines._bench import bench_corpus  # noqa: PLC0415

        texts = bench_corpus()
        if scenario == "batch-1":
            p = engine.plan({**plan.to_dict(), "BATCH_SIZE": 1})
            return lambda: engine.encode(texts[:1], p)
        if scenario == "batch-32":
            p = engine.plan({**plan.to_dict(), "BATCH_SIZE": 32})
            return lambda: engine.encode(texts[:32], p)
        return lambda: engine.encode(texts, plan)
    from engines.llama import residual_stream  # noqa: PLC0415

    prompt = prompt or default_prompt(engine)
    x = residual_stream(np.random.default_rng(seed), prompt + 1, engine.cfg.hidden)
    is_llama = engine.name == "llama-layer"
    if scenario == "prefill":
        return lambda: engine.prefill(x[None, :prompt], plan)
    state = engine.new_cache(1, prompt + 1) if is_llama else engine.new_state(1)
    engine.prefill(x[None, :prompt], plan, state)
    snapshot = None if is_llama else copy.deepcopy(state)

    def step() -> None:
        if is_llama:
            state.length = prompt
            engine.decode(x[prompt][None], state, plan)
        else:
            state.S[...] = snapshot.S
            state.conv[...] = snapshot.conv
            engine.decode(x[prompt][None], state, plan)

    return step


def time_plans(engine, plans: Mapping[str, Plan], scenarios: tuple[str, ...], *, reps: int = 15,
               warmup: int = 2, prompt: int | None = None) -> dict[str, dict[str, list[float]]]:
    """Raw samples (ms) per plan and scenario, plans interleaved call by call."""
    calls = {(name, s): make_scenario(engine, plan, s, prompt=prompt) for name, plan in plans.items() for s in scenarios}
    for fn in calls.values():
        for _ in range(warmup):
            fn()
    out: dict[str, dict[str, list[float]]] = {name: {s: [] for s in scenarios} for name in plans}
    for _ in range(reps):
        for (name, s), fn in calls.items():
            t0 = time.perf_counter()
            fn()
            out[name][s].append(1e3 * (time.perf_counter() - t0))
    return out
