"""The fair batch scheduler with a stand-in engine: round-robin passes bounded in inputs and
tokens, a small request served while a large one runs, deadlines and cancellation."""

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from engines._scheduler import DeadlineExceeded, FairScheduler


class FakeEngine:
    """Embeds token lists as [first id, len] rows after sleeping ``s_per_token`` per token."""

    def __init__(self, s_per_token: float = 0.0) -> None:
        self.s_per_token, self.passes = s_per_token, []

    def __call__(self, batch):
        self.passes.append([list(t) for t in batch])
        time.sleep(self.s_per_token * sum(map(len, batch)))
        return np.array([[t[0], len(t)] for t in batch], np.float32)


def inputs(tag: int, n: int, length: int) -> list[list[int]]:
    return [[tag] * length for _ in range(n)]


def make(engine, **kw):
    return FairScheduler(engine, 2, ThreadPoolExecutor(1), **kw)


def test_passes_take_one_input_per_request_per_round_within_the_bounds():
    async def main():
        s = make(FakeEngine(), max_batch_inputs=5, max_batch_tokens=100)
        await s.start()
        a = s.submit(inputs(1, 6, 30), 60)
        b = s.submit(inputs(2, 2, 10), 60)
        c = s.submit(inputs(3, 1, 5), 60)
        first = [(r.tokens[i][0], i) for r, i in s.next_batch()]
        second = [(r.tokens[i][0], i) for r, i in s.next_batch()]
        await s.stop()
        return first, second, a, b, c

    first, second, *_ = asyncio.run(main())
    # round 1: a0 b0 c0 (45 tokens); round 2: a1 (75), b1 (85); a2 would make 115 > 100
    assert first == [(1, 0), (2, 0), (3, 0), (1, 1), (2, 1)]
    # b and c are fully dispatched; a alone: 3 inputs of 30 fit in 100 tokens, a 4th does not
    assert second == [(1, 2), (1, 3), (1, 4)]


def test_an_input_longer_than_the_token_bound_runs_alone():
    async def main():
        s = make(FakeEngine(), max_batch_inputs=8, max_batch_tokens=10)
        await s.start()
        s.submit([[7] * 25, [7] * 3], 60)
        p1, p2 = s.next_batch(), s.next_batch()
        await s.stop()
        return [len(r.tokens[i]) for r, i in p1], [len(r.tokens[i]) for r, i in p2]

    assert asyncio.run(main()) == ([25], [3])


def test_a_small_request_finishes_while_a_large_one_is_running():
    eng = FakeEngine(s_per_token=2e-4)

    async def main():
        s = make(eng, max_batch_inputs=8, max_batch_tokens=400, max_wait_ms=0)
        await s.start()
        large = s.submit(inputs(1, 40, 200), 60)  # 20 passes of 2 inputs
        await asyncio.sleep(0.05)
        small = s.submit(inputs(2, 1, 10), 60)
        got = await small.future
        large_left = len(large.tokens) - large.done
        out = await large.future
        await s.stop()
        return got, large_left, out

    got, large_left, out = asyncio.run(main())
    assert got.tolist() == [[2, 10]] and out.shape == (40, 2) and (out[:, 0] == 1).all()
    assert large_left >= 30  # the small one did not wait for the large one
    small_pass = next(i for i, p in enumerate(eng.passes) if any(t[0] == 2 for t in p))
    assert small_pass <= 2  # the pass in flight, then its own


def test_a_request_past_its_deadline_fails_clearly_and_its_remaining_inputs_are_not_run():
    eng = FakeEngine(s_per_token=1e-3)

    async def main():
        s = make(eng, max_batch_inputs=1, max_batch_tokens=256, max_wait_ms=0)
        await s.start()
        req = s.submit(inputs(1, 50, 50), 0.2)  # 50 ms a pass, 2.5 s in all
        with pytest.raises(DeadlineExceeded) as exc:
            await req.future
        await asyncio.sleep(0.2)
        ok = await s.submit(inputs(2, 1, 5), 5).future
        await s.stop()
        return exc.value, s.stats, ok

    exc, stats, ok = asyncio.run(main())
    assert "deadline of 0.2 s" in str(exc) and "of 50 inputs embedded" in str(exc) and exc.done < 10
    assert stats["expired"] == 1 and sum(len(p) for p in eng.passes) < 12
    assert ok.tolist() == [[2, 5]]


def test_a_cancelled_request_stops_taking_passes():
    eng = FakeEngine(s_per_token=1e-3)

    async def main():
        s = make(eng, max_batch_inputs=1, max_batch_tokens=256, max_wait_ms=0)
        await s.start()
        req = s.submit(inputs(1, 50, 50), 60)
        await asyncio.sleep(0.12)
        s.cancel(req)
        n_at_cancel = len(eng.passes)
        await asyncio.sleep(0.3)
        await s.stop()
        return req, n_at_cancel, s.stats

    req, n_at_cancel, stats = asyncio.run(main())
    assert req.state == "cancelled" and req.future.cancelled()
    assert len(eng.passes) <= n_at_cancel + 1  # at most the pass that was in flight
    assert stats["cancelled"] == 1


def test_an_engine_error_reaches_every_request_of_the_pass():
    def broken(batch):
        raise RuntimeError("kernel fault")

    async def main():
        s = make(broken, max_batch_inputs=8, max_batch_tokens=256, max_wait_ms=5)
        await s.start()
        a, b = s.submit(inputs(1, 1, 4), 5), s.submit(inputs(2, 1, 4), 5)
        res = await asyncio.gather(a.future, b.future, return_exceptions=True)
        await s.stop()
        return res

    assert [str(r) for r in asyncio.run(main())] == ["kernel fault", "kernel fault"]


def test_bounds_below_one_are_refused():
    with pytest.raises(ValueError, match="max_batch_tokens=0"):
        FairScheduler(FakeEngine(), 2, ThreadPoolExecutor(1), max_batch_tokens=0)
