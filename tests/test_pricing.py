"""Cost: provider-reported first, then bundled genai-prices, else unknown (None, never 0)."""

from __future__ import annotations

import datetime as dt
import logging
import socket
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from ledger import pricing
from ledger.providers import anthropic, make_provider
from ledger.providers.base import Parsed, Usage

USAGE = Usage(input_tokens=3329, output_tokens=53, cache_read_tokens=3211, cache_write_tokens=115)


def test_provider_reported_cost_wins() -> None:
    cost = pricing.attempt_cost(
        usage=USAGE, model="x", reported=Decimal("0.5"), provider="openrouter", provider_id=None
    )
    assert cost == pricing.Cost(Decimal("0.5"), "provider")


def test_computed_cost_prices_cache_reads_and_writes_at_their_own_rates() -> None:
    cost = pricing.attempt_cost(
        usage=USAGE,
        model="claude-sonnet-4-5-20250929",
        reported=None,
        provider="anthropic",
        provider_id="anthropic",
    )
    # 3 uncached @ $3/M + 3211 reads @ $0.30/M + 115 writes @ $3.75/M + 53 out @ $15/M
    assert cost.usd == Decimal("0.00219855") and cost.source == "computed"


def test_no_usage_means_unknown_cost_not_zero() -> None:
    cost = pricing.attempt_cost(
        usage=None, model="gpt-4o", reported=None, provider="openai", provider_id="openai"
    )
    assert cost == pricing.UNKNOWN and cost.usd is None


def test_unknown_model_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    model = f"no-such-model-{uuid.uuid4().hex[:8]}"  # unseen, whatever ran before
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            cost = pricing.attempt_cost(
                usage=USAGE,
                model=model,
                reported=None,
                provider="openai",
                provider_id="openai",
            )
            assert cost.usd is None
    assert sum(model in r.getMessage() for r in caplog.records) == 1


def test_pricing_never_touches_the_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("pricing tried the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    cost = pricing.attempt_cost(
        usage=USAGE, model="gpt-4o", reported=None, provider="openai", provider_id="openai"
    )
    assert isinstance(cost.usd, Decimal)


def _priced_models() -> list[tuple[str, str]]:
    from genai_prices import data

    wanted = {"openai", "anthropic", "google", "mistral", "groq", "deepseek", "openrouter", "azure"}
    return [
        (provider.id, model.id)
        for provider in data.providers
        if provider.id in wanted
        for model in provider.models
    ]


@pytest.mark.parametrize(
    "usage",
    [
        USAGE,
        Usage(input_tokens=17713, output_tokens=889, cache_read_tokens=17379),
        Usage(
            input_tokens=2168, output_tokens=100, cache_read_tokens=2161, cache_write_tokens=2161
        ),
        Usage(input_tokens=250_000, output_tokens=10),
        Usage(
            input_tokens=5000,
            output_tokens=50,
            cache_read_tokens=1000,
            cache_write_tokens=3000,
            cache_write_1h_tokens=2000,
        ),
        Usage(input_tokens=240_000, output_tokens=5, cache_write_tokens=9, cache_write_1h_tokens=9),
        Usage(
            input_tokens=17713,
            output_tokens=889,
            cache_read_tokens=17379,
            input_audio_tokens=1917,
            cache_audio_read_tokens=1881,
        ),
        Usage(input_tokens=900, output_tokens=400, input_audio_tokens=700, output_audio_tokens=300),
    ],
)
def test_fast_path_agrees_with_genai_prices_for_every_bundled_model(usage: Usage) -> None:
    snapshot = pricing._bundled_snapshot()
    at = dt.datetime(2026, 3, 1, 12, tzinfo=dt.UTC)
    checked = 0
    for provider_id, model in _priced_models():
        try:
            expected = pricing._library_price(snapshot, usage, model, provider_id, None, at)
        except Exception:
            continue  # the library cannot price this combination; computed_cost says None
        ours = pricing.computed_cost(usage, model, provider="t", provider_id=provider_id, at=at)
        assert ours == expected, (provider_id, model)
        checked += 1
    assert checked > 100


def test_one_hour_cache_writes_are_priced_at_their_own_rate() -> None:
    # An Anthropic answer whose writes were 1-hour cache entries, as its usage reports them.
    raw = {
        "input_tokens": 10,
        "cache_read_input_tokens": 0,
        "cache_creation_input_tokens": 1000,
        "cache_creation": {"ephemeral_5m_input_tokens": 400, "ephemeral_1h_input_tokens": 600},
        "output_tokens": 20,
    }
    usage = anthropic.normalise_usage(raw, [])
    assert (usage.input_tokens, usage.cache_write_tokens, usage.cache_write_1h_tokens) == (
        1010,
        1000,
        600,
    )
    cost = pricing.computed_cost(
        usage, "claude-sonnet-4-5", provider="anthropic", provider_id="anthropic"
    )
    # Sonnet 4.5: $3/M input, $3.75/M 5-minute writes, $6/M 1-hour writes, $15/M output.
    expected = (10 * 3 + 400 * Decimal("3.75") + 600 * 6 + 20 * 15) / Decimal(1_000_000)
    assert cost == expected


# Costs that are right, or say why not: the real payloads of issue 17, parsed by
# the provider's own parser, priced as a recorded row is, against a hand computation.

PAYLOADS = Path(__file__).resolve().parent / "fixtures" / "payloads"
AT_OFF_PEAK = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)


def _parsed(provider_name: str, payload: str) -> tuple[Any, Parsed]:
    provider = make_provider(provider_name, api_key="sk-test-key-for-parsing-only")
    return provider, provider.parse_response((PAYLOADS / payload).read_bytes())


def _cost(provider: Any, parsed: Parsed, at: dt.datetime = AT_OFF_PEAK) -> pricing.Cost:
    return pricing.attempt_cost(
        usage=parsed.usage,
        model=parsed.model,
        reported=parsed.provider_cost_usd,
        provider=provider.name,
        provider_id=provider.prices_provider_id,
        at=at,
    )


def test_gemini_audio_tokens_are_kept_and_priced_at_the_audio_rates() -> None:
    provider, parsed = _parsed("gemini", "gemini_generatecontent_cached_thoughts_real.json")
    assert parsed.usage is not None
    # promptTokensDetails AUDIO 1917, cacheTokensDetails AUDIO 1881.
    assert parsed.usage.input_audio_tokens == 1917
    assert parsed.usage.cache_audio_read_tokens == 1881
    cost = _cost(provider, parsed)
    # gemini-2.5-flash: $0.30/M text+video input, $1.00/M audio input, $0.03/M cache
    # read, $0.10/M cached audio, $2.50/M output (68 candidates + 821 thoughts).
    # Uncached 17713 - 17379 = 334, of which audio 1917 - 1881 = 36.
    hand = (
        Decimal(334 - 36) * Decimal("0.30")
        + 36 * Decimal("1.00")
        + Decimal(17379 - 1881) * Decimal("0.03")
        + 1881 * Decimal("0.10")
        + 889 * Decimal("2.50")
    ) / 1_000_000
    assert hand == Decimal("0.00300094")
    assert cost == pricing.Cost(hand, "computed")
    # At text rates alone it was $0.00284407: 5.2% under the bill.
    text_only = (334 * Decimal("0.30") + 17379 * Decimal("0.03") + 889 * Decimal("2.50")) / 10**6
    assert round((text_only - hand) / hand * 100, 1) == Decimal("-5.2")


def test_audio_pricing_agrees_with_genai_prices_own_calculation() -> None:
    from genai_prices import calc_price
    from genai_prices.types import Usage as PriceUsage

    usage = Usage(
        input_tokens=17713,
        output_tokens=889,
        cache_read_tokens=17379,
        input_audio_tokens=1917,
        cache_audio_read_tokens=1881,
    )
    theirs = calc_price(
        PriceUsage(
            input_tokens=17713,
            output_tokens=889,
            cache_read_tokens=17379,
            input_audio_tokens=1917,
            cache_audio_read_tokens=1881,
        ),
        "gemini-2.5-flash",
        provider_id="google",
        genai_request_timestamp=AT_OFF_PEAK,
    ).total_price
    ours = pricing.computed_cost(
        usage, "gemini-2.5-flash", provider="gemini", provider_id="google", at=AT_OFF_PEAK
    )
    assert ours == theirs


def test_a_price_without_a_cache_read_rate_makes_the_cost_incomplete() -> None:
    provider, parsed = _parsed("mistral", "mistral_chat_cached_real.json")
    assert parsed.usage is not None and parsed.usage.cache_read_tokens == 224
    cost = _cost(provider, parsed)
    # genai-prices maps mistral-large-latest to mistral-large ($2/M in, $6/M out) and
    # has no cache-read rate, so the 224 cached tokens are at the full input rate:
    # 268 x $2 + 5 x $6 = $0.000566. The bill (Mistral Large 3: $0.50/M in, $0.05/M
    # cached, $1.50/M out) is 44 x 0.5 + 224 x 0.05 + 5 x 1.5 = $0.0000407, 13.9x less.
    # So the figure is not "computed": it says it is incomplete.
    assert cost == pricing.Cost(Decimal("0.000566"), "incomplete")
    hand = (44 * Decimal("0.5") + 224 * Decimal("0.05") + 5 * Decimal("1.5")) / 10**6
    assert round(cost.usd / hand, 1) == Decimal("13.9")  # type: ignore[operator]


def test_missing_rates_names_each_component_the_usage_needs() -> None:
    from genai_prices.types import ModelPrice

    text_only = ModelPrice(input_mtok=Decimal(1), output_mtok=Decimal(2))
    usage = Usage(
        input_tokens=100,
        output_tokens=10,
        cache_read_tokens=20,
        cache_write_tokens=30,
        cache_write_1h_tokens=10,
        input_audio_tokens=5,
        output_audio_tokens=3,
    )
    assert pricing.missing_rates(text_only, usage) == (
        "cache read",
        "cache write",
        "1-hour cache write",
        "audio input",
        "audio output",
    )
    assert pricing.missing_rates(text_only, Usage(input_tokens=100, output_tokens=10)) == ()


def test_an_unpriced_served_model_is_unknown_never_the_requested_models_price(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pricing, "_warned", set())  # other tests price this model too
    # Asked for google/gemini-2.0-flash-exp:free (priced $0), served by x-ai/grok-4,
    # which genai-prices does not price on OpenRouter and the response reports no cost.
    provider, parsed = _parsed("openrouter", "openrouter_chat_xai_cached_no_cost.json")
    assert parsed.model == "x-ai/grok-4" and parsed.provider_cost_usd is None
    with caplog.at_level(logging.WARNING):
        assert _cost(provider, parsed) == pricing.UNKNOWN
    assert any("x-ai/grok-4" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    ("hour", "rates"),
    [
        # deepseek-v4-flash, price data from 2026-09-10: $0.15/M in, $0.003/M cached,
        # $0.60/M out; 01:00-04:00 and 06:00-10:00 UTC: $0.30, $0.006, $1.20.
        (12, (Decimal("0.15"), Decimal("0.003"), Decimal("0.60"))),
        (9, (Decimal("0.30"), Decimal("0.006"), Decimal("1.20"))),
    ],
)
def test_deepseek_is_priced_by_the_time_of_day_the_call_started(
    hour: int, rates: tuple[Decimal, Decimal, Decimal]
) -> None:
    provider, parsed = _parsed("deepseek", "deepseek_chat_cache_hit_reasoning_real.json")
    at = dt.datetime(2026, 11, 30, hour, 4, tzinfo=dt.UTC)
    inp, cached, out = rates
    # 563 prompt = 512 cache hits + 51 misses; 116 completion (60 reasoning inside).
    hand = (51 * inp + 512 * cached + 116 * out) / 1_000_000
    assert _cost(provider, parsed, at) == pricing.Cost(hand, "computed")


def test_a_local_base_url_without_a_mapping_is_priced_by_its_model_name(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A proxy on loopback names no provider; the model name still does.
    at_proxy = {"provider": "openai_compatible", "provider_id": None}
    cost = pricing.attempt_cost(
        usage=USAGE,
        model="gpt-4o-mini",
        reported=None,
        api_url="http://127.0.0.1:4000/v1",
        **at_proxy,
    )
    # Priced (this usage has cache writes OpenAI has no rate for: "incomplete", not unknown).
    assert cost.source in {"computed", "incomplete"} and cost.usd is not None and cost.usd > 0
    model = f"local-llama-{uuid.uuid4().hex[:8]}"
    with caplog.at_level(logging.WARNING):
        unknown = pricing.attempt_cost(
            usage=USAGE, model=model, reported=None, api_url="http://127.0.0.1:4000/v1", **at_proxy
        )
    assert unknown.usd is None
    (line,) = [r.getMessage() for r in caplog.records if model in r.getMessage()]
    assert "LookupError" not in line
    assert "names no provider" in line and "providers={base_url: 'openai'}" in line
