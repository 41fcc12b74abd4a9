"""What the metering transport adds to an official SDK call, against an instant server.

The server runs in a child process (so it does not share our GIL) and answers
every POST at once with a real payload fixture: whole JSON, or an SSE stream
in HTTP/1.1 chunks. For each scenario we time, alternating call by call, the
same SDK call made through the same httpx2 client settings

* baseline: without the transport;
* metered: with it (``ledger.httpx_client()``): recognise the request, read
  the context, parse the response on the fly, normalise usage, price it and
  ``Ledger.record()`` into a real SQLite ledger (journal + background writer).

and print p50/p90 of both and the p50 difference, once with a real SQLite ledger
and once with a recorder that discards rows (the transport's own share).
Target: <= 0.3 ms added at p50.

    .venv/bin/python bench/bench_instrument.py [--calls 1500]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loopback import fixture, instant_server

SCENARIOS = {
    # name: (sdk, api prefix, payload, streamed)
    "openai json (cost computed)": ("openai", "/v1", "openai_chat_cached_real.json", False),
    "openrouter json (cost reported)": (
        "openai",
        "/api/v1",
        "openrouter_chat_anthropic_cache_read_write.json",
        False,
    ),
    "openai sse (cost computed)": ("openai", "/v1", "openai_stream_include_usage_real.sse", True),
    "anthropic sse (cost computed)": ("anthropic", "", "anthropic_stream_doc_example.sse", True),
}
USER = [{"role": "user", "content": "Hello"}]


def pct(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100)[q - 1]


def make_call(sdk: str, base: str, http: Any, streamed: bool) -> tuple[Any, Callable[[], None]]:
    import anthropic
    import openai

    if sdk == "anthropic":
        claude = anthropic.Anthropic(api_key="bench", base_url=base, http_client=http)

        def messages() -> None:
            if streamed:
                for _ in claude.messages.create(
                    model="claude-haiku-4-5-20251001", max_tokens=64, messages=USER, stream=True
                ):
                    pass
            else:
                claude.messages.create(
                    model="claude-haiku-4-5-20251001", max_tokens=64, messages=USER
                )

        return claude, messages
    client = openai.OpenAI(api_key="bench", base_url=base, http_client=http)

    def chat() -> None:
        if streamed:
            for _ in client.chat.completions.create(
                model="gpt-4o-mini",
                messages=USER,
                stream=True,  # type: ignore[arg-type]
            ):
                pass
        else:
            client.chat.completions.create(model="gpt-4o-mini", messages=USER)  # type: ignore[arg-type]

    return client, chat


def bench_scenario(
    name: str, url: str, led: Any, spec: tuple[str, str, str, bool], calls: int
) -> float:
    import httpx2

    import ledger

    sdk, prefix, payload, streamed = spec
    base = f"{url}/{payload.split('.')[0]}{prefix}"
    mapping = {base: "openai"} if sdk == "openai" and prefix == "/v1" else None
    # Same client options on both sides: the only difference is the metering transport.
    plain_http = ledger.httpx_client(ledger=led)
    ledger.uninstrument(plain_http)
    assert isinstance(plain_http, httpx2.Client)
    metered_http = ledger.httpx_client(ledger=led, strict=True, providers=mapping)
    plain, baseline = make_call(sdk, base, plain_http, streamed)
    metered, ours = make_call(sdk, base, metered_http, streamed)
    with ledger.context(session_id="bench", actor_id="agent"):
        for _ in range(200):  # warm up: connections, price tables, imports
            baseline()
            ours()
        times: dict[str, list[float]] = {"base": [], "ours": []}
        # Alternate call by call, so drift on a shared machine hits both arms alike.
        for _ in range(calls):
            for label, fn in (("base", baseline), ("ours", ours)):
                t0 = time.perf_counter()
                fn()
                times[label].append((time.perf_counter() - t0) * 1000)
    plain.close()
    metered.close()
    b50, o50 = statistics.median(times["base"]), statistics.median(times["ours"])
    print(
        f"{name:34} {b50:10.3f} {o50:11.3f} {o50 - b50:10.3f} "
        f"{pct(times['base'], 90):9.3f} {pct(times['ours'], 90):11.3f}   (ms)"
    )
    return o50 - b50


class Discard:
    """A recorder that validates nothing and keeps nothing: the transport's own cost."""

    def record(self, event: Any) -> str:
        return str(event.event_id)


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
    led = Ledger(db, journal_dir=tmp / "journal")
    print(f"{calls} calls per arm, alternating call by call; baseline: the same httpx2 client")
    header = (
        f"{'scenario':34} {'base p50':>10} {'metered p50':>11} {'added p50':>10} "
        f"{'base p90':>9} {'metered p90':>11}"
    )
    added = []
    for title, recorder in (("a real SQLite Ledger", led), ("a recorder that discards", Discard())):
        print(f"\n-- rows to {title}\n{header}")
        added += [bench_scenario(n, url, recorder, spec, calls) for n, spec in SCENARIOS.items()]
    assert led.flush(30), "the ledger did not catch up"
    led.close()
    worst = max(added[: len(SCENARIOS)])
    verdict = "meets" if worst <= 0.3 else "MISSES"
    print(f"\nworst added p50 (real ledger): {worst:.3f} ms ({verdict} the 0.3 ms target)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1500)
    run(parser.parse_args().calls)


if __name__ == "__main__":
    main()
