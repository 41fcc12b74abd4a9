"""Price overrides: read exactly, refused precisely, used instead of genai-prices."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path

import pytest

from ledger import pricing
from ledger.errors import PriceConfigurationError
from ledger.price_overrides import find_prices, load_prices, parse_prices
from ledger.providers import make_provider

PAYLOADS = Path(__file__).resolve().parent / "fixtures" / "payloads"
MISTRAL_LARGE_3 = """
[[tool.ledger.prices]]
provider = "mistral"
model = "mistral-large-latest"
effective_from = 2025-12-02
input = 0.5
output = 1.5
cache_read = 0.05
"""


def _mistral_cost(prices_text: str, tmp_path: Path, at: dt.datetime) -> pricing.Cost:
    (tmp_path / "pyproject.toml").write_text(prices_text)
    book = load_prices(start=tmp_path)
    provider = make_provider("mistral", api_key="sk-test-key-for-parsing-only")
    parsed = provider.parse_response((PAYLOADS / "mistral_chat_cached_real.json").read_bytes())
    return pricing.attempt_cost(
        usage=parsed.usage,
        model=parsed.model,
        reported=None,
        provider="mistral",
        provider_id="mistral",
        at=at,
        overrides=book,
    )


def test_an_override_with_a_cache_rate_prices_the_mistral_call_as_billed(tmp_path: Path) -> None:
    cost = _mistral_cost(MISTRAL_LARGE_3, tmp_path, dt.datetime(2026, 1, 5, tzinfo=dt.UTC))
    # 268 prompt = 44 uncached + 224 cached; 5 completion.
    # 44 x $0.50 + 224 x $0.05 + 5 x $1.50 = 22 + 11.2 + 7.5 = 40.7 -> $0.0000407.
    assert cost == pricing.Cost(Decimal("0.0000407"), "computed")


def test_an_override_applies_from_its_date_only(tmp_path: Path) -> None:
    cost = _mistral_cost(MISTRAL_LARGE_3, tmp_path, dt.datetime(2025, 12, 1, 23, tzinfo=dt.UTC))
    assert cost.source == "incomplete"  # genai-prices, which has no cache-read rate


def test_an_override_lacking_the_cache_rate_is_incomplete(tmp_path: Path) -> None:
    text = MISTRAL_LARGE_3.replace("cache_read = 0.05\n", "")
    cost = _mistral_cost(text, tmp_path, dt.datetime(2026, 1, 5, tzinfo=dt.UTC))
    # Cached tokens at the input rate: 268 x 0.5 + 5 x 1.5 = 141.5 -> $0.0001415.
    assert cost == pricing.Cost(Decimal("0.0001415"), "incomplete")


def test_an_hours_window_prices_deepseek_off_peak(tmp_path: Path) -> None:
    (tmp_path / "ledger.toml").write_text(
        """
[[prices]]
provider = "deepseek"
model = "deepseek-chat"
effective_from = 2025-01-01
input = 0.27
output = 1.10
cache_read = 0.07

[[prices]]                      # off-peak: half price, 16:30-00:30 UTC
provider = "deepseek"
model = "deepseek-chat"
effective_from = 2025-01-01
hours_utc = ["16:30", "00:30"]
input = 0.135
output = 0.55
cache_read = 0.035
"""
    )
    book = load_prices(start=tmp_path)
    peak = book.find("deepseek", "deepseek-chat", dt.datetime(2026, 3, 1, 12, tzinfo=dt.UTC))
    night = book.find("deepseek", "deepseek-chat", dt.datetime(2026, 3, 1, 23, tzinfo=dt.UTC))
    early = book.find("deepseek", "deepseek-chat", dt.datetime(2026, 3, 2, 0, 10, tzinfo=dt.UTC))
    assert peak is not None and peak.input == Decimal("0.27")
    assert night is not None and night.input == Decimal("0.135")
    assert early == night


def test_ledger_toml_beats_pyproject_in_the_same_directory(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(MISTRAL_LARGE_3)
    (tmp_path / "ledger.toml").write_text(
        MISTRAL_LARGE_3.replace("[[tool.ledger.prices]]", "[[prices]]").replace("0.5", "0.4")
    )
    assert find_prices(tmp_path) == tmp_path / "ledger.toml"
    (override,) = load_prices(start=tmp_path).overrides
    assert override.input == Decimal("0.4")


def test_no_price_file_means_no_overrides(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    assert load_prices(start=tmp_path).overrides == ()


@pytest.mark.parametrize(
    ("edit", "key", "expected"),
    [
        (("input = 0.5", 'input = "cheap"'), "tool.ledger.prices[0].input", "USD per million"),
        (("input = 0.5", "input = -1"), "tool.ledger.prices[0].input", ">= 0"),
        (("output = 1.5\n", ""), "tool.ledger.prices[0].output", "required"),
        (("cache_read", "cache_reed"), "tool.ledger.prices[0].cache_reed", "one of provider"),
        (
            ("effective_from = 2025-12-02", 'effective_from = "soon"'),
            "tool.ledger.prices[0].effective_from",
            "TOML date",
        ),
        (
            ("cache_read = 0.05", 'hours_utc = ["25:00", "01:00"]'),
            "tool.ledger.prices[0].hours_utc",
            "HH:MM",
        ),
        (('"mistral-large-latest"', '""'), "tool.ledger.prices[0].model", "non-empty"),
    ],
)
def test_bad_price_config_names_the_file_the_key_and_what_was_expected(
    tmp_path: Path, edit: tuple[str, str], key: str, expected: str
) -> None:
    path = tmp_path / "pyproject.toml"
    path.write_text(MISTRAL_LARGE_3.replace(*edit))
    with pytest.raises(PriceConfigurationError) as caught:
        load_prices(path)
    assert caught.value.key == key
    assert expected in caught.value.expected
    assert str(path) in str(caught.value)


def test_two_overrides_for_the_same_model_date_and_hours_are_refused() -> None:
    entry = {
        "provider": "p",
        "model": "m",
        "effective_from": dt.date(2025, 1, 1),
        "input": 1,
        "output": 2,
    }
    with pytest.raises(PriceConfigurationError, match=r"prices\[1\].*the same as .*prices\[0\]"):
        parse_prices([entry, dict(entry)])


def test_a_toml_syntax_error_is_a_configuration_error(tmp_path: Path) -> None:
    path = tmp_path / "ledger.toml"
    path.write_text("[[prices]\n")
    with pytest.raises(PriceConfigurationError, match="valid TOML"):
        load_prices(path)
