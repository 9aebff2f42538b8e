"""A fair batch scheduler for an encoder shared by many requests (asyncio).

Every request keeps its own queue of inputs (token lists). One batcher task builds each
engine pass by visiting the requests with inputs left in round-robin order, one input per
request per round, until the pass holds ``max_batch_inputs`` inputs or the next input would
take it over ``max_batch_tokens`` tokens (an input alone is always taken, so every pass makes
progress). The request served first moves to the back after every pass. A request of a
thousand long inputs thus gets one input per round like a request of one sentence: the
sentence waits for at most the pass in flight plus its own pass, whatever else is queued
(deficit round robin in inputs, Shreedhar & Varghese 1996, with a quantum of one input).

Each request has a deadline (``loop.time()`` seconds): when it passes, the request fails
with :class:`DeadlineExceeded` and none of its remaining inputs is run. :meth:`cancel` (the
client went away) drops a request the same way. Inputs already in the pass in flight are
computed (an engine pass is not interruptible) and discarded; the pass size bounds that
waste.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor

import numpy as np

RunBatch = Callable[[list[list[int]]], np.ndarray]


class DeadlineExceeded(Exception):
    """A request's deadline passed before all its inputs were embedded."""

    def __init__(self, timeout_s: float, done: int, total: int) -> None:
        super().__init__(f"the request did not finish within its deadline of {timeout_s:g} s "
                         f"({done} of {total} inputs embedded); send fewer or shorter inputs per request")
        self.timeout_s, self.done, self.total = timeout_s, done, total


class Request:
    """One request's inputs and progress.

    Attributes:
        tokens: the inputs' token ids.
        out: float32 [len(tokens), dim], filled as passes finish.
        future: resolves to ``out`` or raises (engine error, :class:`DeadlineExceeded`).
        next: index of the first input not yet dispatched.
        done: inputs embedded.
        state: ``"live"``, ``"done"``, ``"expired"``, ``"cancelled"`` or ``"failed"``.
    """

    __slots__ = ("tokens", "out", "future", "next", "done", "state", "timeout_s", "_timer")

    def __init__(self, tokens: list[list[int]], dim: int, future: asyncio.Future, timeout_s: float) -> None:
        self.tokens, self.future, self.timeout_s = tokens, future, timeout_s
        self.out = np.empty((len(tokens), dim), np.float32)
        self.next = self.done = 0
        self.state = "live"
        self._timer: asyncio.TimerHandle | None = None

    @property
    def pending(self) -> bool:
        return self.state == "live" and self.next < len(self.tokens)


class FairScheduler:
    """Round-robin, token-bounded batching of requests onto one engine worker.

    Args:
        run_batch: embeds a list of token lists, returns float32 [n, dim]; runs on ``executor``.
        dim: embedding width.
        executor: where ``run_batch`` runs (one worker: the engine is not re-entrant).
        max_batch_inputs: inputs per pass.
        max_batch_tokens: tokens per pass (an input longer than this still runs, alone).
        max_wait_ms: how long a pass below capacity waits for more requests (ms).

    Raises:
        ValueError: a bound below 1.
    """

    def __init__(self, run_batch: RunBatch, dim: int, executor: Executor, *, max_batch_inputs: int = 64,
                 max_batch_tokens: int = 1024, max_wait_ms: float = 2.0) -> None:
        if max_batch_inputs < 1 or max_batch_tokens < 1:
            raise ValueError(f"max_batch_inputs={max_batch_inputs}, max_batch_tokens={max_batch_tokens}: both must be >= 1")
        self.run_batch, self.dim, self.executor = run_batch, dim, executor
        self.max_batch_inputs, self.max_batch_tokens, self.max_wait_ms = max_batch_inputs, max_batch_tokens, max_wait_ms
        self._active: deque[Request] = deque()
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self.stats = {"batches": 0, "inputs_embedded": 0, "inputs_discarded": 0, "expired": 0, "cancelled": 0,
                      "max_batch_tokens_seen": 0}

    # -- lifecycle ----------------------------------------------------------------------------
    async def start(self) -> None:
        self._wake = asyncio.Event()
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
        for req in list(self._active):
            self._finish(req, "failed", RuntimeError("the server is shutting down"))

    # -- requests -----------------------------------------------------------------------------
    def submit(self, tokens: list[list[int]], timeout_s: float) -> Request:
        """Queue ``tokens`` (non-empty); the request fails after ``timeout_s`` seconds."""
        loop = asyncio.get_running_loop()
        req = Request(tokens, self.dim, loop.create_future(), timeout_s)
        req._timer = loop.call_later(timeout_s, self._expire, req)
        self._active.append(req)
        self._wake.set()
        return req

    def cancel(self, req: Request) -> None:
        """Drop ``req`` (its client went away): no further input of it is run."""
        if req.state == "live":
            self.stats["cancelled"] += 1
            self._finish(req, "cancelled", None)

    def queued_inputs(self) -> int:
        return sum(len(r.tokens) - r.next for r in self._active if r.pending)

    def _expire(self, req: Request) -> None:
        if req.state == "live":
            self.stats["expired"] += 1
            self._finish(req, "expired", DeadlineExceeded(req.timeout_s, req.done, len(req.tokens)))

    def _finish(self, req: Request, state: str, exc: BaseException | None) -> None:
        req.state = state
        if req._timer is not None:
            req._timer.cancel()
        try:
            self._active.remove(req)
        except ValueError:
            pass  # fully dispatched: only its pass in flight still refers to it
        if not req.future.done():
            if exc is None and state == "done":
                req.future.set_result(req.out)
            elif exc is not None:
                req.future.set_exception(exc)
            else:
                req.future.cancel()

    # -- batching -----------------------------------------------------------------------------
    def next_batch(self) -> list[tuple[Request, int]]:
        """Take the next pass's inputs: (request, input index) pairs in round-robin order,
        bounded by ``max_batch_inputs`` and ``max_batch_tokens``; rotates the request order."""
        picks: list[tuple[Request, int]] = []
        tokens = 0
        full = False
        while not full:
            progressed = False
            for req in self._active:
                if not req.pending:
                    continue
                n = len(req.tokens[req.next])
                if len(picks) >= self.max_batch_inputs or (picks and tokens + n > self.max_batch_tokens):
                    full = True
                    break
                picks.append((req, req.next))
                req.next += 1
                tokens += n
                progressed = True
            if not progressed:
                break
        for req in [r for r in self._active if not r.pending]:
            self._active.remove(req)  # dispatched in full: finishes when its passes return
        if self._active:
            self._active.rotate(-1)
        return picks

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not any(r.pending for r in self._active):
                self._wake.clear()
                await self._wake.wait()
                continue
            pending_tokens = sum(len(t) for r in self._active if r.pending for t in r.tokens[r.next:])
            if self.max_wait_ms > 0 and pending_tokens < self.max_batch_tokens:
                await asyncio.sleep(self.max_wait_ms / 1e3)  # let concurrent requests join this pass
            picks = self.next_batch()
            if not picks:
                continue
            batch = [req.tokens[i] for req, i in picks]
            self.stats["max_batch_tokens_seen"] = max(self.stats["max_batch_tokens_seen"], sum(map(len, batch)))
            try:
                emb = await loop.run_in_executor(self.executor, self.run_batch, batch)
            except Exception as exc:  # noqa: BLE001 - every request of the pass gets the error
                for req in {id(r): r for r, _ in picks}.values():
                    if req.state == "live":
                        self._finish(req, "failed", exc)
                continue
            self.stats["batches"] += 1
            for (req, i), row in zip(picks, emb):
                if req.state != "live":
                    self.stats["inputs_discarded"] += 1
                    continue
                req.out[i] = row
                req.done += 1
                self.stats["inputs_embedded"] += 1
                if req.done == len(req.tokens):
                    self._finish(req, "done", None)
