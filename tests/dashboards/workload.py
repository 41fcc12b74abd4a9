"""A small, deterministic multi-agent ledger for the dashboard tests, recorded with the real Ledger.

Three agents on OpenRouter (half their sessions keyed, half not), a direct
OpenAI chain that falls back to Anthropic on 429s, response-cache hits,
an idle pause longer than the pin window, a failed call and one attempt of
unknown cost: every kind of row a page draws.
"""

from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal
from pathlib import Path

from ledger.events import UsageEvent, new_id
from ledger.store.ledger import Ledger

T0 = dt.datetime(2025, 6, 2, 9, 0, tzinfo=dt.UTC)
AGENTS = ("planner", "coder", "reviewer")
OR_MODEL = "meta-llama/llama-3.3-70b-instruct"
UPSTREAMS = ("Together", "Fireworks", "DeepInfra", "Lambda")
GPT = "gpt-4o-mini"
CLAUDE = "claude-haiku-4-5-20251001"


def _openrouter_session(
    rng: random.Random, agent: str, number: int, keyed: bool, start: dt.datetime
) -> list[UsageEvent]:
    session = f"task-{agent}-{number}"
    pinned = rng.choice(UPSTREAMS)
    events = []
    at = start
    for turn in range(8):
        # a 15-minute pause in every fourth session: the pin expires (idle release)
        at += dt.timedelta(minutes=15 if (turn == 4 and number % 4 == 0) else 0.5)
        upstream = pinned if keyed and rng.random() > 0.1 else rng.choice(UPSTREAMS)
        if keyed:
            pinned = upstream
        prompt = 2_000 + 400 * turn
        reads = int(prompt * (0.8 if keyed and turn else rng.choice((0.0, 0.3))))
        events.append(
            UsageEvent(
                started_at=at,
                requested_provider="openrouter",
                requested_model=OR_MODEL,
                provider="openrouter",
                status="ok",
                model=OR_MODEL,
                upstream=upstream,
                session_id=session,
                actor_id=agent,
                session_key=f"app:{session}:{agent}" if keyed else None,
                latency_ms=300.0 + 40 * turn,
                input_tokens=prompt,
                output_tokens=150,
                cache_read_tokens=reads,
                cost_usd=Decimal(prompt - reads) * Decimal("0.00000023")
                + Decimal(reads) * Decimal("0.00000005"),
                cost_source="provider",
            )
        )
    return events


def _direct_call(rng: random.Random, at: dt.datetime, n: int) -> list[UsageEvent]:
    """gpt-4o-mini, falling back to Claude on a 429 every fifth call; every seventh from cache."""
    call = new_id()
    common = {
        "call_id": call,
        "requested_provider": "openai",
        "requested_model": GPT,
        "session_id": f"chat-{n // 4}",
        "actor_id": "support",
    }
    if n % 7 == 3:
        return [
            UsageEvent(
                started_at=at,
                attempt=0,
                provider="openai",
                status="ok",
                response_cache_hit=True,
                **common,
            )
        ]
    events = []
    if n % 5 == 0:
        events.append(
            UsageEvent(
                started_at=at,
                attempt=1,
                provider="openai",
                status="error",
                error_type="rate_limited",
                http_status=429,
                latency_ms=80.0,
                **common,
            )
        )
        provider, model, attempt = "anthropic", CLAUDE, 2
        at += dt.timedelta(seconds=1)
    else:
        provider, model, attempt = "openai", GPT, 1
    prompt = 1_200 + rng.randrange(400)
    events.append(
        UsageEvent(
            started_at=at,
            attempt=attempt,
            provider=provider,
            model=model,
            status="ok",
            latency_ms=700.0,
            input_tokens=prompt,
            output_tokens=90,
            cache_read_tokens=prompt // 2,
            cost_usd=None if n == 11 else Decimal(prompt) * Decimal("0.00000015"),
            cost_source=None if n == 11 else "computed",
            **common,
        )
    )
    return events


def workload_events(seed: int = 7) -> list[UsageEvent]:
    rng = random.Random(seed)
    events: list[UsageEvent] = []
    for a, agent in enumerate(AGENTS):
        for number in range(6):
            start = T0 + dt.timedelta(minutes=20 * number + 3 * a)
            events += _openrouter_session(rng, agent, number, number % 2 == 0, start)
    for n in range(30):
        events += _direct_call(rng, T0 + dt.timedelta(minutes=4 * n), n)
    # a call whose every attempt failed (no spend known)
    failed = new_id()
    events.append(
        UsageEvent(
            started_at=T0 + dt.timedelta(hours=2),
            call_id=failed,
            requested_provider="openai",
            requested_model=GPT,
            provider="openai",
            status="error",
            error_type="server_error",
            http_status=503,
            actor_id="support",
            session_id="chat-99",
        )
    )
    return events


def record_workload(url: str, tmp: Path, seed: int = 7) -> int:
    """Record the workload into the migrated ledger at ``url``; returns the row count."""
    events = workload_events(seed)
    with Ledger(url, journal_dir=tmp / "journal") as led:
        for event in events:
            led.record(event)
        assert led.flush(30), "the ledger did not commit the workload"
    return len(events)


#: Names carrying bidi formatting: shown escaped, never reordering a page.
BIDI_UPSTREAM = "\u202eAmazon Bedrock"
BIDI_AGENT = "\u2067planner\u2069-rtl"
BIDI_MODEL = "\u202dmodel\u202c"


def record_bidi_rows(
    url: str, journal: Path, *, at: dt.datetime, every_session_keyed: bool = True
) -> None:
    """Six served OpenRouter calls in two sessions, whose agent, model and upstream
    carry bidi formatting (``every_session_keyed`` False: the second session sends no
    sticky key)."""
    with Ledger(url, journal_dir=journal) as ledger:
        for n in range(6):
            ledger.record(
                UsageEvent(
                    started_at=at + dt.timedelta(seconds=30 * n),
                    requested_provider="openrouter",
                    requested_model=BIDI_MODEL,
                    provider="openrouter",
                    upstream=BIDI_UPSTREAM,
                    status="ok",
                    session_id=f"s-bidi-{n % 2}",
                    actor_id=BIDI_AGENT,
                    session_key="k" if every_session_keyed or n % 2 else None,
                    latency_ms=400.0,
                    input_tokens=1_000,
                    cache_read_tokens=200 * n,
                    output_tokens=20,
                    cost_usd=Decimal("0.002"),
                    cost_source="provider",
                )
            )
        assert ledger.flush(30)
