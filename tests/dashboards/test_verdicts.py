"""The verdict card's words, from provider_order_verdict rows as the view returns them."""

from __future__ import annotations

from typing import Any

from dashboards.verdicts import verdict_row

IGNORE_TWO: dict[str, Any] = {
    "requested_model": "qwen/qwen3-coder",
    "verdict": "warranted",
    "pinned_upstream": "Parasail",
    "best_upstream": "Baseten",
    "worse_upstreams": "Parasail, Fireworks",
    "recommendation": '{"ignore":["parasail","fireworks"]}',
    "headline": "Ignore Parasail (vs Fireworks: $0.21 vs $0.18 per Mtok input) and ...",
    "sessions_affected_share": 0.383,
    "monthly_effect_usd": -14.62,
    "error_rates_observable": False,
    "pinned_error_rate": 0.0,
    "best_error_rate": 0.0,
    "pinned_p95_ms": 3094.0,
    "best_p95_ms": 2855.0,
    "pinned_cost_per_mtok": 0.2053,
    "best_cost_per_mtok": 0.1813,
    "errors_worse": False,
    "latency_worse": False,
    "cost_worse": True,
    "reason": "Pinned Parasail ...",
}


def test_a_price_verdict_shows_prices_and_an_ignore_names_no_destination() -> None:
    card = verdict_row(IGNORE_TWO)
    # the card once read "Parasail → Baseten" and "p95 3.1 s vs 2.9 s": neither was
    # what the verdict said (an ignore spreads sessions; the reason was price)
    assert card.route == "ignore Parasail, Fireworks; sticky routing continues over the rest"
    assert card.difference == "$0.21 vs $0.18 per Mtok input"
    assert card.monthly == "saves $14.62 a month"


def test_an_order_names_its_first_choice_and_latency_stays_the_evidence() -> None:
    row = {
        **IGNORE_TWO,
        "recommendation": '{"order":["anthropic"],"allow_fallbacks":true}',
        "pinned_upstream": "Amazon Bedrock",
        "worse_upstreams": "Amazon Bedrock",
        "latency_worse": True,
        "cost_worse": False,
    }
    card = verdict_row(row)
    assert card.route == "Amazon Bedrock → anthropic"
    assert card.difference == "p95 3.1 s vs 2.9 s"


def test_nothing_worse_shows_latency_not_price() -> None:
    row = {**IGNORE_TWO, "verdict": "not_warranted", "recommendation": None,
           "worse_upstreams": "", "cost_worse": False}  # fmt: skip
    card = verdict_row(row)
    assert card.route == "Parasail (keep sticky routing)"
    assert card.difference == "p95 3.1 s vs 2.9 s"
