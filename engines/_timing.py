"""End-to-end timing scenarios of the engines, shared by engine goals and the promotion guard.

A scenario is one end-to-end call measured as a whole (wall clock, ms):

* ``minilm``: ``batch-1`` (encode one sentence, tokenisation included), ``batch-32`` (encode
  32 sentences in one pass), ``throughput`` (128 sentences in batches of the plan's
  ``BATCH_SIZE``);
* layers: ``prefill`` (one prompt of ``prompt`` tokens), ``decode`` (one token over a KV
  cache / state of ``prompt`` tokens; the cache is reset to that length before each call).

:func:`time_plans` interleaves plans call by call (A, B, A, B, ...), so drift of a shared
machine affects every plan alike.

:class:`FreshScenario` runs a scenario on contents no earlier call saw (the promotion
guard's timed calls, :mod:`engines._fresh`): a kernel that caches its outputs by its inputs
gains nothing from the repetition of a timing loop.
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


class FreshScenario:
    """``scenario`` with fresh input contents each call: :meth:`before` (untimed) prepares
    the next call's inputs, ``__call__`` runs it (timed), :meth:`after` (untimed) restores.

    * layers: the calls rotate between ``sets`` residual streams (``prompt + 1`` tokens x
      ``hidden``, float32; seeds ``seed`` .. ``seed + sets - 1``), each with its own KV cache /
      state prefilled for ``decode``; before each call two different values of one row of
      the call's tokens are swapped (:class:`engines._fresh.Rotation`), undone after;
    * ``minilm``: before each call the scenario's sentences are a window of the corpus
      (``bench_corpus``, cyclic) from a drawn start, two different words of every sentence
      swapped (a generator seeded by ``seed``): new token ids per call; both sides of a
      paired comparison draw the same windows and swaps at the same call number.

    Raises:
        KeyError: unknown scenario for the engine.
        ValueError: ``sets`` < 1.
    """

    def __init__(self, engine, plan: Plan, scenario: str, *, sets: int = 3, seed: int = 0,
                 prompt: int | None = None) -> None:
        from engines._fresh import Rotation  # noqa: PLC0415

        if scenario not in SCENARIOS[engine.name]:
            raise KeyError(f"engine {engine.name} has no scenario {scenario!r} (known: {', '.join(SCENARIOS[engine.name])})")
        if sets < 1:
            raise ValueError(f"a fresh scenario needs at least one input set, not {sets}")
        self.engine, self.scenario = engine, scenario
        self.rng = np.random.default_rng([seed, 11])
        if engine.name == "minilm":
            from engines._bench import bench_corpus  # noqa: PLC0415

            texts = bench_corpus()
            n = {"batch-1": 1, "batch-32": 32}.get(scenario, len(texts))
            self.plan = engine.plan({**plan.to_dict(), "BATCH_SIZE": n}) if scenario != "throughput" else plan
            self.n = n
            self.words = [t.split(" ") for t in texts]
            self.texts = texts[:n]
            return
        from engines.llama import residual_stream  # noqa: PLC0415

        self.plan = plan
        self.prompt = prompt = prompt or default_prompt(engine)
        self.is_llama = engine.name == "llama-layer"
        self.xs = [residual_stream(np.random.default_rng(seed + s), prompt + 1, engine.cfg.hidden)
                   for s in range(sets)]
        rows = slice(0, prompt) if scenario == "prefill" else slice(prompt, prompt + 1)
        self.rotation = Rotation([{"x": x[rows]} for x in self.xs], seed)
        self.states, self.snapshots = [], []
        if scenario == "decode":
            for x in self.xs:
                state = engine.new_cache(1, prompt + 1) if self.is_llama else engine.new_state(1)
                engine.prefill(x[None, :prompt], plan, state)
                self.states.append(state)
                self.snapshots.append(None if self.is_llama else copy.deepcopy(state))

    def before(self) -> None:
        if self.engine.name == "minilm":
            start = int(self.rng.integers(len(self.words)))
            window = (self.words[(start + i) % len(self.words)] for i in range(self.n))
            self.texts = [" ".join(_swap_two(words, self.rng)) for words in window]
            return
        self.rotation.before()
        if self.scenario == "decode":
            k = self.rotation.cur
            state = self.states[k]
            if self.is_llama:
                state.length = self.prompt
            else:
                state.S[...] = self.snapshots[k].S
                state.conv[...] = self.snapshots[k].conv

    def __call__(self) -> None:
        if self.engine.name == "minilm":
            self.engine.encode(self.texts, self.plan)
            return
        x = self.xs[self.rotation.cur]
        if self.scenario == "prefill":
            self.engine.prefill(x[None, : self.prompt], self.plan)
        else:
            self.engine.decode(x[self.prompt][None], self.states[self.rotation.cur], self.plan)

    def after(self) -> None:
        if self.engine.name != "minilm":
            self.rotation.after()


def _swap_two(words: list[str], rng: np.random.Generator) -> list[str]:
    """``words`` with two different words swapped (a copy; unchanged where all are equal)."""
    out = list(words)
    if len(out) < 2:
        return out
    i, *tries = (rng.random(5) * len(out)).astype(int).tolist()
    for j in tries:
        if out[j] != out[i]:
            out[i], out[j] = out[j], out[i]
            break
    return out
