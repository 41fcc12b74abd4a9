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


class InterleavingClock:
    """A clock the test drives, which can stop one thread right after it read the time.

    ``now`` is what it reads. The thread set as ``paused`` is held, once, after
    reading (as if descheduled between reading the time and deciding) until
    ``resume`` is set; ``read`` tells the test it got there. ``readings`` keeps
    what each thread read last.
    """

    def __init__(self, now: float) -> None:
        self.now = now
        self.paused: threading.Thread | None = None
        self.read = threading.Event()
        self.resume = threading.Event()
        self.readings: dict[int, float] = {}

    def __call__(self) -> float:
        value = self.readings[threading.get_ident()] = self.now
        if threading.current_thread() is self.paused:
            self.paused = None
            self.read.set()
            self.resume.wait(30)
        return value


def test_a_thread_paused_after_reading_the_clock_cannot_decide_out_of_time_order() -> None:
    clock = InterleavingClock(0.0)
    limiter = SlidingWindowLimiter(2, 10.0, clock=clock)
    admitted: list[float] = []  # the clock reading each admitted decision was made with

    def decide() -> None:
        if limiter.check("k").allowed:
            admitted.append(clock.readings[threading.get_ident()])

    decide()
    clock.now = 1.0
    decide()
    clock.now = 5.0  # (-5, 5] holds both: a request now must be refused
    a = threading.Thread(target=decide)
    clock.paused = a
    a.start()
    assert clock.read.wait(30)
    clock.now = 11.5  # both have left (1.5, 11.5]: a request now must be admitted
    b = threading.Thread(target=decide)
    b.start()
    # Reading the time outside the lock lets b decide here, and a then decide with
    # its stale 5.0 against a log b has already trimmed. Read under the lock, b
    # waits for a's decision (and this join times out).
    b.join(timeout=1.0)
    clock.resume.set()
    a.join(30)
    b.join(30)
    assert sorted(admitted) == [0.0, 1.0, 11.5]
    for i, start in enumerate(sorted(admitted)):
        assert sum(1 for t in sorted(admitted)[i:] if t < start + 10.0) <= 2


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
