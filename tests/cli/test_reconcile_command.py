"""``ledger reconcile openrouter`` over a real ledger and a loopback OpenRouter."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from ledger.cli import cli
from tests.analytics.builders import insert_rows
from tests.llm_loopback import LoopbackLLM, Reply
from tests.reconcile.test_openrouter import GEN_ID, _generation, _openrouter_row, _rows


@pytest.fixture
def server(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[LoopbackLLM]:
    monkeypatch.setenv("LEDGER_DATABASE_URL", sqlite_url)
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-or-test")
    monkeypatch.chdir(tmp_path)
    with LoopbackLLM() as s:
        monkeypatch.setenv("OPENROUTER_BASE_URL", s.url)
        yield s


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, ["reconcile", "openrouter", *args])


def test_reconcile_stores_the_bill_and_a_rerun_changes_nothing(
    server: LoopbackLLM, sqlite_url: str
) -> None:
    insert_rows(sqlite_url, [_openrouter_row()])
    server.default = Reply.payload("billing/openrouter_generation_real.json")
    result = run("--since", "all", "--format", "json")
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert (body["examined"], body["billed"], body["pending"]) == (1, 1, 0)
    assert Decimal(body["drift_usd"]) == Decimal("0.00000452")
    assert _rows(sqlite_url)[0].billed_cost_usd == Decimal("0.0000345200")
    again = run("--since", "all")
    assert again.exit_code == 0 and "0 of 0 rows reconciled" in again.stdout


def test_a_refused_key_exits_2_and_leaves_the_ledger_unchanged(
    server: LoopbackLLM, sqlite_url: str
) -> None:
    insert_rows(sqlite_url, [_openrouter_row()])
    before = _rows(sqlite_url)
    server.default = Reply(b'{"error":{"message":"No auth credentials found"}}', status=401)
    result = run("--since", "all")
    assert result.exit_code == 2
    assert "refused the key (HTTP 401)" in result.stderr
    assert _rows(sqlite_url) == before


def test_no_key_is_a_clear_error(server: LoopbackLLM, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENROUTER_API_KEY")
    result = run()
    assert result.exit_code == 2 and "OPENROUTER_API_KEY is not set" in result.stderr
    assert server.requests == []


def test_every_row_failing_exits_1_and_names_the_failures(
    server: LoopbackLLM, sqlite_url: str
) -> None:
    insert_rows(sqlite_url, [_openrouter_row(generation_id=f"gen-{i}") for i in range(3)])
    server.default = Reply(b"<html>maintenance</html>")
    result = run("--since", "all")
    assert result.exit_code == 1, result.output
    assert "0 of 3 rows reconciled" in result.stdout and "3 failed" in result.stdout
    assert "failed: generation gen-0: not JSON" in result.stdout
    assert "Traceback" not in result.output


def test_another_generations_bill_exits_1_and_bills_no_row(
    server: LoopbackLLM, sqlite_url: str
) -> None:
    insert_rows(
        sqlite_url,
        [_openrouter_row(generation_id=f"gen-{i}", cost_usd=Decimal("0.0008")) for i in range(40)],
    )
    server.default = _generation("gen-someone-else", "99.5")
    result = run("--since", "all", "--format", "json")
    assert result.exit_code == 1, result.output
    body = json.loads(result.stdout)
    assert (body["billed"], body["failed"], body["complete"]) == (0, 40, False)
    assert body["billed_usd"] == "0"
    assert all(r.billed_cost_usd is None for r in _rows(sqlite_url))


def test_an_implausible_bill_is_shown_held_back_and_stored_once_allowed(
    server: LoopbackLLM, sqlite_url: str
) -> None:
    insert_rows(sqlite_url, [_openrouter_row(cost_usd=Decimal("0.0008"))])
    server.default = _generation(total_cost="99.5")
    held = run("--since", "all")
    assert held.exit_code == 1, held.output
    assert "1 bill(s) held back as implausible (beyond 100x" in held.stdout
    assert f"{GEN_ID}: estimated $0.0008, billed $99.5" in held.stdout
    assert _rows(sqlite_url)[0].billed_at is None
    stored = run("--since", "all", "--max-ratio", "0")
    assert stored.exit_code == 0, stored.output
    assert _rows(sqlite_url)[0].billed_cost_usd == Decimal("99.5")


def test_refetch_repairs_a_bill_stored_wrong(server: LoopbackLLM, sqlite_url: str) -> None:
    insert_rows(sqlite_url, [_openrouter_row(cost_usd=Decimal("0.0008"))])
    server.default = _generation(total_cost="99.5")
    assert run("--since", "all", "--max-ratio", "0").exit_code == 0  # stored, wrongly
    server.default = _generation(total_cost="0.00081")
    assert "0 of 0 rows reconciled" in run("--since", "all").stdout  # billed once...
    repaired = run("--since", "all", "--refetch")  # ...unless refetched
    assert repaired.exit_code == 0, repaired.output
    assert "1 of 1 row reconciled" in repaired.stdout
    assert _rows(sqlite_url)[0].billed_cost_usd == Decimal("0.00081")


def test_the_deadline_ends_a_trickling_run_with_exit_1(
    server: LoopbackLLM, sqlite_url: str
) -> None:
    insert_rows(sqlite_url, [_openrouter_row(generation_id=f"gen-{i}") for i in range(3)])
    server.default = _generation()
    server.default.chunk_size, server.default.delay_s = 1, 0.1  # a byte per 0.1 s
    started = time.monotonic()
    result = run("--since", "all", "--timeout", "60", "--deadline", "1")
    assert time.monotonic() - started < 5
    assert result.exit_code == 1, result.output
    assert "3 row(s) not fetched before the --deadline of 1 s: a rerun resumes" in result.stdout
    assert all(r.billed_at is None for r in _rows(sqlite_url))


def test_a_max_ratio_below_1_is_refused_with_the_fix(server: LoopbackLLM) -> None:
    result = run("--max-ratio", "0.5")
    assert result.exit_code == 2
    assert "--max-ratio 0.5: give 1 or more" in result.stderr and server.requests == []
