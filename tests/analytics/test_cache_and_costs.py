"""Cache-hit rates, calls, cost attribution and the scorecard on hand-built ledgers."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path

import pandas as pd
import pytest

from ledger.analytics import Filters
from tests.analytics.builders import (
    T0,
    failed,
    insert_rows,
    open_analytics,
    response_cache_row,
    served,
)

WRITER = {"actor_id": "writer", "session_id": "w1"}
ANTHROPIC = {
    "requested_provider": "anthropic",
    "provider": "anthropic",
    "requested_model": "claude-haiku-4-5",
    **WRITER,
}
OPENAI = {
    "requested_provider": "openai",
    "provider": "openai",
    "requested_model": "gpt-4o",
    **WRITER,
}


def cache_ledger() -> list[dict[str, object]]:
    return [
        # Anthropic reports input 100 + cache_creation 1200 (then 100 + read 1000 + creation
        # 200); normalised, input_tokens counts all of them.
        served(0, None, input_tokens=1300, cache_write_tokens=1200, **ANTHROPIC),
        served(
            1, None, input_tokens=1300, cache_read_tokens=1000, cache_write_tokens=200, **ANTHROPIC
        ),
        # OpenAI's prompt_tokens already include cached_tokens.
        served(0, None, input_tokens=2000, **OPENAI),
        served(1, None, input_tokens=2000, cache_read_tokens=1500, **OPENAI),
        served(2, None, input_tokens=2000, cache_read_tokens=1500, **OPENAI),
        response_cache_row(3, **OPENAI),  # a response-cache hit: counted apart
        failed(4, None, input_tokens=0, **OPENAI),  # failed attempts are in no hit rate
    ]


def test_token_and_call_hit_rates_for_both_accountings(ledger_url: str, tmp_path: Path) -> None:
    insert_rows(ledger_url, cache_ledger())
    with open_analytics(ledger_url, tmp_path) as analytics:
        hits = analytics.cache_hits().set_index("requested_model")
    claude, gpt = hits.loc["claude-haiku-4-5"], hits.loc["gpt-4o"]
    assert (claude.upstream, claude.calls, claude.input_tokens, claude.cache_read_tokens) == (
        "anthropic",
        2,
        2600,
        1000,
    )
    assert claude.token_hit_rate == pytest.approx(1000 / 2600)
    assert claude.call_hit_rate == 0.5
    assert claude.response_cache_hits == 0
    assert (gpt.upstream, gpt.calls, gpt.input_tokens, gpt.cache_read_tokens) == (
        "openai",
        3,
        6000,
        3000,
    )
    assert gpt.token_hit_rate == 0.5
    assert gpt.call_hit_rate == pytest.approx(2 / 3)
    assert gpt.response_cache_hits == 1
    assert not bool(gpt.key_sent)


def test_response_cache_hits_never_count_as_stickiness_calls(
    ledger_url: str, tmp_path: Path
) -> None:
    insert_rows(ledger_url, cache_ledger())
    with open_analytics(ledger_url, tmp_path) as analytics:
        sessions = analytics.session_stickiness().set_index("requested_model")
    assert sessions.loc["gpt-4o"].calls == 3
    assert sessions.loc["gpt-4o"].transitions == 2


def cost_ledger() -> list[dict[str, object]]:
    m2 = {"requested_model": "m2", "session_id": "c", "actor_id": "coder"}
    return [
        # call c1: OpenRouter upstream X fails, Anthropic answers (a fallback)
        failed(0, "X", call_id="c1", latency_ms=40.0, **m2),
        served(
            0.01,
            None,
            call_id="c1",
            attempt=2,
            provider="anthropic",
            input_tokens=1000,
            cost_usd=Decimal("0.003"),
            latency_ms=500.0,
            **m2,
        ),
        served(
            1,
            "X",
            call_id="c2",
            input_tokens=1000,
            cost_usd=Decimal("0.001"),
            latency_ms=100.0,
            **m2,
        ),
        served(
            2,
            "Y",
            call_id="c3",
            input_tokens=2000,
            cache_read_tokens=500,
            cost_usd=Decimal("0.002"),
            latency_ms=300.0,
            **m2,
        ),
        served(3, "Y", call_id="c4", input_tokens=1000, latency_ms=200.0, **m2),  # cost unknown
    ]


def test_calls_fold_attempts_and_mark_fallbacks(ledger_url: str, tmp_path: Path) -> None:
    insert_rows(ledger_url, cost_ledger())
    with open_analytics(ledger_url, tmp_path) as analytics:
        calls = analytics.calls().set_index("call_id")
    c1 = calls.loc["c1"]
    assert (c1.attempts, bool(c1.fell_back), c1.status, c1.responding_provider) == (
        2,
        True,
        "ok",
        "anthropic",
    )
    assert pd.isna(c1.upstream)
    assert c1.cost_usd == Decimal("0.003")
    assert c1.latency_ms == 540.0
    assert c1.started_at == pd.Timestamp("2025-03-01 09:00", tz="UTC")
    assert calls.loc["c2"].upstream == "X" and not bool(calls.loc["c2"].fell_back)
    assert pd.isna(calls.loc["c4"].cost_usd)  # unknown stays unknown, never 0


def test_cost_attribution_by_requested_and_responding_provider(
    ledger_url: str, tmp_path: Path
) -> None:
    insert_rows(ledger_url, cost_ledger())
    with open_analytics(ledger_url, tmp_path) as analytics:
        costs = analytics.cost_attribution().set_index("responding_provider")
    assert (costs.loc["anthropic"].calls, costs.loc["anthropic"].fallback_calls) == (1, 1)
    assert costs.loc["anthropic"].cost_usd == Decimal("0.003")
    assert (costs.loc["openrouter"].calls, costs.loc["openrouter"].fallback_calls) == (3, 0)
    assert costs.loc["openrouter"].cost_usd == Decimal("0.003")  # 0.001 + 0.002, c4 unknown
    assert isinstance(costs.loc["openrouter"].cost_usd, Decimal)
    assert set(costs.requested_provider) == {"openrouter"}


def test_upstream_scorecard(ledger_url: str, tmp_path: Path) -> None:
    insert_rows(ledger_url, cost_ledger())
    with open_analytics(ledger_url, tmp_path) as analytics:
        card = analytics.upstream_scorecard().set_index("upstream")
    x, y = card.loc["X"], card.loc["Y"]
    assert (x.attempts, x.error_rate, x.p50_latency_ms) == (2, 0.5, 100.0)
    assert x.cost_per_mtok_input == pytest.approx(1.0)  # $0.001 per 1000 tokens
    # Y: p50 of 200 and 300 is 250, p95 is 200 + 0.95 * 100; cost known for one row only
    assert (y.attempts, y.error_rate, y.p50_latency_ms) == (2, 0.0, 250.0)
    assert y.p95_latency_ms == pytest.approx(295.0)
    assert y.token_hit_rate == pytest.approx(500 / 3000)
    assert y.cost_per_mtok_input == pytest.approx(1.0)  # $0.002 per 2000 costed tokens
    # session c went to X, anthropic and Y: pinned to none of them
    assert set(card.sessions_pinned) == {0}


def unreported_ledger() -> list[dict[str, object]]:
    cost = Decimal("0.01")
    return [
        served(0, None, input_tokens=2000, cost_usd=cost, **OPENAI),
        served(1, None, input_tokens=2000, cache_read_tokens=1500, cost_usd=cost, **OPENAI),
        # Served, but the provider reported no usage (a stream without include_usage):
        # their 0s are not counts, so no rate may read them as misses.
        served(2, None, usage_reported=False, **OPENAI),
        served(3, None, usage_reported=False, **OPENAI),
        # Abandoned by the caller: partial usage and a partial cost, and no upstream error.
        failed(
            4,
            None,
            error_type="abandoned",
            http_status=200,
            usage_reported=False,
            input_tokens=2000,
            cost_usd=Decimal("0.002"),
            **OPENAI,
        ),
    ]


EVERY_ROW = Filters(start=T0 - dt.timedelta(days=1))  # the row-level views, not the stored


@pytest.mark.parametrize("filters", [None, EVERY_ROW], ids=["stored", "rows"])
def test_missing_usage_never_counts_as_zero_in_a_rate(
    ledger_url: str, tmp_path: Path, filters: Filters | None
) -> None:
    insert_rows(ledger_url, unreported_ledger())
    with open_analytics(ledger_url, tmp_path, min_samples=1) as analytics:
        hits = analytics.view("cache_hits", filters).iloc[0]
        card = analytics.view("upstream_scorecard", filters).iloc[0]
        keyless = analytics.view("keyless_hit_rates", filters).iloc[0]
        decay = analytics.view("cache_decay", filters).iloc[0]
        by_agent = analytics.cache_hits_by_agent(filters).iloc[0]
    assert (hits.calls, hits.reported_calls, hits.hit_calls) == (4, 2, 1)
    assert (hits.input_tokens, hits.cache_read_tokens) == (4000, 1500)
    assert hits.token_hit_rate == pytest.approx(1500 / 4000)
    assert hits.call_hit_rate == 0.5  # not 1 in 4
    assert by_agent.call_hit_rate == 0.5 and by_agent.reported_calls == 2
    # Five attempts, no upstream error: the abandoned one is the caller's doing.
    assert (card.attempts, card.errors, card.error_rate) == (5, 0, 0.0)
    assert card.token_hit_rate == pytest.approx(1500 / 4000)
    assert card.cost_per_mtok_input == pytest.approx(0.02 * 1e6 / 4000)
    assert keyless.hit_rate == pytest.approx(1500 / 4000)
    # Three transitions of 1 minute; only the first's later attempt reported its usage.
    assert (decay.calls, decay.input_tokens, decay.cache_read_tokens) == (3, 2000, 1500)
    assert decay.call_hit_rate == 1.0 and decay.token_hit_rate == pytest.approx(0.75)
