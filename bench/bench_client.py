"""Client overhead per call vs plain httpx, against the same instant loopback server.

The server runs in a child process (so it does not share our GIL) and answers
every POST at once with a real payload fixture: whole JSON, or an SSE stream
in HTTP/1.1 chunks. For each scenario we time, interleaved in short rounds,

* baseline: ``httpx.Client.post`` of the same request bytes, body read fully
  (streamed: ``iter_bytes`` to the end);
* ledger: ``Client.chat`` / ``Client.stream`` doing everything it does in
  production: build the request, parse, normalise usage, price it, and
  ``Ledger.record()`` into a real SQLite ledger (journal + background writer).

Each call is timed twice: wall time (``perf_counter``) and the calling thread's
CPU time (``thread_time``). On a loaded machine the wall time of a loopback call
mostly measures the scheduler (who else had the core while we waited on the
socket); the CPU time counts only the work this thread did, so the CPU
difference is the client's own cost even when the wall figures swing. Rounds
alternate which side goes first; each round gives a median per side, and
"added" is the median over rounds of (ledger - baseline) of the same round, so
a slow minute slows both sides of a pair. ``iqr`` is the spread of those
per-round differences: when it is wide, the wall figure is noise. ``writer``
is the CPU the ledger's background writer thread spent per ledger call (off the
caller's path, but on the machine).

Target (issue 20): <= 0.1 ms added at p50.

``--in-process`` sends both through an ``httpx.MockTransport`` answering the same
bytes instead of the loopback server: no sockets, no second process, so the
difference is the client's own CPU work. ``--pin`` pins this process to CPU 0
and the loopback server to CPU 1 (``os.sched_setaffinity``).

``--sse-chunk 512`` (in process) hands streams over in 512-byte pieces, as the
loopback server sends them, instead of in one piece.

    PYTHONPATH=. .venv/bin/python bench/bench_client.py [--calls 2000] [--block 20]
        [--in-process [--sse-chunk 512]] [--pin] [--only openai]
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from loopback import fixture, instant_server

SCENARIOS = {
    # name: (provider, model, payload, streamed)
    "openai json (cost computed)": ("openai", "gpt-4o", "openai_chat_cached_real.json", False),
    "openrouter json (cost reported)": (
        "openrouter",
        "anthropic/claude-sonnet-4.6",
        "openrouter_chat_anthropic_cache_read_write.json",
        False,
    ),
    "openai sse (cost computed)": (
        "openai",
        "gpt-4o-mini",
        "openai_stream_include_usage_real.sse",
        True,
    ),
    "anthropic sse (cost computed)": (
        "anthropic",
        "claude-sonnet-4-5",
        "anthropic_stream_doc_example.sse",
        True,
    ),
}
MESSAGES = [{"role": "user", "content": "Hello"}]


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1]


def http_client(replies: dict[str, Any] | None, sse_chunk: int = 0) -> httpx.Client:
    """A pooled client for the loopback server, or (``replies``) one answering in process:
    a stream's body in one piece, or (``sse_chunk``) in pieces of that many bytes, as
    the loopback server sends it."""
    if replies is None:
        return httpx.Client()

    def answer(request: httpx.Request) -> httpx.Response:
        reply = replies[request.url.path.split("/")[1]]
        kind = "text/event-stream" if reply.sse else "application/json"
        body = reply.body
        if reply.sse and sse_chunk:
            pieces = [body[i : i + sse_chunk] for i in range(0, len(body), sse_chunk)]
            return httpx.Response(
                reply.status, content=iter(pieces), headers={"content-type": kind}
            )
        return httpx.Response(reply.status, content=body, headers={"content-type": kind})

    return httpx.Client(transport=httpx.MockTransport(answer))


@dataclass
class Side:
    """One side's samples (microseconds): every call, and each round's median."""

    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    round_wall: list[float] = field(default_factory=list)
    round_cpu: list[float] = field(default_factory=list)

    def run_round(self, fn: Callable[[], None], block: int) -> None:
        wall, cpu = [], []
        clock, cpu_clock = time.perf_counter, time.thread_time
        for _ in range(block):
            c0 = cpu_clock()
            t0 = clock()
            fn()
            t1 = clock()
            c1 = cpu_clock()
            wall.append((t1 - t0) * 1e6)
            cpu.append((c1 - c0) * 1e6)
        self.wall += wall
        self.cpu += cpu
        self.round_wall.append(statistics.median(wall))
        self.round_cpu.append(statistics.median(cpu))


def added(base: list[float], ours: list[float]) -> tuple[float, float, float]:
    """Median and quartiles of the per-round differences ``ours - base``."""
    diffs = [o - b for b, o in zip(base, ours, strict=True)]
    q1, _, q3 = statistics.quantiles(diffs, n=4)
    return statistics.median(diffs), q1, q3


def bench_scenario(
    name: str,
    url: str,
    ledger: Any,
    prov: str,
    model: str,
    payload: str,
    streamed: bool,
    calls: int,
    block: int,
    replies: dict[str, Any] | None = None,
    sse_chunk: int = 0,
) -> None:
    from ledger.client import Client
    from ledger.providers import ChatRequest, make_provider

    base = f"{url}/{payload.split('.')[0]}"
    provider = make_provider(prov, api_key="bench-key", base_url=base)
    http = http_client(replies, sse_chunk)
    with (
        Client(providers=[provider], ledger=ledger, strict=True, http_client=http) as client,
        http_client(replies, sse_chunk) as plain,
        http,
    ):
        prep_url = provider.build_request(
            ChatRequest(model=model, messages=MESSAGES, stream=streamed)
        )
        raw_body = httpx.Request("POST", prep_url.url, json=prep_url.body).content
        headers = prep_url.headers

        def baseline() -> None:
            if streamed:
                with plain.stream("POST", prep_url.url, content=raw_body, headers=headers) as r:
                    for _ in r.iter_bytes():
                        pass
            else:
                plain.post(prep_url.url, content=raw_body, headers=headers).read()

        def ours() -> None:
            if streamed:
                with client.stream(MESSAGES, model=model, provider=prov, session_id="s") as s:
                    for _ in s:
                        pass
            else:
                client.chat(MESSAGES, model=model, provider=prov, session_id="s")

        for _ in range(200):  # warm up: connections, price tables, imports
            baseline()
            ours()
        ledger.flush(timeout=60)
        gc.collect()
        sides = {"base": Side(), "ours": Side()}
        order = [("base", baseline), ("ours", ours)]
        cpu0, thread0 = time.process_time(), time.thread_time()
        for r in range(max(calls // block, 4)):
            for label, fn in order if r % 2 == 0 else order[::-1]:
                sides[label].run_round(fn, block)
        ledger.flush(timeout=60)
        writer_us = ((time.process_time() - cpu0) - (time.thread_time() - thread0)) * 1e6
        b, o = sides["base"], sides["ours"]
        wall_add = added(b.round_wall, o.round_wall)
        cpu_add = added(b.round_cpu, o.round_cpu)
        print(
            f"{name:32} wall {statistics.median(b.round_wall):6.1f} "
            f"{statistics.median(o.round_wall):6.1f} {wall_add[0]:+6.1f} "
            f"[{wall_add[1]:+.0f},{wall_add[2]:+.0f}]   "
            f"cpu {statistics.median(b.round_cpu):6.1f} {statistics.median(o.round_cpu):6.1f} "
            f"{cpu_add[0]:+6.1f} [{cpu_add[1]:+.0f},{cpu_add[2]:+.0f}]   "
            f"p90 {pct(b.wall, 90):6.0f} {pct(o.wall, 90):6.0f}   "
            f"writer {writer_us / len(o.wall):5.1f}"
        )


def run(
    calls: int,
    block: int,
    in_process: bool = False,
    pin: bool = False,
    only: str = "",
    sse_chunk: int = 0,
) -> None:
    scenarios = {k: v for k, v in SCENARIOS.items() if only in k}
    replies = {p.split(".")[0]: fixture(p) for _, _, p, _ in scenarios.values()}
    if in_process:
        if pin:
            os.sched_setaffinity(0, {0})
        run_against("http://bench.invalid", calls, block, scenarios, replies, sse_chunk)
        return
    with instant_server(replies, cpus={1} if pin else None) as url:
        if pin:
            os.sched_setaffinity(0, {0})
        run_against(url, calls, block, scenarios)


def run_against(
    url: str,
    calls: int,
    block: int,
    scenarios: dict[str, tuple[str, str, str, bool]],
    replies: dict[str, Any] | None = None,
    sse_chunk: int = 0,
) -> None:
    from ledger.store.engine import make_engine
    from ledger.store.ledger import Ledger
    from ledger.store.migrate import upgrade

    tmp = Path(tempfile.mkdtemp())
    db = f"sqlite:///{tmp / 'bench.db'}"
    engine = make_engine(db)
    upgrade(engine)
    engine.dispose()
    ledger = Ledger(db, journal_dir=tmp / "journal")
    where = "in process (httpx.MockTransport)" if replies else "loopback"
    if replies and sse_chunk:
        where += f", streams in {sse_chunk}-byte pieces"
    rounds = max(calls // block, 4)
    print(
        f"{rounds} rounds x {block} calls per side and scenario, {where}, "
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.1f}, affinity {sorted(os.sched_getaffinity(0))}"
    )
    print(
        "microseconds; p50 = median of per-round medians: httpx, ledger, added "
        "[quartiles of the per-round added]; writer = background CPU per ledger call"
    )
    try:
        for name, (prov, model, payload, streamed) in scenarios.items():
            bench_scenario(
                name, url, ledger, prov, model, payload, streamed, calls, block, replies, sse_chunk
            )
    finally:
        ledger.close()
    print("target (issue 20): added <= 100 us at p50")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000, help="calls per side and scenario")
    parser.add_argument("--block", type=int, default=20, help="calls per side in a round")
    parser.add_argument("--in-process", action="store_true", help="no sockets: CPU overhead")
    parser.add_argument("--pin", action="store_true", help="client on CPU 0, server on CPU 1")
    parser.add_argument("--only", default="", help="scenarios whose name contains this")
    parser.add_argument(
        "--sse-chunk", type=int, default=0, help="in process: streams in pieces of N bytes"
    )
    args = parser.parse_args()
    run(args.calls, args.block, args.in_process, args.pin, args.only, args.sse_chunk)
