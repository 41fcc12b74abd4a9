"""``switch_costs`` and ``cache_decay`` against an independent pandas computation.

A seeded random ledger: sessions of several agents and models whose calls
wander between upstreams, with gaps from seconds to an hour, failed and
response-cache rows mixed in. pandas recomputes both views from the rows by the
contract's definitions; the views must agree, stored and filtered.
"""

from __future__ import annotations

import random
from decimal import Decimal
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from ledger.analytics import Filters
from tests.analytics.builders import failed, insert_rows, open_analytics, response_cache_row, served

MODELS = ("openai/gpt-4o-mini", "anthropic/claude-sonnet-4.5")
GAPS_MIN = (0.2, 0.5, 2.0, 4.0, 7.0, 9.9, 12.0, 25.0, 45.0)


def random_ledger(seed: int = 7) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    for s in range(60):
        model, actor = rng.choice(MODELS), rng.choice(("planner", "coder", None))
        who = {"session_id": f"s{s}", "actor_id": actor, "requested_model": model}
        minute, upstream = rng.uniform(0, 600), rng.choice("ABC")
        for _ in range(rng.randint(2, 12)):
            minute += rng.choice(GAPS_MIN)
            if rng.random() < 0.25:
                upstream = rng.choice("ABC")
            kind = rng.random()
            if kind < 0.08:
                rows.append(failed(minute, upstream, **who))
            elif kind < 0.12:
                rows.append(response_cache_row(minute, **who))
            else:
                prompt = rng.randint(500, 5000)
                read = rng.choice((0, rng.randint(0, prompt)))
                rows.append(served(minute, upstream, input_tokens=prompt, cache_read_tokens=read,
                                   cost_usd=Decimal("0.001"), **who))  # fmt: skip
    return rows


def transitions_in_pandas(rows: list[dict[str, Any]]) -> pd.DataFrame:
    frame = pd.DataFrame(rows)
    served_rows = frame[
        (frame.status == "ok") & ~frame.response_cache_hit.fillna(False).astype(bool)
    ]
    served_rows = served_rows[served_rows.session_id.notna() & (served_rows.attempt >= 1)].copy()
    served_rows["key"] = list(zip(served_rows.session_id, served_rows.actor_id.fillna("\0"),
                                  served_rows.requested_model, strict=True))  # fmt: skip
    served_rows = served_rows.sort_values(["key", "started_at", "attempt"])
    grouped = served_rows.groupby("key", sort=False)
    served_rows["prev_upstream"] = grouped.upstream.shift()
    served_rows["prev_at"] = grouped.started_at.shift()
    served_rows["prev_read"] = grouped.cache_read_tokens.shift()
    moves = served_rows[served_rows.prev_at.notna()].copy()
    moves["gap_s"] = (moves.started_at - moves.prev_at).dt.total_seconds()
    moves["changed"] = moves.upstream != moves.prev_upstream
    return moves


def switch_costs_in_pandas(moves: pd.DataFrame, discount_per_mtok: dict[str, Decimal]) -> dict:
    moved = moves[moves.changed].copy()
    moved["switch"] = moved.gap_s <= 600
    moved["lost"] = (
        moved[["prev_read", "input_tokens"]].min(axis=1) - moved.cache_read_tokens
    ).clip(lower=0)
    moved["day"] = moved.started_at.dt.tz_convert("UTC").dt.date
    out = {}
    for (model, actor, day), g in moved.groupby(
        ["requested_model", moved.actor_id.fillna("\0"), "day"]
    ):
        lost = int(g.lost.sum())
        price = discount_per_mtok.get(model)
        out[(model, None if actor == "\0" else actor, day)] = (
            int(g.switch.sum()),
            int((~g.switch).sum()),
            lost,
            None if price is None else price * lost / 1_000_000,
        )
    return out


def cache_decay_in_pandas(moves: pd.DataFrame) -> dict:
    edges = [60, 300, 600, 1800]
    moves = moves.copy()
    moves["bucket"] = [sum(gap > e for e in edges) for gap in moves.gap_s]
    out = {}
    for (model, bucket), g in moves.groupby(["requested_model", "bucket"]):
        out[(model, bucket)] = (
            len(g),
            int(g.changed.sum()),
            g.cache_read_tokens.sum() / g.input_tokens.sum(),
            (g.cache_read_tokens > 0).mean(),
        )
    return out


def view_switch_costs(frame: pd.DataFrame) -> dict:
    return {
        (r.requested_model, None if pd.isna(r.actor_id) else r.actor_id, r.day): (
            int(r.switches), int(r.idle_releases), int(r.cache_read_tokens_lost),
            None if pd.isna(r.cost_usd) else Decimal(r.cost_usd),
        )
        for r in frame.itertuples()
    }  # fmt: skip


@pytest.fixture
def ledger(ledger_url: str) -> tuple[str, list[dict[str, Any]]]:
    rows = random_ledger()
    insert_rows(ledger_url, rows)
    return ledger_url, rows


def test_switch_costs_match_pandas(
    ledger: tuple[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    url, rows = ledger
    moves = transitions_in_pandas(rows)
    with open_analytics(url, tmp_path) as analytics:
        prices = analytics.sql("SELECT requested_model, discount_per_mtok FROM model_prices")
        discounts = {
            r.requested_model: Decimal(r.discount_per_mtok)
            for r in prices.itertuples()
            if r.discount_per_mtok is not None
        }
        stored = analytics.switch_costs()
        filtered = analytics.switch_costs(Filters(models=list(MODELS)))
        totals = analytics.switch_cost_totals()
    assert set(discounts) == set(MODELS)  # both models are priced by genai-prices
    expected = switch_costs_in_pandas(moves, discounts)
    assert expected and sum(v[0] for v in expected.values()) > 0
    for got in (view_switch_costs(stored), view_switch_costs(filtered)):
        assert got.keys() == expected.keys()
        for key, (switches, releases, lost, cost) in expected.items():
            assert got[key][:3] == (switches, releases, lost), key
            assert got[key][3] == pytest.approx(cost, abs=Decimal("1e-9")), key
    assert list(stored.requested_model) == sorted(stored.requested_model)  # deterministic order
    assert totals.switches == sum(v[0] for v in expected.values())
    assert totals.cache_read_tokens_lost == sum(v[2] for v in expected.values())
    expected_total = sum(v[3] for v in expected.values())
    assert totals.cost_usd == pytest.approx(expected_total, abs=Decimal("1e-8"))


def test_cache_decay_matches_pandas(
    ledger: tuple[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    url, rows = ledger
    expected = cache_decay_in_pandas(transitions_in_pandas(rows))
    with open_analytics(url, tmp_path) as analytics:
        stored = analytics.cache_decay()
        filtered = analytics.cache_decay(Filters(models=list(MODELS)))
    for frame in (stored, filtered):
        got = {
            (r.requested_model, r.gap_order): (
                int(r.calls),
                int(r.changed_upstream),
                r.token_hit_rate,
                r.call_hit_rate,
            )
            for r in frame.itertuples()
        }
        assert got.keys() == expected.keys()
        for key, (calls, changed, token_rate, call_rate) in expected.items():
            assert got[key][:2] == (calls, changed), key
            assert got[key][2:] == pytest.approx((token_rate, call_rate)), key
    assert list(stored.idle_gap.unique()) == ["0–1 min", "1–5 min", "5–10 min", "10–30 min",
                                              "30+ min"]  # fmt: skip


@pytest.mark.parametrize(
    ("idle_window_s", "split"),
    [(600.0, (2, 0)), (100.5, (1, 1)), (100.0, (0, 2)), (101.0, (2, 0))],
)
def test_a_fractional_idle_window_splits_moves_within_one_second_of_gap(
    ledger_url: str, tmp_path: Path, idle_window_s: float, split: tuple[int, int]
) -> None:
    # Two moves whose gaps (100.25 s and 100.75 s) share a whole second: the
    # stored counts keep whole seconds, so 100.5 s must still tell them apart.
    rows = []
    for session, gap_s, read in (("early", 100.25, 40), ("late", 100.75, 70)):
        who = {"session_id": session, "actor_id": "planner", "requested_model": MODELS[0]}
        rows += [
            served(0, "A", input_tokens=100, cache_read_tokens=read, **who),
            served(gap_s / 60, "B", input_tokens=100, cache_read_tokens=0, **who),
        ]
    insert_rows(ledger_url, rows)
    with open_analytics(ledger_url, tmp_path, idle_window_s=idle_window_s) as analytics:
        stored = analytics.switch_costs()
        computed = analytics.switch_costs(Filters(models=[MODELS[0]]))  # from the rows
    for frame in (stored, computed):
        assert (int(frame.switches.sum()), int(frame.idle_releases.sum())) == split
        assert int(frame.cache_read_tokens_lost.sum()) == 110
    lost_by_kind = {(1, 1): (40, 70), (0, 2): (0, 110), (2, 0): (110, 0)}[split]
    assert (int(stored.switch_tokens_lost.sum()), int(stored.release_tokens_lost.sum())) == (
        lost_by_kind
    )
