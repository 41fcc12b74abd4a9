"""Client overhead per call vs plain httpx, against the same instant loopback server.

The server runs in a child process (so it does not share our GIL) and answers
every POST at once with a real payload fixture: whole JSON, or an SSE stream
in HTTP/1.1 chunks. For each scenario we time, interleaved in blocks,

* baseline: ``httpx.Client.post`` of the same request bytes, body read fully
  (streamed: ``iter_bytes`` to the end);
* ledger: ``Client.chat`` / ``Client.stream`` doing everything it does in
  production: build the request, parse, normalise usage, price it, and
  ``Ledger.record()`` into a real SQLite ledger (journal + background writer).

and print the median of the per-round medians of both (rounds of 50 calls,
interleaved), their difference (the overhead the client adds) and p90 of all
calls. Target (issue 20): <= 0.1 ms added at p50.

``--in-process`` sends both through an ``httpx.MockTransport`` answering the same
bytes instead of the loopback server: no sockets, no second process, so the
difference is the client's own CPU work, steady even on a loaded machine.

    .venv/bin/python bench/bench_client.py [--calls 1500] [--in-process]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
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


def http_client(replies: dict[str, Any] | None) -> httpx.Client:
    """A pooled client for the loopback server, or (``replies``) one answering in process."""
    if replies is None:
        return httpx.Client()

    def answer(request: httpx.Request) -> httpx.Response:
        reply = replies[request.url.path.split("/")[1]]
        kind = "text/event-stream" if reply.sse else "application/json"
        return httpx.Response(reply.status, content=reply.body, headers={"content-type": kind})

    return httpx.Client(transport=httpx.MockTransport(answer))


def bench_scenario(
    name: str,
    url: str,
    ledger: Any,
    prov: str,
    model: str,
    payload: str,
    streamed: bool,
    calls: int,
    replies: dict[str, Any] | None = None,
) -> None:
    from ledger.client import Client
    from ledger.providers import ChatRequest, make_provider

    base = f"{url}/{payload.split('.')[0]}"
    provider = make_provider(prov, api_key="bench-key", base_url=base)
    http = http_client(replies)
    with (
        Client(providers=[provider], ledger=ledger, strict=True, http_client=http) as client,
        http_client(replies) as plain,
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
        times: dict[str, list[float]] = {"base": [], "ours": []}
        medians: dict[str, list[float]] = {"base": [], "ours": []}
        block = 50
        for _ in range(calls // block):
            for label, fn in (("base", baseline), ("ours", ours)):
                round_ms = []
                for _ in range(block):
                    t0 = time.perf_counter()
                    fn()
                    round_ms.append((time.perf_counter() - t0) * 1000)
                times[label] += round_ms
                medians[label].append(statistics.median(round_ms))
        b50, o50 = statistics.median(medians["base"]), statistics.median(medians["ours"])
        print(
            f"{name:34} {b50:10.3f} {o50:11.3f} {o50 - b50:10.3f} "
            f"{pct(times['base'], 90):9.3f} {pct(times['ours'], 90):11.3f}   (ms)"
        )


def run(calls: int, in_process: bool = False) -> None:
    replies = {p.split(".")[0]: fixture(p) for _, _, p, _ in SCENARIOS.values()}
    if in_process:
        run_against("http://bench.invalid", calls, replies)
        return
    with instant_server(replies) as url:
        run_against(url, calls)


def run_against(url: str, calls: int, replies: dict[str, Any] | None = None) -> None:
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
    print(f"{calls} calls per scenario, {where}, python {sys.version.split()[0]}")
    print(
        f"{'scenario':34} {'httpx p50':>10} {'ledger p50':>11} {'added p50':>10}"
        f" {'p90 base':>9} {'p90 ledger':>11}"
    )
    try:
        for name, (prov, model, payload, streamed) in SCENARIOS.items():
            bench_scenario(name, url, ledger, prov, model, payload, streamed, calls, replies)
    finally:
        ledger.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=1500)
    parser.add_argument("--in-process", action="store_true", help="no sockets: CPU overhead")
    args = parser.parse_args()
    run(args.calls, args.in_process)
