"""Redis backends against the real server (see conftest.py for skip/CI rules)."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
import redis

from ledger.resilience.cache import ResponseCache
from ledger.resilience.config import Resilience, ResilienceSettings
from ledger.resilience.limiter import SlidingWindowLimiter
from ledger.resilience.redis_backend import (
    RedisCacheStore,
    RedisConnections,
    RedisHealth,
    RedisSlidingWindowLimiter,
)
from tests.resilience.servers import LoopbackServer
from tests.tcp_relay import TcpRelay


@pytest.fixture
def connections(redis_url: str) -> Iterator[RedisConnections]:
    conns = RedisConnections(redis_url)
    yield conns
    conns.close()


def warnings_in(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_a_burst_is_limited_with_retry_after(
    connections: RedisConnections, redis_prefix: str
) -> None:
    limiter = RedisSlidingWindowLimiter(connections, 5, 30.0, prefix=redis_prefix)
    decisions = [limiter.check("203.0.113.9") for _ in range(7)]
    assert [d.allowed for d in decisions] == [True] * 5 + [False] * 2
    assert [d.remaining for d in decisions[:5]] == [4, 3, 2, 1, 0]
    assert 29 < decisions[5].retry_after_s <= 30
    assert limiter.check("198.51.100.1").allowed


def test_two_instances_share_one_window(redis_url: str, redis_prefix: str) -> None:
    a_conn, b_conn = RedisConnections(redis_url), RedisConnections(redis_url)
    try:
        a = RedisSlidingWindowLimiter(a_conn, 4, 30.0, prefix=redis_prefix)
        b = RedisSlidingWindowLimiter(b_conn, 4, 30.0, prefix=redis_prefix)
        allowed = [lim.check("k").allowed for lim in (a, b, a, b, a, b)]
    finally:
        a_conn.close()
        b_conn.close()
    assert allowed == [True, True, True, True, False, False]


def test_the_window_slides_and_idle_keys_expire(
    connections: RedisConnections, redis_prefix: str, admin: redis.Redis
) -> None:
    limiter = RedisSlidingWindowLimiter(connections, 2, 0.3, prefix=redis_prefix)
    assert limiter.check("k").allowed and limiter.check("k").allowed
    assert not limiter.check("k").allowed
    assert 0 < admin.pttl(f"{redis_prefix}rl:k") <= 300
    time.sleep(0.35)
    assert limiter.check("k").allowed
    time.sleep(0.35)
    assert admin.exists(f"{redis_prefix}rl:k") == 0


async def test_coroutines_get_exactly_the_limit(
    connections: RedisConnections, redis_prefix: str
) -> None:
    limiter = RedisSlidingWindowLimiter(connections, 25, 30.0, prefix=redis_prefix)
    try:
        decisions = await asyncio.gather(*(limiter.acheck("k") for _ in range(60)))
    finally:
        await connections.aclose()
    assert sum(d.allowed for d in decisions) == 25
    assert all(d.retry_after_s > 0 for d in decisions if not d.allowed)


def test_the_cache_is_shared_between_instances_with_a_ttl(
    redis_url: str, redis_prefix: str, admin: redis.Redis
) -> None:
    a_conn, b_conn = RedisConnections(redis_url), RedisConnections(redis_url)
    try:
        a: ResponseCache[dict[str, str]] = ResponseCache(
            ttl_s=30, shared=RedisCacheStore(a_conn, prefix=redis_prefix)
        )
        b: ResponseCache[dict[str, str]] = ResponseCache(
            ttl_s=30, shared=RedisCacheStore(b_conn, prefix=redis_prefix)
        )
        first = a.get_or_compute("k1", lambda: {"content": "computed once", "provider": "openai"})
        second = b.get_or_compute("k1", lambda: pytest.fail("instance b called the provider"))
        assert (first.hit, second.hit) == (False, True) and second.value == first.value
        assert 29_000 < admin.pttl(f"{redis_prefix}rc:k1") <= 30_000
        paused = {"content": "draft", "paused": True}
        assert not a.put("k2", paused) and admin.exists(f"{redis_prefix}rc:k2") == 0
    finally:
        a_conn.close()
        b_conn.close()


async def test_async_cache_reads_and_writes_redis(
    connections: RedisConnections, redis_prefix: str, admin: redis.Redis
) -> None:
    cache: ResponseCache[dict[str, str]] = ResponseCache(
        ttl_s=30, shared=RedisCacheStore(connections, prefix=redis_prefix)
    )

    async def compute() -> dict[str, str]:
        await asyncio.sleep(0.02)
        return {"content": "hello"}

    try:
        served = await asyncio.gather(*(cache.aget_or_compute("k", compute) for _ in range(5)))
        assert sum(not s.hit for s in served) == 1
        assert admin.get(f"{redis_prefix}rc:k") == b'{"content":"hello"}'
        fresh: ResponseCache[dict[str, str]] = ResponseCache(
            shared=RedisCacheStore(connections, prefix=redis_prefix)
        )
        assert await fresh.aget("k") == {"content": "hello"}
    finally:
        await connections.aclose()


def closed_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port: int = sock.getsockname()[1]
    sock.close()
    return port


def test_unreachable_redis_falls_back_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    conns = RedisConnections(f"redis://127.0.0.1:{closed_port()}/0")
    health = RedisHealth(retry_interval_s=0.01)
    limiter = RedisSlidingWindowLimiter(
        conns, 3, 30.0, health=health, fallback=SlidingWindowLimiter(3, 30.0)
    )
    cache: ResponseCache[str] = ResponseCache(shared=RedisCacheStore(conns, health=health))
    with caplog.at_level(logging.WARNING, logger="ledger.resilience"):
        started = time.monotonic()
        decisions = []
        for _ in range(5):
            decisions.append(limiter.check("k"))
            time.sleep(0.012)  # past the retry interval: each call probes Redis again
        assert cache.get_or_compute("q", lambda: "answer").value == "answer"
        assert cache.get_or_compute("q", lambda: "again").hit  # the local cache still works
        elapsed = time.monotonic() - started
    conns.close()
    assert [d.allowed for d in decisions] == [True, True, True, False, False]
    assert len(warnings_in(caplog)) == 1 and "in-process rate limiter" in warnings_in(caplog)[0]
    assert elapsed < 2


def test_redis_going_away_mid_run_keeps_answering_and_recovers(
    redis_url: str, redis_prefix: str, admin: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    target = admin.connection_pool.connection_kwargs
    relay = TcpRelay((target.get("host", "127.0.0.1"), target.get("port", 6379)))
    conns = RedisConnections(f"redis://127.0.0.1:{relay.port}/{target.get('db', 0)}")
    health = RedisHealth(retry_interval_s=0.2)
    limiter = RedisSlidingWindowLimiter(conns, 100, 30.0, prefix=redis_prefix, health=health)
    key = f"{redis_prefix}rl:k"
    try:
        with caplog.at_level(logging.INFO, logger="ledger.resilience"):
            assert all(limiter.check("k").allowed for _ in range(3))
            assert admin.zcard(key) == 3
            relay.cut()
            assert all(limiter.check("k").allowed for _ in range(20))  # served in process
            assert health.down and admin.zcard(key) == 3
            relay.restore()
            time.sleep(0.25)
            assert limiter.check("k").allowed
            assert not health.down and admin.zcard(key) == 4
    finally:
        conns.close()
        relay.close()
    assert len(warnings_in(caplog)) == 1
    assert any("reachable again" in r.getMessage() for r in caplog.records)


def test_a_killed_connection_reconnects_without_falling_back(
    connections: RedisConnections,
    redis_prefix: str,
    admin: redis.Redis,
    caplog: pytest.LogCaptureFixture,
) -> None:
    limiter = RedisSlidingWindowLimiter(connections, 100, 30.0, prefix=redis_prefix)
    assert limiter.check("k").allowed
    client_id = connections.client.client_id()
    admin.client_kill_filter(_id=client_id)
    assert limiter.check("k").allowed
    assert admin.zcard(f"{redis_prefix}rl:k") == 2
    assert not limiter.health.down and warnings_in(caplog) == []


async def test_more_requests_in_flight_than_pooled_connections_keep_the_exact_limit(
    redis_url: str, redis_prefix: str, admin: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """150 requests at once through uvicorn and the middleware, limit 50: exactly 50 pass.

    Redis is held (a relay that forwards nothing) until all 150 are inside the
    server, so more requests wait on Redis than its pool (100 connections) has
    connections. Waiting for a connection is back-pressure, not an outage: no
    warning, no fallback to the in-process limiter, and one shared count.
    """
    target = admin.connection_pool.connection_kwargs
    relay = TcpRelay((target.get("host", "127.0.0.1"), target.get("port", 6379)))
    resilience = Resilience(
        ResilienceSettings(
            rate_limit=50,
            window_s=60.0,
            redis_url=f"redis://127.0.0.1:{relay.port}/{target.get('db', 0)}",
            redis_prefix=redis_prefix,
            redis_timeout_s=60.0,  # the hold must not read as Redis timing out
            redis_wait_s=60.0,  # nor run out a request's wait for a connection
        )
    )
    inside = 0

    async def agent(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    limited = resilience.middleware(agent)

    async def counting(scope: Any, receive: Any, send: Any) -> None:
        nonlocal inside
        inside += scope["type"] == "http"
        await limited(scope, receive, send)

    relay.hold()
    try:
        with (
            caplog.at_level(logging.INFO, logger="ledger.resilience"),
            LoopbackServer(counting) as server,
        ):
            limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
            async with httpx.AsyncClient(base_url=server.url, timeout=90, limits=limits) as client:
                requests = [asyncio.create_task(client.get("/ask")) for _ in range(150)]
                deadline = time.monotonic() + 60
                while inside < 150:
                    assert time.monotonic() < deadline, f"only {inside} requests arrived"
                    await asyncio.sleep(0.01)
                relay.release()
                responses = await asyncio.gather(*requests)
            resilience.close()  # while uvicorn's loop, which owns its connections, runs
    finally:
        resilience.close()
        relay.close()
    statuses = [r.status_code for r in responses]
    assert (statuses.count(200), statuses.count(429)) == (50, 100)
    assert admin.zcard(f"{redis_prefix}rl:127.0.0.1") == 50
    assert warnings_in(caplog) == []
    assert resilience.health is not None and not resilience.health.down


@pytest.fixture
def held_relay(admin: redis.Redis) -> Iterator[tuple[TcpRelay, str]]:
    """A relay to the real Redis that forwards nothing until released, and its URL."""
    target = admin.connection_pool.connection_kwargs
    relay = TcpRelay((target.get("host", "127.0.0.1"), target.get("port", 6379)))
    relay.hold()
    yield relay, f"redis://127.0.0.1:{relay.port}/{target.get('db', 0)}"
    relay.close()


async def test_requests_beyond_the_pool_wait_for_a_connection(
    held_relay: tuple[TcpRelay, str], redis_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    relay, url = held_relay
    conns = RedisConnections(url, timeout_s=60.0, max_connections=5, wait_s=60.0)
    limiter = RedisSlidingWindowLimiter(conns, 10, 30.0, prefix=redis_prefix)
    with caplog.at_level(logging.WARNING, logger="ledger.resilience"):
        checks = [asyncio.create_task(limiter.acheck("k")) for _ in range(40)]
        deadline = time.monotonic() + 30
        while relay.accepted < 5:  # the pool is full; 35 checks wait for a connection
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        relay.release()
        decisions = await asyncio.gather(*checks)
        await conns.aclose()
    conns.close()
    assert sum(d.allowed for d in decisions) == 10
    assert relay.accepted == 5, "never more connections than the pool allows"
    assert warnings_in(caplog) == [] and not limiter.health.down


def test_threads_beyond_the_pool_wait_for_a_connection(
    held_relay: tuple[TcpRelay, str], redis_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    relay, url = held_relay
    conns = RedisConnections(url, timeout_s=60.0, max_connections=2, wait_s=60.0)
    limiter = RedisSlidingWindowLimiter(conns, 5, 30.0, prefix=redis_prefix)
    with (
        caplog.at_level(logging.WARNING, logger="ledger.resilience"),
        ThreadPoolExecutor(max_workers=12) as pool,
    ):
        checks = [pool.submit(limiter.check, "k") for _ in range(12)]
        deadline = time.monotonic() + 30
        while relay.accepted < 2:  # both connections taken; ten threads wait for one
            assert time.monotonic() < deadline
            time.sleep(0.01)
        relay.release()
        decisions = [check.result(timeout=60) for check in checks]
    conns.close()
    assert sum(d.allowed for d in decisions) == 5
    assert relay.accepted == 2 and warnings_in(caplog) == [] and not limiter.health.down


async def test_a_redis_that_never_answers_is_an_outage_served_in_process(
    held_relay: tuple[TcpRelay, str], redis_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    _, url = held_relay  # Redis never answers: each request on the one connection times out
    conns = RedisConnections(url, timeout_s=0.2, max_connections=1, wait_s=10.0)
    limiter = RedisSlidingWindowLimiter(conns, 10, 30.0, prefix=redis_prefix)
    with caplog.at_level(logging.WARNING, logger="ledger.resilience"):
        decisions = await asyncio.wait_for(
            asyncio.gather(*(limiter.acheck("k") for _ in range(3))), timeout=30
        )
        await conns.aclose()
    conns.close()
    assert all(d.allowed for d in decisions)  # served in process meanwhile
    assert limiter.health.down and len(warnings_in(caplog)) == 1


@pytest.fixture
def slow_relay(admin: redis.Redis) -> Iterator[tuple[TcpRelay, str]]:
    """A relay to the real Redis adding 20 ms to each round trip, and its URL: with 10
    connections, 250 requests at once queue for about half a second, twice the 0.25 s
    a request waited for a connection before."""
    target = admin.connection_pool.connection_kwargs
    relay = TcpRelay((target.get("host", "127.0.0.1"), target.get("port", 6379)), delay_s=0.01)
    yield relay, f"redis://127.0.0.1:{relay.port}/{target.get('db', 0)}"
    relay.close()


async def test_a_burst_far_beyond_the_pool_admits_the_limit_across_two_workers(
    slow_relay: tuple[TcpRelay, str],
    redis_prefix: str,
    admin: redis.Redis,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """500 acquisitions at once on two instances (two workers) with 10 connections each.

    Most wait for a connection longer than Redis takes to answer; waiting is not an
    outage, so neither instance counts in process and exactly the limit gets in.
    """
    _, url = slow_relay
    workers = [RedisConnections(url, max_connections=10) for _ in range(2)]
    limiters = [RedisSlidingWindowLimiter(c, 100, 60.0, prefix=redis_prefix) for c in workers]
    with caplog.at_level(logging.WARNING, logger="ledger.resilience"):
        decisions = await asyncio.gather(*(limiters[i % 2].acheck("burst") for i in range(500)))
        for conns in workers:
            await conns.aclose()
            conns.close()
    assert sum(d.allowed for d in decisions) == 100
    assert admin.zcard(f"{redis_prefix}rl:burst") == 100
    assert [len(lim.fallback) for lim in limiters] == [0, 0], "nothing counted in process"
    assert warnings_in(caplog) == [] and not any(lim.health.down for lim in limiters)


def test_threads_far_beyond_the_pool_admit_the_limit_across_two_workers(
    slow_relay: tuple[TcpRelay, str], redis_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    _, url = slow_relay
    workers = [RedisConnections(url, max_connections=2) for _ in range(2)]
    limiters = [RedisSlidingWindowLimiter(c, 30, 60.0, prefix=redis_prefix) for c in workers]
    with (
        caplog.at_level(logging.WARNING, logger="ledger.resilience"),
        ThreadPoolExecutor(max_workers=80) as pool,
    ):
        checks = [pool.submit(limiters[i % 2].check, "burst") for i in range(80)]
        decisions = [check.result(timeout=60) for check in checks]
    for conns in workers:
        conns.close()
    assert sum(d.allowed for d in decisions) == 30
    assert [len(lim.fallback) for lim in limiters] == [0, 0], "nothing counted in process"
    assert warnings_in(caplog) == []


async def test_a_request_that_gets_no_connection_in_time_is_refused_not_counted_alone(
    held_relay: tuple[TcpRelay, str], redis_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    relay, url = held_relay  # Redis holds the one connection's answer
    conns = RedisConnections(url, timeout_s=30.0, max_connections=1, wait_s=0.2)
    limiter = RedisSlidingWindowLimiter(conns, 10, 30.0, prefix=redis_prefix)
    with caplog.at_level(logging.WARNING, logger="ledger.resilience"):
        first = asyncio.create_task(limiter.acheck("k"))
        deadline = time.monotonic() + 30
        while relay.accepted < 1:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        waiting = await asyncio.gather(*(limiter.acheck("k") for _ in range(3)))
        relay.release()
        assert (await first).allowed
        await conns.aclose()
    conns.close()
    assert [(d.allowed, d.retry_after_s) for d in waiting] == [(False, 1.0)] * 3
    assert len(limiter.fallback) == 0 and not limiter.health.down
    assert len(warnings_in(caplog)) == 1 and "pool busy" in warnings_in(caplog)[0]


async def test_a_burst_against_a_redis_that_is_down_is_served_in_process_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    conns = RedisConnections(f"redis://127.0.0.1:{closed_port()}/0", max_connections=10)
    limiter = RedisSlidingWindowLimiter(conns, 100, 30.0)
    with caplog.at_level(logging.WARNING, logger="ledger.resilience"):
        decisions = await asyncio.gather(*(limiter.acheck("k") for _ in range(500)))
        await conns.aclose()
    conns.close()
    assert sum(d.allowed for d in decisions) == 100 and limiter.health.down
    [warning] = warnings_in(caplog)
    assert "in-process rate limiter" in warning
    assert "(connection refused: ConnectionError" in warning
