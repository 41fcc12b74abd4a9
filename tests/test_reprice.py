"""``reprice``: after a price change, exactly the computed costs change, nothing else."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

from sqlalchemy import select

from ledger.price_overrides import PriceBook, PriceOverride
from ledger.reprice import reprice
from ledger.schema import token_usage
from ledger.store.engine import make_engine
from tests.analytics.builders import insert_rows, row

# The real Mistral call (tests/fixtures/payloads/mistral_chat_cached_real.json):
# 268 prompt tokens, 224 of them cached, 5 completion tokens. genai-prices priced
# it at $2/M in and $6/M out, cached tokens at full input: $0.000566, incomplete.
MISTRAL = {
    "provider": "mistral",
    "requested_provider": "mistral",
    "model": "mistral-large-latest",
    "requested_model": "mistral-large-latest",
    "input_tokens": 268,
    "output_tokens": 5,
    "cache_read_tokens": 224,
    "cost_usd": Decimal("0.000566"),
    "cost_source": "incomplete",
}
LARGE_3 = PriceBook(
    (
        PriceOverride(
            provider="mistral",
            model="mistral-large-latest",
            effective_from=dt.date(2025, 1, 1),
            input=Decimal("0.5"),
            output=Decimal("1.5"),
            cache_read=Decimal("0.05"),
        ),
    )
)
SINCE = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)


def _costs(url: str) -> dict[str, tuple[Any, Any]]:
    engine = make_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(
            select(token_usage.c.event_id, token_usage.c.cost_usd, token_usage.c.cost_source)
        ).all()
    engine.dispose()
    return {r.event_id: (r.cost_usd, r.cost_source) for r in rows}


def test_an_override_changes_exactly_the_computed_rows_and_a_rerun_changes_nothing(
    ledger_url: str,
) -> None:
    rows = [
        row(0, **MISTRAL),
        row(1, **MISTRAL),
        # The provider reported this one's cost: never recomputed.
        row(2, **{**MISTRAL, "cost_usd": Decimal("0.0009"), "cost_source": "provider"}),
        # Another model, priced by genai-prices as today: unchanged, so not reported.
        row(
            3,
            provider="openai",
            model="gpt-4o-2024-08-06",
            input_tokens=1000,
            output_tokens=100,
            cost_usd=Decimal("0.0035"),
            cost_source="computed",
        ),
        # Unknown cost but usage reported: the override prices it now.
        row(4, **{**MISTRAL, "cost_usd": None, "cost_source": None}),
        # A failed attempt of unknown cost with no usage: nothing to price.
        row(
            5,
            **{
                **MISTRAL,
                "cost_usd": None,
                "cost_source": None,
                "status": "error",
                "error_type": "server_error",
                "input_tokens": 0,
                "output_tokens": 0,
                "cache_read_tokens": 0,
            },
        ),
    ]
    insert_rows(ledger_url, rows)
    before = _costs(ledger_url)
    engine = make_engine(ledger_url)
    try:
        report = reprice(engine, LARGE_3, since=SINCE)
        # 44 x $0.50 + 224 x $0.05 + 5 x $1.50 = $0.0000407 per call.
        hand = Decimal("0.0000407000")
        assert sorted(c.event_id for c in report.changes) == sorted(
            [rows[0]["event_id"], rows[1]["event_id"], rows[4]["event_id"]]
        )
        assert {(c.new_usd, c.new_source) for c in report.changes} == {(hand, "computed")}
        assert report.delta_usd == 2 * (hand - Decimal("0.000566")) + hand
        after = _costs(ledger_url)
        for changed in (0, 1, 4):
            assert after[rows[changed]["event_id"]] == (hand, "computed")
        for kept in (2, 3, 5):
            assert after[rows[kept]["event_id"]] == before[rows[kept]["event_id"]]
        again = reprice(engine, LARGE_3, since=SINCE)
        assert again.changes == () and again.examined == 4  # rows 0, 1, 3, 4
    finally:
        engine.dispose()


def test_a_dry_run_reports_and_writes_nothing(sqlite_url: str) -> None:
    rows = [row(0, **MISTRAL)]
    insert_rows(sqlite_url, rows)
    engine = make_engine(sqlite_url)
    try:
        report = reprice(engine, LARGE_3, since=SINCE, write=False)
    finally:
        engine.dispose()
    assert len(report.changes) == 1 and not report.written
    assert _costs(sqlite_url)[rows[0]["event_id"]] == (Decimal("0.0005660000"), "incomplete")


def test_rows_before_since_are_left_alone(sqlite_url: str) -> None:
    rows = [row(0, **MISTRAL)]
    insert_rows(sqlite_url, rows)
    engine = make_engine(sqlite_url)
    try:
        report = reprice(engine, LARGE_3, since=rows[0]["started_at"] + dt.timedelta(seconds=1))
    finally:
        engine.dispose()
    assert report.examined == 0 and report.changes == ()


def test_audio_and_one_hour_writes_are_repriced_from_usage_details(sqlite_url: str) -> None:
    gemini = {
        "provider": "gemini",
        "requested_provider": "gemini",
        "model": "gemini-2.5-flash",
        "requested_model": "gemini-2.5-flash",
        "input_tokens": 17713,
        "output_tokens": 889,
        "cache_read_tokens": 17379,
        "reasoning_tokens": 821,
        "usage_details": {
            "input": {"text": 16, "video": 15780, "audio": 1917},
            "cache_read": {"audio": 1881, "text": 15, "video": 15483},
        },
        # What the row said before audio was priced: all at text rates.
        "cost_usd": Decimal("0.00284407"),
        "cost_source": "computed",
    }
    rows = [row(0, **gemini)]
    insert_rows(sqlite_url, rows)
    engine = make_engine(sqlite_url)
    try:
        (change,) = reprice(engine, PriceBook(), since=SINCE).changes
    finally:
        engine.dispose()
    # tests/test_pricing.py: 298 x 0.30 + 36 x 1.00 + 15498 x 0.03 + 1881 x 0.10 + 889 x 2.50.
    assert (change.new_usd, change.new_source) == (Decimal("0.0030009400"), "computed")
