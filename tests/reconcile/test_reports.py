"""The four admin report shapes, parsed from the providers' reference examples, and the
per day × model comparison with the ledger's sums."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pytest

from ledger.reconcile.admin import Bill
from ledger.reconcile.drift import NO_MODEL, Tally, Tolerance, compare
from ledger.reconcile.reports import (
    BadReport,
    BilledCost,
    BilledTokens,
    model_key,
    parse_anthropic_costs,
    parse_anthropic_usage,
    parse_openai_costs,
    parse_openai_usage,
)
from tests.llm_loopback import PAYLOADS

BILLING = PAYLOADS / "billing"
DAY = dt.date(2025, 8, 1)
T0 = dt.datetime(2025, 8, 1, tzinfo=dt.UTC)


def test_openai_costs_reference_example() -> None:
    page = parse_openai_costs((BILLING / "openai_organization_costs_doc.json").read_bytes())
    assert page.lines == [BilledCost(dt.date(2024, 11, 1), None, None, Decimal("0.06"), None)]
    assert page.next_page is None


def test_openai_usage_reference_example_and_its_cursor() -> None:
    body = (BILLING / "openai_organization_usage_completions_doc.json").read_bytes()
    page = parse_openai_usage(body)
    assert page.lines == [BilledTokens(dt.date(2024, 11, 1), None, None, 5, 1000, 500, 800, 0)]
    assert page.next_page == "AAAAAGdGxdEiJdKOAAAAAGcqsYA="


def test_anthropic_cost_amounts_are_cents() -> None:
    page = parse_anthropic_costs((BILLING / "anthropic_cost_report_doc.json").read_bytes())
    (line,) = page.lines
    assert line.cost_usd == Decimal("1.2378912")  # "123.78912" cents
    assert (line.day, line.model, line.scope) == (
        DAY,
        "claude-sonnet-4-20250514",
        "wrkspc_01JwQvzr7rXLA5AGx3HKfFUJ",
    )
    assert page.next_page == "page_MjAyNS0wNS0xNFQwMDowMDowMFo="


def test_anthropic_usage_input_is_uncached_plus_writes_plus_reads() -> None:
    body = (BILLING / "anthropic_usage_report_messages_doc.json").read_bytes()
    (line,) = parse_anthropic_usage(body).lines
    assert (line.input_tokens, line.cache_write_tokens, line.cache_read_tokens) == (3200, 1500, 200)
    assert (line.output_tokens, line.requests) == (500, None)


def test_openai_line_item_names_the_model_and_unknown_fields_are_kept_out() -> None:
    body = {
        "object": "page",
        "data": [
            {
                "start_time": 1730419200,
                "results": [
                    {
                        "amount": {"value": 1.5, "currency": "usd"},
                        "line_item": "gpt-4o-2024-08-06, input",
                        "project_id": "proj_a",
                        "something_new": {"x": 1},
                    }
                ],
            }
        ],
        "has_more": False,
        "next_page": None,
    }
    (line,) = parse_openai_costs(json.dumps(body).encode()).lines
    assert (line.model, line.scope, line.cost_usd) == (
        "gpt-4o-2024-08-06",
        "proj_a",
        Decimal("1.5"),
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"<html>", "not JSON"),
        (b'{"error": {"message": "x"}}', "no 'data' list"),
        (b'{"data": [{"start_time": 1, "results": [{"amount": {"value": "lots"}}]}]}', "amount"),
        (
            b'{"data": [{"start_time": 1, "results": '
            b'[{"amount": {"value": 1, "currency": "eur"}}]}]}',
            "only USD",
        ),
        (b'{"data": [{"start_time": "monday", "results": []}]}', "Unix seconds"),
    ],
)
def test_a_page_that_is_not_a_report_is_refused_precisely(body: bytes, message: str) -> None:
    with pytest.raises(BadReport, match=message):
        parse_openai_costs(body)


def test_model_key_matches_snapshots_and_prefixes() -> None:
    assert model_key("gpt-4o-2024-08-06") == model_key("openai/gpt-4o") == "gpt-4o"
    assert model_key("claude-sonnet-4-20250514") == "claude-sonnet-4"
    assert model_key(None) is None


def _ledger(cost: str, rows: int = 10) -> dict[tuple[dt.date, str], Tally]:
    return {(DAY, "gpt-4o"): Tally(Decimal(cost), rows, 0, 1000, 500, {"gpt-4o"})}


def _bill(*costs: tuple[str | None, str]) -> Bill:
    return Bill([BilledCost(DAY, m, "proj_a", Decimal(c), None) for m, c in costs], [])


def test_drift_within_tolerance_is_ok_and_beyond_it_is_flagged() -> None:
    tol = Tolerance(Decimal(5), Decimal("0.01"))
    ok = compare(
        "openai",
        _ledger("1.00"),
        _bill(("gpt-4o-2024-08-06", "1.04")),
        start=T0,
        end=T0,
        tolerance=tol,
    )
    assert [line.status for line in ok.lines] == ["ok"] and not ok.exceeded
    assert ok.lines[0].drift_usd == Decimal("0.04")
    off = compare(
        "openai", _ledger("1.00"), _bill(("gpt-4o", "1.10")), start=T0, end=T0, tolerance=tol
    )
    assert off.lines[0].status == "drift" and off.lines[0].drift_pct == pytest.approx(100 / 11)


def test_spend_the_ledger_never_saw_and_ledger_spend_not_billed() -> None:
    tol = Tolerance(Decimal(5), Decimal("0.01"))
    report = compare(
        "openai",
        _ledger("2.00"),
        _bill((None, "0.50"), ("o3", "0.005")),
        start=T0,
        end=T0,
        tolerance=tol,
    )
    by_model = {line.model: line.status for line in report.lines}
    # $0.005 of o3 is under the floor; the $0.50 of non-token spend is not.
    assert by_model == {NO_MODEL: "not in ledger", "o3": "ok", "gpt-4o": "not billed"}
    assert report.unledgered_usd == Decimal("0.50")
