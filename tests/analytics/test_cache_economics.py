"""``cache_economics`` and ``cache_ttl_advice`` on ledgers whose answers are worked out here.

Four agents, each the case a team meets: turns 6-9 minutes apart on 5-minute writes
(every write expires unread; 1-hour writes win), turns 30 seconds apart on a growing
conversation (5-minute writes are right), a prefix that changes every turn (nothing
written is ever read: caching off is cheaper) and OpenAI (no write premium: no advice).
Sonnet 4.5's list prices, per million tokens: input $3, cache read $0.30, 5-minute
write $3.75, 1-hour write $6 (1.25x and 2x input, a read 0.1x).
"""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from ledger.analytics import Filters
from tests.analytics.builders import insert_rows, open_analytics, served

SONNET = "claude-sonnet-4-5-20250929"
IN, READ, W5, W1H = 3.0, 0.3, 3.75, 6.0
P = 10_000  # the cached prefix of the hourly and the churning agent's turns
Z = 1.96
SESSION_TURNS = (5, 6, 7, 6)  # sessions of unequal length, so the intervals are not points


def _anthropic(minute: float, **values: Any) -> dict[str, Any]:
    direct = {"requested_provider": "anthropic", "provider": "anthropic"}
    return served(minute, None, requested_model=SONNET, **direct, **values)


def hourly_agent() -> list[dict[str, Any]]:
    """Gaps of 6, 7, 8, 9 minutes on 5-minute writes: every turn writes the whole prefix."""
    rows = []
    for s in range(24):
        minute = 120.0 * s
        for turn in range(SESSION_TURNS[s % 4]):
            minute += 0 if turn == 0 else 6 + turn % 4
            rows.append(_anthropic(minute, session_id=f"h{s}", actor_id="hourly",
                                   input_tokens=P + 200, cache_write_tokens=P))  # fmt: skip
    return rows


def chatty_agent() -> list[dict[str, Any]]:
    """Turns 30 s apart, each reading the previous prompt and writing 1,000 new tokens."""
    rows = []
    for s in range(24):
        minute = 120.0 * s + 3
        for turn in range(SESSION_TURNS[s % 4]):
            prefix = P + 1000 * turn
            read = 0 if turn == 0 else prefix - 1000
            rows.append(_anthropic(minute, session_id=f"c{s}", actor_id="chatty",
                                   input_tokens=prefix + 200, cache_read_tokens=read,
                                   cache_write_tokens=prefix - read))  # fmt: skip
            minute += 0.5
    return rows


def churning_agent() -> list[dict[str, Any]]:
    """30 s apart, but a timestamp heads the prompt: each turn writes, none ever reads."""
    rows = []
    for s in range(24):
        minute = 120.0 * s + 7
        for _ in range(SESSION_TURNS[s % 4]):
            rows.append(_anthropic(minute, session_id=f"x{s}", actor_id="churning",
                                   input_tokens=P + 200, cache_write_tokens=P))  # fmt: skip
            minute += 0.5
    return rows


def openai_agent() -> list[dict[str, Any]]:
    rows = []
    for s in range(24):
        minute = 120.0 * s + 11
        for turn in range(SESSION_TURNS[s % 4]):
            rows.append(served(minute + turn, None, requested_provider="openai", provider="openai",
                               requested_model="gpt-4o-mini", session_id=f"o{s}",
                               actor_id="openai", input_tokens=P + 200,
                               cache_read_tokens=0 if turn == 0 else P))  # fmt: skip
    return rows


def via_openrouter() -> list[dict[str, Any]]:
    """Two 1-hour writes through OpenRouter: the first read 20 minutes later, the second never."""
    details = {"cache_write": {"ttl_1h": P}}
    who = {
        "session_id": "r1",
        "actor_id": "router",
        "requested_model": "anthropic/claude-sonnet-4.5",
    }
    return [
        served(5, "Anthropic", input_tokens=P, cache_write_tokens=P, usage_details=details, **who),
        served(25, "Anthropic", input_tokens=2 * P, cache_read_tokens=P, cache_write_tokens=P,
               usage_details=details, **who),
    ]  # fmt: skip


ALL = (hourly_agent, chatty_agent, churning_agent, openai_agent, via_openrouter)


@pytest.fixture
def ledger(ledger_url: str) -> tuple[str, list[dict[str, Any]]]:
    rows = [r for build in ALL for r in build()]
    insert_rows(ledger_url, rows)
    return ledger_url, rows


def _sessions(rows: list[dict[str, Any]], actor: str) -> list[list[dict[str, Any]]]:
    by: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if r["actor_id"] == actor:
            by.setdefault(r["session_id"], []).append(r)
    return [sorted(s, key=lambda r: r["started_at"]) for s in by.values()]


def _monthly(per_session: list[tuple[int, float]], calls_per_day: float) -> tuple[float, ...]:
    """(mean, low, high) per 30 days of a per-turn cost in USD per Mtok, clustered by session."""
    n, turns = len(per_session), sum(k for k, _ in per_session)
    r = sum(x for _, x in per_session) / turns
    ss = sum((x - r * k) ** 2 for k, x in per_session)
    half = Z * math.sqrt(n / (n - 1) * ss) / turns
    scale = calls_per_day * 30 / 1e6
    return r * scale, (r - half) * scale, (r + half) * scale


def _calls_per_day(rows: list[dict[str, Any]], actor: str) -> float:
    span = max(r["started_at"] for r in rows) - min(r["started_at"] for r in rows)
    span_days = span / dt.timedelta(days=1)
    return sum(r["actor_id"] == actor for r in rows) / span_days


def _advice(url: str, tmp_path: Path) -> dict[str, Any]:
    with open_analytics(url, tmp_path, min_samples=20) as analytics:
        frame = analytics.view("cache_ttl_advice")
        filtered = analytics.view("cache_ttl_advice", Filters(actors=["hourly"]))
    assert filtered.to_dict("records") == frame[frame.actor_id == "hourly"].to_dict("records")
    return {r["actor_id"]: r for r in frame.to_dict("records")}


def test_six_to_nine_minute_gaps_switch_to_one_hour_writes(
    ledger: tuple[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    url, rows = ledger
    advice = _advice(url, tmp_path)["hourly"]
    # every 5-minute write expires unread; an hour keeps the prefix for the whole session:
    # a session of k turns costs P*W5*k on 5 minutes, P*(W1H + READ*(k-1)) on an hour
    sessions = _sessions(rows, "hourly")
    effect = [(len(s), P * (W1H + READ * (len(s) - 1)) - P * W5 * len(s)) for s in sessions]
    mean, low, high = _monthly(effect, _calls_per_day(rows, "hourly"))
    assert (advice["current_ttl"], advice["best_ttl"], advice["verdict"]) == ("5m", "1h", "switch")
    assert advice["reuse_observed"] is False and advice["prefix_reuse"] == 1.0
    assert advice["monthly_effect_usd"] == pytest.approx(mean)
    assert advice["monthly_effect_low_usd"] == pytest.approx(low)
    assert advice["monthly_effect_high_usd"] == pytest.approx(high) and high < 0
    assert advice["setting"] == 'cache_control: {"type": "ephemeral", "ttl": "1h"}'
    none = [(len(s), P * IN * len(s)) for s in sessions]
    assert advice["none_monthly_usd"] == pytest.approx(
        _monthly(none, _calls_per_day(rows, "hourly"))[0]
    )


def test_thirty_second_gaps_keep_five_minute_writes(
    ledger: tuple[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    url, rows = ledger
    advice = _advice(url, tmp_path)["chatty"]

    # turn j >= 1 reads the previous prefix and writes 1,000 tokens; turn 0 writes P
    def cost(k: int, write: float) -> float:
        return P * write + sum((P + 1000 * (j - 1)) * READ + 1000 * write for j in range(1, k))

    sessions = _sessions(rows, "chatty")
    per_day = _calls_per_day(rows, "chatty")
    five = _monthly([(len(s), cost(len(s), W5)) for s in sessions], per_day)
    hour = _monthly([(len(s), cost(len(s), W1H)) for s in sessions], per_day)
    assert (advice["current_ttl"], advice["best_ttl"], advice["verdict"]) == ("5m", "5m", "keep")
    assert advice["reuse_observed"] is True and advice["prefix_reuse"] == 1.0
    assert advice["ttl_5m_monthly_usd"] == pytest.approx(five[0])
    assert advice["ttl_1h_monthly_usd"] == pytest.approx(hour[0])
    assert pd.isna(advice["setting"]) and advice["within_5m_share"] == 1.0


def test_a_prefix_that_changes_every_turn_is_cheaper_uncached(
    ledger: tuple[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    url, rows = ledger
    advice = _advice(url, tmp_path)["churning"]
    # nothing is ever read back (reuse 0, observed): every turn pays W5 instead of IN
    per_day = _calls_per_day(rows, "churning")
    effect = _monthly(
        [(len(s), P * (IN - W5) * len(s)) for s in _sessions(rows, "churning")], per_day
    )
    assert (advice["best_ttl"], advice["verdict"]) == ("none", "switch")
    assert advice["reuse_observed"] is True and advice["prefix_reuse"] == 0.0
    assert advice["monthly_effect_usd"] == pytest.approx(effect[0]) and effect[0] < 0
    assert advice["setting"] == "remove cache_control"


def test_openai_has_no_write_premium_and_no_advice(
    ledger: tuple[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    url, _ = ledger
    advice = _advice(url, tmp_path)["openai"]
    assert advice["verdict"] == "does_not_apply"
    assert pd.isna(advice["setting"]) and pd.isna(advice["monthly_effect_usd"])


def test_economics_count_reads_within_the_ttl_on_the_same_upstream(
    ledger: tuple[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    url, rows = ledger
    with open_analytics(url, tmp_path) as analytics:
        frame = analytics.view("cache_economics")
    got = {r["actor_id"]: r for r in frame.to_dict("records")}
    mtok = Decimal(1_000_000)
    hourly_writes = P * sum(r["actor_id"] == "hourly" for r in rows)
    hourly = got["hourly"]
    assert (hourly["cache_write_tokens"], hourly["written_read_tokens"]) == (hourly_writes, 0)
    assert hourly["written_read_share"] == 0.0
    assert hourly["unread_write_cost_usd"] == hourly_writes * (Decimal("3.75") - 3) / mtok
    assert hourly["net_effect_usd"] == hourly["unread_write_cost_usd"]
    # chatty: every write is read by the next turn but each session's last 1,000 tokens
    chatty, sessions = got["chatty"], _sessions(rows, "chatty")
    writes = sum(r["cache_write_tokens"] for r in rows if r["actor_id"] == "chatty")
    reads = sum(r["cache_read_tokens"] for r in rows if r["actor_id"] == "chatty")
    assert chatty["unread_write_tokens"] == 1000 * len(sessions)
    assert chatty["written_read_tokens"] == writes - 1000 * len(sessions)
    assert chatty["read_saving_usd"] == reads * (Decimal(3) - Decimal("0.3")) / mtok
    assert (
        chatty["net_effect_usd"] == (writes * Decimal("0.75") - reads * Decimal("2.7")) / mtok
        and chatty["net_effect_usd"] < 0
    )
    # OpenRouter's upstream, 1-hour writes at 2x input ($3 -> $6): the first is read
    # 20 minutes on, the last never
    router = got["router"]
    assert (router["upstream"], router["cache_write_1h_tokens"]) == ("Anthropic", 2 * P)
    assert (router["written_read_tokens"], router["unread_write_tokens"]) == (P, P)
    assert router["unread_write_cost_usd"] == P * Decimal(3) / mtok
    # OpenAI: reads save (0.15 - 0.075) per Mtok, nothing is written
    openai = got["openai"]
    reads = sum(r["cache_read_tokens"] for r in rows if r["actor_id"] == "openai")
    assert openai["read_saving_usd"] == reads * Decimal("0.075") / mtok
    assert openai["net_effect_usd"] == -openai["read_saving_usd"]
