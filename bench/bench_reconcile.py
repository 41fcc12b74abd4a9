"""Reconciling OpenRouter rows against the simulator's ``/api/v1/generation``.

    .venv/bin/python bench/bench_reconcile.py [--rows 100000] [--rounds 4] [--concurrency 32]
    .venv/bin/python bench/bench_reconcile.py --in-process   # no sockets: the ledger's own cost

The simulator runs in a child process (real HTTP on loopback, its own GIL) and
knows ``--rows`` generations. The ledger is a migrated SQLite file. Each round
inserts its slice of rows (untimed), then, interleaved in the same round:

* baseline: the same slice's ids fetched with bare ``httpx`` GETs at the same
  concurrency (what the HTTP round trips alone cost);
* reconcile: ``reconcile_openrouter`` over the slice (fetch, parse, store).

Printed: the median generations/s of each over the rounds (target, issue 17:
reconcile >= 500/s), and the peak RSS after each round (flat: pages of rows,
never the whole table, are held).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import multiprocessing as mp
import resource
import statistics
import tempfile
import time
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import insert

from ledger.reconcile.openrouter import GenerationClient, reconcile_openrouter
from ledger.schema import token_usage
from ledger.store.engine import make_engine
from ledger.store.migrate import upgrade

CREATED = 1_764_000_000
MODEL = "qwen/qwen3-coder"


def gen_id(i: int) -> str:
    return f"gen-{CREATED}-{i:020d}"


def _simulator(rows: int) -> Any:
    from ledger.simulator import Simulator, VirtualClock
    from ledger.simulator.core import Completion, Usage

    sim = Simulator(clock=VirtualClock(), seed=1)
    sim.generations.discrepancy_rate = 0.02
    for i in range(rows):
        usage = Usage(
            prompt_tokens=1000 + i % 500,
            completion_tokens=100 + i % 50,
            cached_tokens=0,
            cache_write_tokens=0,
            reasoning_tokens=0,
            prompt_cost=Decimal("0.0002"),
            completion_cost=Decimal("0.0001"),
        )
        done = Completion(f"{i:020d}", CREATED, MODEL, "Fireworks", (), usage, 0.1, 0.5)
        sim.generations.record(gen_id(i), done, streamed=False)
    return sim


def _serve(rows: int, port: int, ready: Any) -> None:
    from ledger.simulator.server import make_server

    server = make_server(_simulator(rows), "127.0.0.1", port)
    server.config.log_level = "warning"
    ready.put("ok")
    asyncio.run(server.serve())


def _insert(url: str, start: int, count: int) -> None:
    at = dt.datetime(2026, 11, 30, tzinfo=dt.UTC)
    rows = [
        {
            "event_id": str(uuid.UUID(int=i + 1)),
            "call_id": str(uuid.UUID(int=i + 1)),
            "attempt": 1,
            "started_at": at,
            "requested_provider": "openrouter",
            "requested_model": MODEL,
            "provider": "openrouter",
            "model": MODEL,
            "generation_id": gen_id(i),
            "status": "ok",
            "input_tokens": 1000,
            "output_tokens": 100,
            "cost_usd": Decimal("0.0003"),
            "cost_source": "provider",
        }
        for i in range(start, start + count)
    ]
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(insert(token_usage), rows)
    engine.dispose()


def _http(concurrency: int, transport: Any) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    return httpx.AsyncClient(timeout=30, limits=limits, transport=transport)


async def _baseline(
    base: str, start: int, count: int, concurrency: int, transport: Any = None
) -> float:
    gate = asyncio.Semaphore(concurrency)
    async with _http(concurrency, transport) as http:

        async def one(i: int) -> None:
            async with gate:
                r = await http.get(
                    f"{base}/generation",
                    params={"id": gen_id(i)},
                    headers={"authorization": "Bearer sk-or-bench"},
                )
                assert r.status_code == 200, r.status_code

        began = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(start, start + count)))
        return count / (time.perf_counter() - began)


async def _reconcile(
    url: str, base: str, count: int, concurrency: int, transport: Any = None
) -> float:
    engine = make_engine(url)
    try:
        async with _http(concurrency, transport) as http:
            client = GenerationClient(http, api_key="sk-or-bench", base_url=base)
            began = time.perf_counter()
            report = await reconcile_openrouter(engine, client, since=None, concurrency=concurrency)
            elapsed = time.perf_counter() - began
    finally:
        engine.dispose()
    assert report.billed == count and report.failed == 0, report.as_dict()
    return count / elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="serve the simulator through its in-process httpx transport (no sockets, no "
        "server process): the ledger's own cost, without the HTTP server's",
    )
    args = parser.parse_args()
    per_round = args.rows // args.rounds

    from ledger.simulator import AsyncSimulatorTransport
    from ledger.simulator.server import free_port

    transport: Any = None
    child: Any = None
    if args.in_process:
        transport = AsyncSimulatorTransport(_simulator(args.rows))
        base = "http://simulator/api/v1"
    else:
        port = free_port()
        ctx = mp.get_context("spawn")
        ready = ctx.Queue()
        child = ctx.Process(target=_serve, args=(args.rows, port, ready), daemon=True)
        child.start()
        ready.get(timeout=600)
        base = f"http://127.0.0.1:{port}/api/v1"
        for _ in range(500):  # the port is open once uvicorn started
            try:
                httpx.get(f"{base}/generation", params={"id": "x"}, timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.05)

    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'ledger.db'}"
        engine = make_engine(url)
        upgrade(engine)
        engine.dispose()
        baseline, reconciled, rss = [], [], []
        try:
            for r in range(args.rounds):
                start = r * per_round
                _insert(url, start, per_round)
                baseline.append(
                    asyncio.run(_baseline(base, start, per_round, args.concurrency, transport))
                )
                reconciled.append(
                    asyncio.run(_reconcile(url, base, per_round, args.concurrency, transport))
                )
                rss.append(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
                print(
                    f"round {r + 1}: baseline {baseline[-1]:,.0f}/s, "
                    f"reconcile {reconciled[-1]:,.0f}/s, peak RSS {rss[-1]:,.0f} MiB",
                    flush=True,
                )
        finally:
            if child is not None:
                child.terminate()
                child.join(5)
    print(
        f"{per_round * args.rounds:,} rows, concurrency {args.concurrency}, "
        f"median of {args.rounds} interleaved rounds:\n"
        f"  baseline (bare GETs)  {statistics.median(baseline):8,.0f} generations/s\n"
        f"  ledger reconcile      {statistics.median(reconciled):8,.0f} generations/s "
        f"(target >= 500)\n"
        f"  peak RSS after each round: {', '.join(f'{m:,.0f}' for m in rss)} MiB"
    )


if __name__ == "__main__":
    main()
