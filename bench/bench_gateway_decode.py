"""Decoding a large request body: json (the gateway's parser before) against msgspec
(its parser now), and whether decoding in a thread would free the event loop.

For a body of ``--body-mb`` MB (bench_gateway_bodies.py's long conversation), each
round runs, in an order that rotates: ``json.loads`` on the loop, ``msgspec`` on the
loop, ``msgspec`` in a worker thread (``asyncio.to_thread``), while a ticker on the
loop sleeps 1 ms at a time and records its worst wake-up delay. Printed: the median
over rounds of the decode time and of the worst delay. A thread does not help: both
decoders hold the GIL for the whole document (one C call), so the loop waits as long.

    .venv/bin/python bench/bench_gateway_decode.py [--rounds 15 --body-mb 31]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import msgspec
from bench_gateway_bodies import big_body

Decoder = Callable[[bytes], Any]


async def _ticker(stop: asyncio.Event) -> float:
    worst = 0.0
    while not stop.is_set():
        t0 = time.perf_counter()
        await asyncio.sleep(0.001)
        worst = max(worst, time.perf_counter() - t0 - 0.001)
    return worst


async def _one(decode: Decoder, raw: bytes, threaded: bool) -> tuple[float, float]:
    stop = asyncio.Event()
    ticker = asyncio.create_task(_ticker(stop))
    await asyncio.sleep(0.02)
    t0 = time.perf_counter()
    if threaded:
        await asyncio.to_thread(decode, raw)
    else:
        decode(raw)
    elapsed = time.perf_counter() - t0
    await asyncio.sleep(0.005)
    stop.set()
    return elapsed * 1000, await ticker * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--body-mb", type=float, default=31)
    args = parser.parse_args()
    raw = big_body(args.body_mb)
    cases: list[tuple[str, Decoder, bool]] = [
        ("json.loads on the loop (before)", json.loads, False),
        ("msgspec on the loop (now)", msgspec.json.decode, False),
        ("msgspec in a thread", msgspec.json.decode, True),
    ]
    results: dict[str, list[tuple[float, float]]] = {name: [] for name, _, _ in cases}
    for i in range(args.rounds):
        for name, decode, threaded in cases[i % 3 :] + cases[: i % 3]:
            results[name].append(asyncio.run(_one(decode, raw, threaded)))
    print(f"\n{len(raw) / 1e6:.1f} MB body, median of {args.rounds} interleaved rounds")
    print(f"{'':<34} {'decode':>9} {'worst loop stall':>17}")
    for name, values in results.items():
        decode_ms = statistics.median(v[0] for v in values)
        stall_ms = statistics.median(v[1] for v in values)
        print(f"{name:<34} {decode_ms:>7.1f}ms {stall_ms:>15.1f}ms")


if __name__ == "__main__":
    main()
