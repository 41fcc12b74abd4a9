"""Benchmark the resilience layer's per-request costs (issue 8).

    .venv/bin/python bench/bench_resilience.py [--decisions 200000] [--redis redis://127.0.0.1:6379/0]

Prints, from one run on this machine, the median of 5 rounds:

* the in-process sliding-log limiter's decision cost (target <= 5 us), on
  1,000 rotating keys (all allowed) and on one hot key at its limit (all
  rejected), next to two baselines measured in the same run: a bare dict lookup
  + deque append (the floor any per-key log pays), and a fixed-window counter
  (what a cruder limiter costs);
* the other per-request costs: client identity from an ASGI scope with
  ``X-Forwarded-For``, the cache key of a 1 KB prompt, a local cache hit;
* with Redis reachable: the Lua sliding-window decision (sync) next to a bare
  ``PING`` round trip on the same connection (the network floor).
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections import deque
from collections.abc import Callable

import redis

from ledger.resilience.cache import ResponseCache
from ledger.resilience.identity import ClientIdentity
from ledger.resilience.keys import cache_key
from ledger.resilience.limiter import SlidingWindowLimiter
from ledger.resilience.redis_backend import RedisConnections, RedisSlidingWindowLimiter

KEYS = [f"198.51.{i // 256}.{i % 256}" for i in range(1000)]


def per_call_us(fn: Callable[[str], object], n: int, keys: list[str] = KEYS) -> float:
    """Median over 5 rounds of the mean cost of ``fn(key)``, in microseconds."""
    rounds = []
    k = len(keys)
    for _ in range(5):
        start = time.perf_counter()
        for i in range(n):
            fn(keys[i % k])
        rounds.append((time.perf_counter() - start) / n * 1e6)
    return statistics.median(rounds)


def loop_overhead_us(n: int) -> float:
    return per_call_us(lambda key: None, n)


def baseline_dict_deque(limit: int) -> Callable[[str], object]:
    logs: dict[str, deque[float]] = {}

    def decide(key: str) -> object:
        log = logs.get(key)
        if log is None:
            log = logs[key] = deque(maxlen=limit)
        log.append(time.monotonic())
        return log

    return decide


def baseline_fixed_window(limit: int, window_s: float) -> Callable[[str], object]:
    counts: dict[str, list[float]] = {}

    def decide(key: str) -> object:
        bucket = time.monotonic() // window_s
        entry = counts.get(key)
        if entry is None or entry[0] != bucket:
            entry = counts[key] = [bucket, 0]
        entry[1] += 1
        return entry[1] <= limit

    return decide


def row(name: str, us: float, base: float | None = None) -> None:
    ratio = f"{us / base:6.2f}x" if base else ""
    print(f"  {name:<58} {us:8.3f} us  {ratio}")


def bench_in_process(n: int) -> None:
    overhead = loop_overhead_us(n)
    print(f"in process ({n:,} calls per round; loop overhead {overhead:.3f} us subtracted)")
    base = per_call_us(baseline_dict_deque(60), n) - overhead
    fixed = per_call_us(baseline_fixed_window(60, 60.0), n) - overhead
    allowed = SlidingWindowLimiter(10**9, 60.0)
    allowed_us = per_call_us(allowed.check, n) - overhead
    hot = SlidingWindowLimiter(60, 3600.0)
    for _ in range(60):
        hot.check("hot")
    rejected_us = per_call_us(hot.check, n, ["hot"]) - overhead
    row("baseline: dict lookup + deque append", base)
    row("baseline: fixed-window counter", fixed, base)
    row("sliding log, 1,000 keys, allowed", allowed_us, base)
    row("sliding log, hot key at its limit, rejected", rejected_us, base)
    verdict = "meets" if max(allowed_us, rejected_us) <= 5 else "MISSES"
    print(f"  -> decision cost {verdict} the 5 us target")

    identity = ClientIdentity.from_spec("10.0.0.0/8")
    scope = {
        "client": ("10.0.0.2", 443),
        "headers": [(b"host", b"x"), (b"x-forwarded-for", b"203.0.113.9, 10.0.0.5")],
    }
    row(
        "client identity (trusted proxy + X-Forwarded-For)",
        per_call_us(lambda _: identity.key(scope), n // 4) - overhead,
    )
    prompt = "Explain sticky routing to a new engineer. " * 24
    row(
        "cache key of a 1 KB prompt (NFC + whitespace + sha256)",
        per_call_us(lambda _: cache_key(prompt, "pt_br", "gpt-4o-mini"), n // 4) - overhead,
    )
    cache: ResponseCache[str] = ResponseCache()
    cache.put("k", "answer")
    row("local response cache hit", per_call_us(lambda _: cache.get("k"), n // 4) - overhead)


def bench_redis(url: str, n: int) -> None:
    client = redis.Redis.from_url(url, socket_connect_timeout=1)
    try:
        client.ping()
    except redis.exceptions.ConnectionError as exc:
        print(f"redis: skipped ({url} unreachable: {exc})")
        return
    prefix = f"ledger-bench:{uuid.uuid4().hex}:"
    conns = RedisConnections(url)
    try:
        limiter = RedisSlidingWindowLimiter(conns, 10**6, 60.0, prefix=prefix)
        print(f"redis at {url} ({n:,} calls per round)")
        ping = per_call_us(lambda _: conns.client.ping(), n)
        row("baseline: PING round trip", ping)
        row(
            "sliding log via Lua (ZREMRANGEBYSCORE/ZCARD/ZADD/PEXPIRE)",
            per_call_us(limiter.check, n),
            ping,
        )
        hot = RedisSlidingWindowLimiter(conns, 10, 3600.0, prefix=prefix)
        row("sliding log via Lua, hot key rejected", per_call_us(hot.check, n, ["hot"]), ping)
    finally:
        keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
        for i in range(0, len(keys), 500):
            client.delete(*keys[i : i + 500])
        client.close()
        conns.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decisions", type=int, default=200_000)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--redis-decisions", type=int, default=5_000)
    args = parser.parse_args()
    bench_in_process(args.decisions)
    bench_redis(args.redis, args.redis_decisions)


if __name__ == "__main__":
    main()
