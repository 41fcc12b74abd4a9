"""Single flight with a slow shared store: callers arriving over time, through a
real Redis made far away by a delaying relay, still cost exactly one provider
call; threads and coroutines share one flight; nobody ever hangs."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from ledger.resilience.cache import ResponseCache, Served
from ledger.resilience.redis_backend import RedisCacheStore, RedisConnections
from tests.tcp_relay import TcpRelay

CALLERS = 80
SPACING_S = 0.001  # one caller per millisecond: arrivals span the whole computation
COMPUTE_S = 0.04
REDIS_DELAY_S = 0.005  # each way: a 10 ms round trip on top of loopback


class Provider:
    """Counts calls from threads and coroutines alike; fails on demand."""

    def __init__(self, delay_s: float = COMPUTE_S, fail: bool = False) -> None:
        self.calls = 0
        self.delay_s, self.fail = delay_s, fail
        self._lock = threading.Lock()

    def _count(self) -> dict[str, str]:
        with self._lock:
            self.calls += 1
            n = self.calls
        if self.fail:
            raise RuntimeError("all providers failed")
        return {"content": f"answer {n}", "provider": "openai"}

    def __call__(self) -> dict[str, str]:
        time.sleep(self.delay_s)
        return self._count()

    async def acall(self) -> dict[str, str]:
        await asyncio.sleep(self.delay_s)
        return self._count()


@pytest.fixture
def far_redis(redis_url: str, admin: redis.Redis) -> Iterator[RedisConnections]:
    """Connections to the real Redis through a relay adding latency each way."""
    target = admin.connection_pool.connection_kwargs
    relay = TcpRelay(
        (target.get("host", "127.0.0.1"), target.get("port", 6379)), delay_s=REDIS_DELAY_S
    )
    conns = RedisConnections(f"redis://127.0.0.1:{relay.port}/{target.get('db', 0)}")
    warm_up(lambda: conns.client.ping())
    yield conns
    conns.close()
    relay.close()


@pytest.fixture
def cache(far_redis: RedisConnections, redis_prefix: str) -> ResponseCache[dict[str, str]]:
    return ResponseCache(ttl_s=30, shared=RedisCacheStore(far_redis, prefix=redis_prefix))


def warm_up(ping: Any, n: int = 40) -> None:
    """Open ``n`` pooled connections at once, so that no caller under test pays a
    connection handshake: each one's Redis read costs exactly one round trip."""
    barrier = threading.Barrier(n)

    def one() -> None:
        barrier.wait()
        ping()

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)


async def awarm_up(conns: RedisConnections, n: int = 40) -> None:
    """:func:`warm_up` for this loop's asyncio pool."""
    client = conns.async_client()
    await asyncio.gather(*(client.ping() for _ in range(n)))


def staggered_threads(
    n: int, call: Any, spacing_s: float = SPACING_S
) -> tuple[list[Served[dict[str, str]]], list[BaseException]]:
    """``n`` threads, one started every ``spacing_s``, each calling ``call()`` once."""
    results: list[Served[dict[str, str]]] = []
    errors: list[BaseException] = []

    def visitor() -> None:
        try:
            results.append(call())
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=visitor) for _ in range(n)]
    for t in threads:
        t.start()
        time.sleep(spacing_s)
    for t in threads:
        t.join(10)
    assert not any(t.is_alive() for t in threads), "a caller hung"
    return results, errors


async def staggered_coroutines(n: int, call: Any, spacing_s: float = SPACING_S) -> list[Any]:
    async def visitor(i: int) -> Any:
        await asyncio.sleep(i * spacing_s)
        return await call()

    return await asyncio.wait_for(
        asyncio.gather(*(visitor(i) for i in range(n)), return_exceptions=True), 10
    )


def stored(admin: redis.Redis, prefix: str, key: str) -> Any:
    data = admin.get(f"{prefix}rc:{key}")
    return None if data is None else json.loads(data)


def test_threads_arriving_over_time_through_a_slow_redis_make_one_call(
    cache: ResponseCache[dict[str, str]], admin: redis.Redis, redis_prefix: str
) -> None:
    provider = Provider()
    results, errors = staggered_threads(CALLERS, lambda: cache.get_or_compute("q", provider))
    assert errors == [] and len(results) == CALLERS
    assert provider.calls == 1
    assert {r.value["content"] for r in results} == {"answer 1"}
    assert sum(not r.hit for r in results) == 1
    assert stored(admin, redis_prefix, "q") == {"content": "answer 1", "provider": "openai"}


async def test_coroutines_arriving_over_time_through_a_slow_redis_make_one_call(
    cache: ResponseCache[dict[str, str]],
    far_redis: RedisConnections,
    admin: redis.Redis,
    redis_prefix: str,
) -> None:
    provider = Provider()
    await awarm_up(far_redis)
    try:
        results = await staggered_coroutines(
            CALLERS, lambda: cache.aget_or_compute("q", provider.acall)
        )
    finally:
        await far_redis.aclose()
    assert provider.calls == 1
    assert {r.value["content"] for r in results} == {"answer 1"}
    assert sum(not r.hit for r in results) == 1
    assert stored(admin, redis_prefix, "q") == {"content": "answer 1", "provider": "openai"}


def test_a_failure_reaches_every_thread_that_arrived_during_it_and_nothing_is_stored(
    cache: ResponseCache[dict[str, str]], admin: redis.Redis, redis_prefix: str
) -> None:
    # A long call, so that every arrival (20 ms apart at most) falls inside it.
    provider = Provider(delay_s=0.15, fail=True)
    results, errors = staggered_threads(20, lambda: cache.get_or_compute("q", provider))
    assert results == [] and len(errors) == 20
    assert all(str(e) == "all providers failed" for e in errors)
    assert provider.calls == 1
    assert cache.get("q") is None and stored(admin, redis_prefix, "q") is None


async def test_a_failure_reaches_every_coroutine_that_arrived_during_it_and_nothing_is_stored(
    cache: ResponseCache[dict[str, str]],
    far_redis: RedisConnections,
    admin: redis.Redis,
    redis_prefix: str,
) -> None:
    provider = Provider(delay_s=0.15, fail=True)  # longer than all the arrivals
    await awarm_up(far_redis)
    try:
        results = await staggered_coroutines(20, lambda: cache.aget_or_compute("q", provider.acall))
        assert await cache.aget("q") is None
    finally:
        await far_redis.aclose()
    assert provider.calls == 1
    assert all(isinstance(r, RuntimeError) for r in results)
    assert stored(admin, redis_prefix, "q") is None


async def test_cancelling_the_first_caller_during_its_redis_read_spares_the_others(
    cache: ResponseCache[dict[str, str]], far_redis: RedisConnections
) -> None:
    provider = Provider()
    await awarm_up(far_redis)
    try:
        first = asyncio.ensure_future(cache.aget_or_compute("q", provider.acall))
        await asyncio.sleep(REDIS_DELAY_S / 2)  # the leader is inside its Redis GET
        others = asyncio.ensure_future(
            staggered_coroutines(10, lambda: cache.aget_or_compute("q", provider.acall))
        )
        first.cancel()
        results = await others
    finally:
        await far_redis.aclose()
    assert first.cancelled()
    assert provider.calls == 1
    assert all(r == Served({"content": "answer 1", "provider": "openai"}, True) for r in results)


def test_an_answer_already_in_redis_costs_no_call_for_staggered_threads(
    far_redis: RedisConnections, redis_prefix: str
) -> None:
    writer: ResponseCache[dict[str, str]] = ResponseCache(
        shared=RedisCacheStore(far_redis, prefix=redis_prefix)
    )
    writer.put("q", {"content": "from another instance"})
    fresh: ResponseCache[dict[str, str]] = ResponseCache(
        shared=RedisCacheStore(far_redis, prefix=redis_prefix)
    )
    provider = Provider()
    results, errors = staggered_threads(20, lambda: fresh.get_or_compute("q", provider))
    assert errors == [] and provider.calls == 0
    assert all(r == Served({"content": "from another instance"}, True) for r in results)


@pytest.mark.parametrize("first", ["thread", "coroutine"])
async def test_threads_and_coroutines_share_one_flight(
    first: str, cache: ResponseCache[dict[str, str]], far_redis: RedisConnections
) -> None:
    provider = Provider(delay_s=0.1)
    await awarm_up(far_redis)
    go = threading.Event()
    thread_results: list[Served[dict[str, str]]] = []

    def thread_visitor() -> None:
        go.wait(5)
        thread_results.append(cache.get_or_compute("q", provider))

    threads = [threading.Thread(target=thread_visitor) for _ in range(10)]
    for t in threads:
        t.start()
    try:
        if first == "thread":
            go.set()
            await asyncio.sleep(0.03)  # a thread leads; the coroutines join its flight
            results = await asyncio.gather(
                *(cache.aget_or_compute("q", provider.acall) for _ in range(10))
            )
        else:
            leading = asyncio.ensure_future(cache.aget_or_compute("q", provider.acall))
            await asyncio.sleep(0.03)  # a coroutine leads; the threads join its flight
            go.set()
            results = [await leading]
        # Join off the loop: a thread waiting on this loop's flight needs it running.
        for t in threads:
            await asyncio.to_thread(t.join, 10)
    finally:
        await far_redis.aclose()
    assert not any(t.is_alive() for t in threads)
    assert provider.calls == 1
    everyone = [*results, *thread_results]
    assert {r.value["content"] for r in everyone} == {"answer 1"}
    assert sum(not r.hit for r in everyone) == 1


@pytest.mark.timeout(10)
async def test_a_blocking_call_on_the_loop_computing_the_key_does_not_deadlock() -> None:
    cache: ResponseCache[dict[str, str]] = ResponseCache()
    provider = Provider(delay_s=0.05)
    leading = asyncio.ensure_future(cache.aget_or_compute("q", provider.acall))
    await asyncio.sleep(0.01)  # the leader's task is computing on this very loop
    inline = cache.get_or_compute("q", lambda: {"content": "computed inline"})
    assert inline == Served({"content": "computed inline"}, False)
    assert await leading == Served({"content": "answer 1", "provider": "openai"}, False)
    assert cache.get("q") == {"content": "answer 1", "provider": "openai"}


class Interrupted(BaseException):
    """Not an Exception: like KeyboardInterrupt, nothing a waiter should receive."""


@pytest.mark.timeout(10)
def test_an_interrupted_leader_leaves_no_waiter_hanging() -> None:
    cache: ResponseCache[dict[str, str]] = ResponseCache()
    started = threading.Event()
    interrupted: list[BaseException] = []

    def interrupted_call() -> dict[str, str]:
        started.set()
        time.sleep(0.05)
        raise Interrupted

    def leader() -> None:
        try:
            cache.get_or_compute("q", interrupted_call)
        except Interrupted as exc:
            interrupted.append(exc)

    lead = threading.Thread(target=leader)
    lead.start()
    started.wait(5)
    provider = Provider(delay_s=0.0)
    results, errors = staggered_threads(5, lambda: cache.get_or_compute("q", provider))
    lead.join(5)
    assert len(interrupted) == 1 and errors == []
    # Each waiter computed its own answer instead of waiting forever...
    assert provider.calls == 5 and not any(r.hit for r in results)
    # ...and the key is free again: the next caller leads and caches.
    assert not cache.get_or_compute("q", provider).hit
    assert cache.get_or_compute("q", provider).hit
