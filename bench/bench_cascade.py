"""The cascade's added latency: happy path and one fallback, against plain client calls.

A child process serves an instant OpenAI and Anthropic (real payload fixtures)
and an OpenAI that always answers 429. Interleaved call by call, we time:

* plain ``Client.chat`` to OpenAI (the happy path's baseline);
* ``Cascade.chat`` whose first route (OpenAI) answers: target <= 0.1 ms more at p50;
* plain ``Client.chat`` to Anthropic (the fallback's baseline);
* ``Cascade.chat`` whose first route is rate limited and falls back to Anthropic:
  the difference is what one failed attempt costs (a round trip plus its row).

Every call records its rows into a real SQLite ledger.

    .venv/bin/python bench/bench_cascade.py [--calls 2000]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from loopback import Reply, fixture, instant_server

from ledger.cascade import Cascade, Route
from ledger.client import Client
from ledger.providers import make_provider
from ledger.store.engine import make_engine
from ledger.store.ledger import Ledger
from ledger.store.migrate import upgrade

MESSAGES = [{"role": "user", "content": "Hello"}]
RATE_LIMITED = (
    b'{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}'
)


def p50(values: list[float]) -> float:
    return statistics.median(values) * 1000


REPLIES = {
    "openai": fixture("openai_chat_cached_real.json"),
    "anthropic": fixture("anthropic_messages_cache_read_write_real.json"),
    "limited": Reply(RATE_LIMITED, status=429),
}


def run(calls: int) -> None:
    with instant_server(REPLIES) as base, tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/bench.db"
        engine = make_engine(url)
        upgrade(engine)
        engine.dispose()
        ledger = Ledger(url, journal_dir=Path(tmp) / "journal")
        key = "sk-bench-0123456789"
        happy = Client(
            providers=[
                make_provider("openai", api_key=key, base_url=f"{base}/openai"),
                make_provider("anthropic", api_key=key, base_url=f"{base}/anthropic"),
            ],
            ledger=ledger,
        )
        limited = Client(
            providers=[
                make_provider("openai", api_key=key, base_url=f"{base}/limited"),
                make_provider("anthropic", api_key=key, base_url=f"{base}/anthropic"),
            ],
            ledger=ledger,
        )
        chain = [Route("openai", "gpt-4o-mini"), Route("anthropic", "claude-haiku-4-5-20251001")]
        cases: dict[str, Callable[[], object]] = {
            "plain client -> openai": lambda: happy.chat(
                MESSAGES, model="gpt-4o-mini", provider="openai"
            ),
            "cascade, openai answers": lambda: Cascade(happy, chain).chat(MESSAGES),
            "plain client -> anthropic": lambda: happy.chat(
                MESSAGES, model="claude-haiku-4-5-20251001", provider="anthropic"
            ),
            "cascade, 429 then anthropic": lambda: Cascade(limited, chain).chat(MESSAGES),
        }
        times: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(50):  # warm connections and caches
            for fn in cases.values():
                fn()
        for _ in range(calls):
            for name, fn in cases.items():
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
        assert ledger.flush(60)
        ledger.close()
        happy.close()
        limited.close()

    print(f"{calls} calls per case, interleaved; p50 in ms (SQLite ledger recording every row)\n")
    for name, values in times.items():
        print(f"  {name:<30} p50 {p50(values):7.3f}")
    happy_cost = p50(times["cascade, openai answers"]) - p50(times["plain client -> openai"])
    fallback_cost = p50(times["cascade, 429 then anthropic"]) - p50(
        times["plain client -> anthropic"]
    )
    print(f"\n  happy-path overhead: {happy_cost:+.3f} ms   (target <= 0.1 ms)")
    print(f"  one fallback costs:  {fallback_cost:+.3f} ms over calling Anthropic directly")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    run(parser.parse_args().calls)


if __name__ == "__main__":
    main()
