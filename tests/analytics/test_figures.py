"""The figures the dashboard and the demo show, computed by the analytics layer.

Hand-built ledgers, answers worked out on paper; the same on SQLite and
PostgreSQL. List prices (genai-prices): gpt-4o-mini input $0.15/M, cache
reads $0.075/M; claude-haiku-4-5 input $1/M, cache reads $0.10/M.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path

import pandas as pd
import pytest

from ledger.analytics import Filters
from tests.analytics.builders import (
    T0,
    edit_copy,
    failed,
    insert_rows,
    open_analytics,
    response_cache_row,
)
from tests.analytics.builders import served as _served


def served(minute: float, upstream: str | None = None, **values: object) -> dict[str, object]:
    return _served(minute, upstream, **values)


OPENAI = {"requested_provider": "openai", "provider": "openai", "requested_model": "gpt-4o-mini"}


def savings_ledger() -> list[dict[str, object]]:
    return [
        # gpt-4o-mini: two priced served calls ($0.002, $0.004), one unpriced, three cache hits
        served(0, cost_usd=Decimal("0.002"), model="gpt-4o-mini", input_tokens=2_000_000,
               cache_read_tokens=1_000_000, **OPENAI),
        served(1, cost_usd=Decimal("0.004"), **OPENAI),
        served(2, **OPENAI),
        *[response_cache_row(3 + i, **OPENAI) for i in range(3)],
        # a Claude fallback that read 500k tokens from Anthropic's cache
        served(4, provider="anthropic", model="claude-haiku-4-5-20251001",
               requested_provider="openai", requested_model="gpt-4o-mini",
               input_tokens=600_000, cache_read_tokens=500_000),
        # a model nobody priced: its hits and cache reads stay unpriced
        served(5, requested_model="mystery/model", model="mystery/model", input_tokens=10,
               cache_read_tokens=7),
        response_cache_row(6, requested_model="mystery/model"),
    ]  # fmt: skip


def test_what_the_caches_saved(ledger_url: str, tmp_path: Path) -> None:
    insert_rows(ledger_url, savings_ledger())
    with open_analytics(ledger_url, tmp_path) as analytics:
        prompt = analytics.prompt_cache_saving()
        response = analytics.response_cache_saving()
    # 1M gpt-4o-mini reads save $0.075; 500k Claude reads save $0.45
    assert prompt.usd == Decimal("0.525") and prompt.unpriced == 7
    # 3 hits x the mean priced served call ($0.003); the mystery model's hit is unpriced
    assert response.usd == Decimal("0.009") and response.unpriced == 1


def test_overview_totals_and_timeline(ledger_url: str, tmp_path: Path) -> None:
    call = {"call_id": "c0000000-0000-4000-8000-000000000001"}
    rows = [
        failed(0, None, attempt=1, **call, **OPENAI),
        served(0.5, None, attempt=2, cost_usd=Decimal("0.01"), **call,
               **{**OPENAI, "provider": "anthropic"}),
        served(30, cost_usd=Decimal("0.02"), **OPENAI),
        response_cache_row(31, **OPENAI),
        failed(90, None, **OPENAI),
    ]  # fmt: skip
    insert_rows(ledger_url, rows)
    with open_analytics(ledger_url, tmp_path) as analytics:
        totals = analytics.overview_totals()
        hourly = analytics.timeline(Filters(), dt.timedelta(hours=1))
        late = analytics.overview_totals(Filters(start=T0 + dt.timedelta(minutes=20)))
    assert {k: totals[k] for k in totals if k not in ("first_at", "last_at")} == {
        "calls": 4,
        "provider_calls": 3,
        "spend_usd": Decimal("0.03"),
        "unpriced_calls": 1,
        "fallback_calls": 1,
        "failed_calls": 1,
        "response_cache_hits": 1,
        "attempts": 4,
        "failed_attempts": 2,
    }
    assert totals["last_at"] - totals["first_at"] == dt.timedelta(minutes=90)
    assert hourly[["calls", "attempts", "failed_attempts"]].values.tolist() == [
        [3, 3, 1],
        [1, 1, 1],
    ]
    assert (late["calls"], late["attempts"]) == (3, 2)


def test_cache_decay_buckets_follow_the_idle_window_setting(
    ledger_url: str, tmp_path: Path
) -> None:
    s = {"session_id": "s", "actor_id": "a", "input_tokens": 100}
    rows = [
        served(0, "A", **s),
        served(0.5, "A", cache_read_tokens=90, **s),  # 30 s gap
        served(7.5, "A", cache_read_tokens=50, **s),  # 7 min gap
        served(27.5, "A", **s),  # 20 min gap
    ]
    insert_rows(ledger_url, rows)
    with open_analytics(ledger_url, tmp_path) as analytics:
        default = analytics.cache_decay_by_key().set_index("idle_gap")
        analytics.configure(analytics.settings.__class__(idle_window_s=300))
        short = analytics.cache_decay_by_key().set_index("idle_gap")
    assert list(default.index) == ["≤ 1 min", "5 min – 10 min", "10 min – 30 min"]
    assert list(default.within_window) == [True, True, False]
    assert default.token_hit_rate.tolist() == [0.9, 0.5, 0.0]
    # a 5-minute window: the 7-minute gap now lies beyond it
    assert list(short.index) == ["≤ 1 min", "5 min – 30 min"]
    assert list(short.within_window) == [True, False]
    assert short.loc["5 min – 30 min", "calls"] == 2


@pytest.mark.parametrize("idle_window_s", [600.0, 100.5, 100.0, 90_000.0, 86_400.0])
def test_cache_decay_from_the_stored_sums_equals_the_rows_whatever_the_window(
    ledger_url: str, tmp_path: Path, idle_window_s: float
) -> None:
    """The stored decay keeps whole seconds of gap, one bucket beyond a day: a window
    inside a second (100.5 s) or beyond a day must still split the gaps it lies between."""
    rows = []
    gaps_s = (100.25, 100.75, 1_000, 86_399.5, 87_000, 200_000)
    for n, gap_s in enumerate(gaps_s):
        who = {"session_id": f"s{n}", "actor_id": "a", "session_key": "k" if n % 2 else None}
        rows += [
            served(0, "A", input_tokens=100, cache_read_tokens=0, **who),
            served(gap_s / 60, "A" if n % 3 else "B", input_tokens=100, cache_read_tokens=n * 10,
                   **who),
        ]  # fmt: skip
    insert_rows(ledger_url, rows)
    with open_analytics(ledger_url, tmp_path, idle_window_s=idle_window_s) as analytics:
        everything = Filters(models=["m"])  # a filter: computed from the rows
        for stored, computed in (
            (analytics.cache_decay_by_key(), analytics.cache_decay_by_key(everything)),
            (analytics.cache_decay(), analytics.cache_decay(everything)),
        ):
            pd.testing.assert_frame_equal(stored, computed)
            assert int(stored.calls.sum()) == len(gaps_s)
    by_gap = stored.set_index("idle_gap")
    assert by_gap.loc["30+ min", "calls"] == 3  # the gaps beyond 1,800 s


def test_cache_hits_by_agent_keeps_the_hit_calls(ledger_url: str, tmp_path: Path) -> None:
    s = {"actor_id": "a", "input_tokens": 100}
    rows = [served(0, "A", cache_read_tokens=10, **s), served(1, "B", **s), served(2, "B", **s)]
    insert_rows(ledger_url, [*rows, served(3, "A", cache_read_tokens=5, **s)])
    with open_analytics(ledger_url, tmp_path) as analytics:
        row = analytics.cache_hits_by_agent().iloc[0]
    assert (row.calls, row.hit_calls, row.call_hit_rate) == (4, 2, 0.5)


def test_costs_fallbacks_failures_and_sessions(ledger_url: str, tmp_path: Path) -> None:
    s = {"session_id": "s", "actor_id": "a"}
    call = {"call_id": "c0000000-0000-4000-8000-000000000002", **s}
    rows = [
        failed(0, "A", attempt=1, cost_usd=Decimal("0.001"), **call),
        served(0.1, "B", attempt=2, cost_usd=Decimal("0.002"), **call),
        served(1, "A", cost_usd=Decimal("0.004"), **s),
        served(30, "B", cost_usd=Decimal("0.008"), actor_id="z"),
    ]
    insert_rows(ledger_url, rows)
    with open_analytics(ledger_url, tmp_path) as analytics:
        by_agent = analytics.cost_by_agent()
        fallbacks = analytics.fallback_cost()
        failures = analytics.failed_attempts()
        top = analytics.top_sessions(limit=5)
        attempts = analytics.session_attempts(None, "s", "a", "m")
        moves = analytics.session_moves(None, "s", "a", "m")
    assert by_agent[["actor_id", "calls", "cost_usd", "fallback_calls"]].values.tolist() == [
        ["z", 1, Decimal("0.008"), 0],
        ["a", 2, Decimal("0.007"), 1],
    ]
    one = fallbacks.iloc[0]
    assert (one.fallback_calls, one.cost_usd, one.failed_attempts) == (1, Decimal("0.003"), 1)
    assert one.failed_attempts_cost_usd == Decimal("0.001")
    assert failures[["attempts", "error_type"]].values.tolist() == [[1, "server_error"]]
    assert top.session_id.tolist() == ["s"] and top.switches[0] == 1
    assert attempts.status.tolist() == ["error", "ok", "ok"]
    assert moves[["previous_upstream", "upstream", "move"]].values.tolist() == [
        ["B", "A", "switch"]
    ]


def test_unfiltered_figures_read_the_stored_aggregates(ledger_url: str, tmp_path: Path) -> None:
    s = {"session_id": "s", "actor_id": "a", "cost_usd": Decimal("0.001")}
    # calls of two attempts each: a call of one row is read from its row (sql/stored/calls.sql)
    rows = []
    for minute, upstream in ((0, "A"), (1, "B"), (2, "A")):
        call = {"call_id": f"call-{minute}", **s}
        rows += [
            failed(minute, upstream, **call),
            served(minute + 0.1, upstream, attempt=2, **call),
        ]
    insert_rows(ledger_url, rows)
    everything = Filters(start=T0 - dt.timedelta(days=1))  # a filter that keeps every row
    with open_analytics(ledger_url, tmp_path) as analytics:
        # edit the copy's rows behind the aggregates' back: only a read of rows sees it
        edit_copy(analytics, "DELETE FROM token_usage WHERE upstream = 'B'")
        stored = [
            analytics.cost_by_agent(),
            analytics.top_sessions(),
            analytics.cache_decay_by_key(),
        ]
        from_rows = [
            analytics.cost_by_agent(everything),
            analytics.top_sessions(everything),
            analytics.cache_decay_by_key(everything),
        ]
    assert [int(f.calls.sum()) for f in stored] == [3, 3, 2]
    assert [int(f.calls.sum()) for f in from_rows] == [2, 2, 1]
    assert isinstance(stored[0], pd.DataFrame)


@pytest.mark.parametrize("limit", [1])
def test_top_sessions_takes_its_limit_as_a_parameter(
    ledger_url: str, tmp_path: Path, limit: int
) -> None:
    rows = [served(i, "A", session_id=f"s{i % 3}", actor_id="a") for i in range(9)]
    insert_rows(ledger_url, rows)
    with open_analytics(ledger_url, tmp_path) as analytics:
        assert len(analytics.top_sessions(limit=limit)) == limit
        assert len(analytics.top_sessions(Filters(actors=["a"]), limit=limit)) == limit


def test_spend_over_time_by_model_and_by_agent(ledger_url: str, tmp_path: Path) -> None:
    claude = {"requested_provider": "openrouter", "provider": "openrouter",
              "requested_model": "anthropic/claude-sonnet-4.5"}  # fmt: skip
    rows = [
        served(0, cost_usd=Decimal("0.01"), actor_id="planner", **OPENAI),
        served(10, cost_usd=Decimal("0.02"), actor_id="coder", **OPENAI),
        served(20, "Anthropic", cost_usd=Decimal("0.10"), actor_id="planner", **claude),
        served(70, "Anthropic", cost_usd=Decimal("0.30"), **claude),  # no agent
        failed(75, None, **OPENAI),  # a call of unknown cost
    ]
    insert_rows(ledger_url, rows)
    hour = dt.timedelta(hours=1)
    with open_analytics(ledger_url, tmp_path) as analytics:
        by_model = analytics.spend_over_time(Filters(), hour)
        by_agent = analytics.spend_over_time(Filters(), hour, "actor_id")
        later = analytics.spend_over_time(Filters(start=T0 + dt.timedelta(minutes=60)), hour)
        with pytest.raises(ValueError, match="by must be one of"):
            analytics.spend_over_time(Filters(), hour, "provider; DROP TABLE x")
    start = pd.Timestamp(T0)
    assert [
        (row.bucket - start, row.requested_model, row.calls, row.spend_usd)
        for row in by_model.itertuples()
    ] == [
        (pd.Timedelta(0), "anthropic/claude-sonnet-4.5", 1, Decimal("0.1")),
        (pd.Timedelta(0), "gpt-4o-mini", 2, Decimal("0.03")),
        (pd.Timedelta(hours=1), "anthropic/claude-sonnet-4.5", 1, Decimal("0.3")),
        (pd.Timedelta(hours=1), "gpt-4o-mini", 1, None),
    ]
    assert by_agent.groupby("actor_id")["spend_usd"].apply(
        lambda v: sum((x for x in v if x is not None), Decimal(0))
    ).to_dict() == {
        "(no agent)": Decimal("0.3"),
        "coder": Decimal("0.02"),
        "planner": Decimal("0.11"),
    }
    assert sorted(later["requested_model"]) == ["anthropic/claude-sonnet-4.5", "gpt-4o-mini"]
