"""The meter's price overrides: read once, and a bad file never breaks a metered call."""

from __future__ import annotations

import logging
from decimal import Decimal
from pathlib import Path

import pytest

from ledger.instrument import meter
from ledger.price_overrides import NO_OVERRIDES


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(meter, "_prices", None)
    monkeypatch.delenv("LEDGER_PRICES_FILE", raising=False)
    monkeypatch.chdir(tmp_path)


def test_metered_calls_use_the_nearest_price_file(tmp_path: Path) -> None:
    (tmp_path / "ledger.toml").write_text(
        '[[prices]]\nprovider = "mistral"\nmodel = "m"\neffective_from = 2025-01-01\n'
        "input = 0.5\noutput = 1.5\n"
    )
    (override,) = meter.price_overrides().overrides
    assert (override.provider, override.input) == ("mistral", Decimal("0.5"))


def test_a_bad_price_file_is_logged_and_ignored_for_metered_calls(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "ledger.toml").write_text('[[prices]]\nprovider = "mistral"\n')
    with caplog.at_level(logging.ERROR):
        assert meter.price_overrides() is NO_OVERRIDES
        assert meter.price_overrides() is NO_OVERRIDES
    errors = [r for r in caplog.records if "price overrides ignored" in r.getMessage()]
    assert len(errors) == 1 and "prices[0].model" in errors[0].getMessage()
