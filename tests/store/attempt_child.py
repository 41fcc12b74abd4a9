"""Child process for the open-attempt tests: starts attempts, prints ``ready``, waits to be killed.

Usage: python attempt_child.py URL JOURNAL_DIR MODE [SERVER_URL]

MODE ``journal``: begins attempts A, B and C, records C's own event (closing it),
records 400 plain events through segments of 20 kB (so A and B are carried across
rotations), then records B's event. Left open at the kill: A only.
MODE ``client``: a ledger Client streams a chat from SERVER_URL (which stalls
mid-body), prints ``ready`` once the first delta arrived and waits there.
"""

from __future__ import annotations

import datetime as dt
import sys
import time
import uuid
from pathlib import Path

from ledger.client import Client
from ledger.events import UsageEvent
from ledger.providers import make_provider
from ledger.store.ledger import Ledger

NAMESPACE = uuid.UUID("0e6c1f4a-4f63-4d0e-a7d3-8a9a3c1f2b77")
NOW = dt.datetime(2026, 12, 1, 9, 0, tzinfo=dt.UTC)


def event_id(name: str) -> str:
    return str(uuid.uuid5(NAMESPACE, name))


def attempt(name: str, *, status: str = "ok", **changes: object) -> UsageEvent:
    event = UsageEvent(
        event_id=event_id(name),
        started_at=NOW,
        requested_provider="openrouter",
        requested_model="deepseek/deepseek-chat",
        provider="openrouter",
        status="ok",
        session_id=f"s-{name}",
        actor_id="planner",
        input_tokens=100,
        output_tokens=10,
    )
    if status == "interrupted":
        changes = {
            "status": "error",
            "error_type": "interrupted",
            "input_tokens": 0,
            "output_tokens": 0,
            "usage_reported": False,
            **changes,
        }
    return event.replace(**changes)


def journal_mode(led: Ledger) -> None:
    for name in ("A", "B", "C"):
        led.begin_attempt(attempt(name, status="interrupted"))
    led.record(attempt("C"))
    for i in range(400):
        led.record(attempt(f"plain-{i}"))
    led.record(attempt("B"))


def client_mode(led: Ledger, server_url: str) -> None:
    provider = make_provider("openrouter", api_key="sk-or-test", base_url=server_url)
    with Client(
        providers=[provider], ledger=led, strict=True, default_provider="openrouter"
    ) as client:
        stream = client.stream(
            [{"role": "user", "content": "Hi"}],
            model="openai/o3",
            session_id="s-killed",
            actor_id="reviewer",
        )
        next(iter(stream))
        print("ready", flush=True)
        time.sleep(600)


def main() -> None:
    url, journal_dir, mode = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    led = Ledger(url, journal_dir=journal_dir, segment_bytes=20_000, flush_interval_s=0.01)
    if mode == "client":
        client_mode(led, sys.argv[4])
    journal_mode(led)
    print("ready", flush=True)
    time.sleep(600)


if __name__ == "__main__":
    main()
