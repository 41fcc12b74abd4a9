"""``ledger reconcile openrouter`` over a real ledger and a loopback OpenRouter."""

from __future__ import annotations

import json
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from ledger.cli import cli
from tests.analytics.builders import insert_rows
from tests.llm_loopback import LoopbackLLM, Reply
from tests.reconcile.test_openrouter import _openrouter_row, _rows


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
    assert again.exit_code == 0 and "0 row(s) reconciled of 0" in again.stdout


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
