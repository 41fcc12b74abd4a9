"""The pure helpers: money and rate formatting, timeline buckets, filter time ranges."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pandas as pd

from dashboards import fmt, summary
from dashboards.filters import day_range, relative_start
from dashboards.summary import MAX_BUCKETS, bucket_for


def test_money_is_usd_with_cents_or_four_decimals_and_unknown_stays_unknown() -> None:
    assert fmt.money(Decimal("1234.5")) == "$1,234.50"
    assert fmt.money(Decimal("0.00123")) == "$0.0012"
    assert fmt.money(None) == "unknown"
    assert fmt.money(float("nan")) == "unknown"
    assert fmt.dollars(Decimal("0.4766")) == "$0.48"  # amounts: 2 decimals
    assert fmt.dollars(Decimal("-1234.5")) == "-$1,234.50"
    assert fmt.dollars(None) == "unknown"


def test_rates_are_percentages_and_undefined_is_a_dash() -> None:
    assert fmt.rate(0.4567) == "45.7%"
    assert fmt.rate(None) == "–"


def test_unknown_costs_are_left_out_of_a_sum_and_all_unknown_is_none() -> None:
    assert summary.total_usd(pd.Series([Decimal("0.5"), None, Decimal("0.25")])) == Decimal("0.75")
    assert summary.total_usd(pd.Series([None, None], dtype=object)) is None


def test_stickiness_by_key_uses_summed_counts_not_mean_of_rates() -> None:
    frame = pd.DataFrame(
        {
            "requested_model": ["m"] * 3,
            "key_sent": [True, True, False],
            "switches": [0, 3, 1],
            "window_transitions": [1, 9, 0],
        }
    )
    assert summary.stickiness_by_key(frame) == {True: 0.7, False: None}


def test_without_the_key_means_the_models_the_key_applies_to() -> None:
    # a directly served model never gets the key, and its sessions are sticky by
    # construction: counted as "no key" they made the key look worth less (96.8% vs
    # 91.4% in the demo, where OpenRouter without the key was 87.4%)
    frame = pd.DataFrame(
        {
            "requested_model": ["qwen/qwen3-coder", "qwen/qwen3-coder", "gpt-4o-mini"],
            "key_sent": [True, False, False],
            "sessions": [10, 10, 50],
            "switches": [1, 4, 0],
            "window_transitions": [20, 20, 100],
        }
    )
    assert summary.stickiness_by_key(frame) == {True: 0.95, False: 0.8}
    assert summary.sessions_by_key(frame) == {True: 10, False: 10}
    keyless = frame[~frame["key_sent"]]  # no key anywhere: nothing to restrict to
    assert summary.sessions_by_key(keyless) == {True: 0, False: 60}


def test_call_hit_rates_divide_by_the_attempts_whose_usage_was_reported() -> None:
    # Two served attempts per upstream, one of them without reported usage: its 0
    # cache reads are not a miss.
    hits = pd.DataFrame(
        {
            "upstream": ["A", "A"],
            "key_sent": [True, False],
            "calls": [2, 2],
            "reported_calls": [1, 2],
            "input_tokens": [100, 200],
            "cache_read_tokens": [50, 100],
            "hit_calls": [1, 1],
            "response_cache_hits": [0, 0],
        }
    )
    assert summary.by_upstream(hits)["call_hit_rate"].tolist() == [1.0, 0.5]
    assert summary.call_hit_rate(hits) == 2 / 3


def test_timeline_buckets_keep_the_bar_count_bounded() -> None:
    assert bucket_for(dt.timedelta(hours=2)) == dt.timedelta(minutes=1)
    assert bucket_for(dt.timedelta(days=3)) == dt.timedelta(hours=1)
    for days in (1, 10, 100, 5000):
        span = dt.timedelta(days=days)
        assert span / bucket_for(span) <= MAX_BUCKETS or bucket_for(span) == dt.timedelta(days=7)
    assert fmt.duration(dt.timedelta(minutes=15)) == "15 min"
    assert fmt.duration(dt.timedelta(days=7)) == "7 days"


def test_relative_ranges_start_on_a_whole_minute_so_cache_keys_repeat() -> None:
    now = dt.datetime(2025, 6, 2, 9, 41, 27, 500, tzinfo=dt.UTC)
    assert relative_start(now, dt.timedelta(hours=1)) == dt.datetime(
        2025, 6, 2, 8, 41, tzinfo=dt.UTC
    )


def test_custom_dates_cover_whole_utc_days_both_included() -> None:
    start, end = day_range(dt.date(2025, 6, 2), dt.date(2025, 6, 3))
    assert start == dt.datetime(2025, 6, 2, tzinfo=dt.UTC)
    assert end == dt.datetime(2025, 6, 4, tzinfo=dt.UTC)


def test_plain_makes_ledger_text_a_code_span_however_many_backticks() -> None:
    from dashboards.fmt import plain

    assert plain("[x](http://e.invalid)") == "` [x](http://e.invalid) `"
    assert plain("a`b``c") == "``` a`b``c ```"  # the fence outruns every run inside
    assert plain("m\x1b[2J\nx") == "` m\\x1b[2J x `"  # control characters shown, one line


def test_relative_ranges_end_at_the_latest_row_when_it_is_older_than_now() -> None:
    from dashboards.filters import range_end

    now = dt.datetime(2026, 1, 2, 12, 0, 30, tzinfo=dt.UTC)
    old = dt.datetime(2025, 11, 3, 18, 54, 31, tzinfo=dt.UTC)
    assert range_end(now, old) == dt.datetime(2025, 11, 3, 18, 55, tzinfo=dt.UTC)
    assert range_end(now, None) == now
    assert range_end(now, now + dt.timedelta(seconds=5)) == now


def test_upstream_labels_tell_a_direct_provider_from_an_openrouter_upstream() -> None:
    from dashboards.charts import upstream_label

    assert upstream_label("anthropic") == "anthropic (direct)"
    assert upstream_label("Anthropic") == "Anthropic (via OpenRouter)"
