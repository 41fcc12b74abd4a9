"""What reading OpenRouter's router metadata costs per call (issue 36).

Each case is measured against a same-run baseline, rounds interleaved (alternating
which goes first); "added" is the median over rounds of (case - baseline) in the
calling thread's CPU time per call, with the quartiles of those differences.

* ``stream, no metadata``: the real o3 stream (tests/fixtures, 102 data chunks)
  through OpenRouter's usage stream parser (the metering transport's), against the
  same parser with the metadata check switched off (what every chunk cost before).
* ``stream, metadata``: the same stream with the docs' fallback metadata on its
  final chunk, against the stream without it.
* ``body, metadata``: the doc chat body with and without it.
* ``to_row``: a row with two attempts against one without.

    PYTHONPATH=. .venv/bin/python bench/bench_router_metadata.py [--rounds 30] [--block 400]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAYLOADS = ROOT / "tests" / "fixtures" / "payloads"


def _with_metadata(text: str, metadata: object) -> str:
    lines = text.split("\n")
    at = max(i for i, line in enumerate(lines) if line.startswith("data: {"))
    chunk = json.loads(lines[at][len("data: ") :])
    chunk["openrouter_metadata"] = metadata
    lines[at] = "data: " + json.dumps(chunk, separators=(",", ":"), ensure_ascii=False)
    return "\n".join(lines)


def _per_call(fn: Callable[[], object], block: int) -> float:
    start = time.thread_time_ns()
    for _ in range(block):
        fn()
    return (time.thread_time_ns() - start) / block / 1000  # us


def _compare(
    name: str, base: Callable[[], object], case: Callable[[], object], rounds: int, block: int
) -> None:
    diffs, bases = [], []
    for r in range(rounds):
        first, second = (base, case) if r % 2 == 0 else (case, base)
        a = _per_call(first, block)
        b = _per_call(second, block)
        base_us, case_us = (a, b) if r % 2 == 0 else (b, a)
        diffs.append(case_us - base_us)
        bases.append(base_us)
    q1, med, q3 = statistics.quantiles(diffs, n=4)
    print(
        f"{name:<22} baseline {statistics.median(bases):8.2f} us/call   "
        f"added {med:+7.2f} us (quartiles {q1:+.2f} / {q3:+.2f})"
    )


def main(rounds: int, block: int) -> None:
    import datetime as dt

    from ledger.events import UsageEvent, to_row
    from ledger.providers.openai_compat import OpenRouterProvider

    provider = OpenRouterProvider(api_key="k", base_url="http://127.0.0.1:1")
    doc = PAYLOADS / "router_metadata" / "openrouter_metadata_doc_response_shape.json"
    meta = json.loads(doc.read_text())
    meta["attempt"] = 2
    meta["attempts"] = [
        {"provider": "OpenAI", "model": "openai/gpt-4o-mini", "status": 502},
        {"provider": "Azure", "model": "openai/gpt-4o-mini", "status": 200},
    ]
    plain = (PAYLOADS / "openrouter_stream_openai_o3.sse").read_bytes()
    carrying = _with_metadata(plain.decode(), meta).encode()

    def stream(data: bytes, check: bool = True) -> Callable[[], object]:
        def run() -> object:
            parser = provider.usage_stream_parser()
            parser._router_metadata = check  # the check off: every chunk as before
            parser.feed(data)
            return parser.finish()

        return run

    body = json.loads((PAYLOADS / "openrouter_chat_doc_example.json").read_text())
    bare = json.dumps(body).encode()
    rich = json.dumps({**body, "openrouter_metadata": meta}).encode()
    assert provider.parse_response(rich).router_attempts

    event = UsageEvent(
        started_at=dt.datetime.now(dt.UTC),
        requested_provider="openrouter",
        requested_model="m",
        provider="openrouter",
        status="ok",
    )
    attempts = [
        {"upstream": "OpenAI", "status": 502, "latency_ms": None},
        {"upstream": "Azure", "status": 200, "latency_ms": None},
    ]
    with_attempts = event.replace(router_attempts=attempts)

    _compare("stream, no metadata", stream(plain, False), stream(plain), rounds, block)
    _compare("stream, metadata", stream(plain), stream(carrying), rounds, block)
    _compare(
        "body, metadata",
        lambda: provider.parse_response(bare),
        lambda: provider.parse_response(rich),
        rounds,
        block,
    )
    _compare("to_row", lambda: to_row(event), lambda: to_row(with_attempts), rounds, block)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--block", type=int, default=400)
    args = parser.parse_args()
    main(args.rounds, args.block)
