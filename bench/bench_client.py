"""Client overhead per call vs plain httpx, against the same instant loopback server.

The server runs in a child process (so it does not share our GIL) and answers
every POST at once with a real payload fixture: whole JSON, or an SSE stream
in HTTP/1.1 chunks. For each scenario we time, interleaved in blocks,

* baseline: ``httpx.Client.post`` of the same request bytes, body read fully
  (streamed: ``iter_bytes`` to the end);
* ledger: ``Client.chat`` / ``Client.stream`` doing everything it does in
  production: build the request, parse, normalise usage, price it, and
  ``Ledger.record()`` into a real SQLite ledger (journal + background writer).

and print p50/p90 of both and the p50 difference, the overhead the client
adds. Target: <= 0.3 ms at p50, streamed and not.

    .venv/bin/python bench/bench_client.py [--calls 1500]
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


def bench_scenario(
    name: str,
    url: str,
    ledger: Any,
    prov: str,
    model: str,
    payload: str,
    streamed: bool,
    calls: int,
) -> None:
    from ledger.client import Client
    from ledger.providers import ChatRequest, make_provider

    base = f"{url}/{payload.split('.')[0]}"
    provider = make_provider(prov, api_key="bench-key", base_url=base)
    with (
        Client(providers=[provider], ledger=ledger, strict=True) as client,
        httpx.Client() as plain,
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
        block = 50
        for _ in range(calls // block):
            for label, fn in (("base", baseline), ("ours", ours)):
                for _ in range(block):
                    t0 = time.perf_counter()
                    fn()
                    times[label].append((time.perf_counter() - t0) * 1000)
        b50, o50 = statistics.median(times["base"]), statistics.median(times["ours"])
        print(
            f"{name:34} {b50:10.3f} {o50:11.3f} {o50 - b50:10.3f} "
            f"{pct(times['base'], 90):9.3f} {pct(times['ours'], 90):11.3f}   (ms)"
        )


def run(calls: int) -> None:

    replies = {p.split(".")[0]: fixture(p) for _, _, p, _ in SCENARIOS.values()}
    with instant_server(replies) as url:
        run_against(url, calls)


def run_against(url: str, calls: int) -> None:
    from ledger.store.engine import make_engine
    from ledger.store.ledger import Ledger
    from ledger.store.migrate import upgrade

    tmp = Path(tempfile.mkdtemp())
    db = f"sqlite:///{tmp / 'bench.db'}"
    engine = make_engine(db)
    upgrade(engine)
    engine.dispose()
    ledger = Ledger(db, journal_dir=tmp / "journal")
    print(f"{calls} calls per scenario, python {sys.version.split()[0]}")
    print(
        f"{'scenario':34} {'httpx p50':>10} {'ledger p50':>11} {'added p50':>10}"
        f" {'p90 base':>9} {'p90 ledger':>11}"
    )
    try:
        for name, (prov, model, payload, streamed) in SCENARIOS.items():
            bench_scenario(name, url, ledger, prov, model, payload, streamed, calls)
    finally:
        ledger.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=1500)
    run(parser.parse_args().calls)
