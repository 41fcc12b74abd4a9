from __future__ import annotations

import asyncio
import threading

import pytest

from ledger.errors import TooManyRequests
from ledger.resilience.limiter import SlidingWindowLimiter, enforce


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_gets_the_limit_then_rejections_with_the_wait() -> None:
    clock = Clock()
    limiter = SlidingWindowLimiter(5, 10.0, clock=clock)
    decisions = []
    for _ in range(8):
        decisions.append(limiter.check("1.2.3.4"))
        clock.now += 0.5
    assert [d.allowed for d in decisions] == [True] * 5 + [False] * 3
    assert [d.remaining for d in decisions[:5]] == [4, 3, 2, 1, 0]
    # The first request was at t=1000; at t=1002.5 its slot frees in 7.5 s.
    assert decisions[5].retry_after_s == pytest.approx(7.5)
    assert decisions[7].retry_after_s == pytest.approx(6.5)


def test_the_slot_frees_exactly_when_retry_after_says() -> None:
    clock = Clock()
    limiter = SlidingWindowLimiter(2, 10.0, clock=clock)
    limiter.check("k")
    clock.now += 3
    limiter.check("k")
    wait = limiter.check("k").retry_after_s
    assert wait == pytest.approx(7.0)
    clock.now += wait - 0.001
    assert not limiter.check("k").allowed
    clock.now += 0.002
    assert limiter.check("k").allowed


def test_no_window_anywhere_holds_more_than_the_limit() -> None:
    # A fixed bucket would allow 2x the limit across a boundary; a sliding log never does.
    clock = Clock()
    limiter = SlidingWindowLimiter(10, 1.0, clock=clock)
    accepted: list[float] = []
    for _ in range(400):
        if limiter.check("k").allowed:
            accepted.append(clock.now)
        clock.now += 0.0137
    assert len(accepted) > 40
    for i, start in enumerate(accepted):
        assert sum(1 for t in accepted[i:] if t < start + 1.0) <= 10


def test_keys_are_independent() -> None:
    limiter = SlidingWindowLimiter(1, 60.0)
    assert limiter.check("a").allowed
    assert not limiter.check("a").allowed
    assert limiter.check("b").allowed


def test_idle_keys_are_evicted() -> None:
    clock = Clock()
    limiter = SlidingWindowLimiter(3, 1.0, clock=clock)
    for i in range(100):
        limiter.check(f"10.0.0.{i}")
    assert len(limiter) == 100
    clock.now += 2
    for _ in range(60):
        limiter.check("active")
    assert len(limiter) == 1


def test_a_flood_of_distinct_addresses_cannot_grow_it_past_max_keys() -> None:
    limiter = SlidingWindowLimiter(5, 60.0, max_keys=1000)
    for i in range(20_000):
        assert limiter.check(f"198.51.{i // 256}.{i % 256}").allowed
    assert len(limiter) == 1000


def test_threads_hammering_one_key_get_exactly_the_limit() -> None:
    limiter = SlidingWindowLimiter(500, 60.0)
    allowed: list[int] = []
    barrier = threading.Barrier(8)

    def worker() -> None:
        barrier.wait()
        allowed.append(sum(limiter.check("shared").allowed for _ in range(200)))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(allowed) == 500


async def test_coroutines_share_one_limiter() -> None:
    limiter = SlidingWindowLimiter(30, 60.0)
    decisions = await asyncio.gather(*(limiter.acheck("k") for _ in range(100)))
    assert sum(d.allowed for d in decisions) == 30


def test_enforce_raises_with_retry_after() -> None:
    limiter = SlidingWindowLimiter(1, 30.0)
    enforce(limiter, "k")
    with pytest.raises(TooManyRequests) as info:
        enforce(limiter, "k")
    assert 29 < info.value.retry_after <= 30
