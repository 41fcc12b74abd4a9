"""``ledger reconcile openai|anthropic`` against the simulator's admin reports, over real
HTTP, with a real ledger: exit 0 within tolerance, 1 beyond it, 2 on an error; read only."""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import httpx
import pytest
from click.testing import CliRunner, Result
from sqlalchemy import select

from ledger.cli import cli
from ledger.schema import token_usage
from ledger.simulator import Simulator, VirtualClock, serve_in_thread
from ledger.store.engine import make_engine
from tests.analytics.builders import insert_rows, row
from tests.llm_loopback import LoopbackLLM, Reply

#: Served on this day; the window starts 38 days before, so the 31-bucket usage pages
#: need a second page to reach it.
SERVED_AT = dt.datetime(2025, 3, 10, 12, 0, tzinfo=dt.UTC)
WINDOW = ("--since", "2025-02-01", "--until", "2025-03-11")
MTOK = Decimal(1_000_000)


@pytest.fixture
def sim() -> Simulator:
    return Simulator(clock=VirtualClock(SERVED_AT.timestamp()), seed=7)


@pytest.fixture
def base(sim: Simulator, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("OPENAI_ADMIN_KEY", "sk-admin-test")
    monkeypatch.setenv("ANTHROPIC_ADMIN_KEY", "sk-ant-admin-test")
    with serve_in_thread(sim) as url:
        monkeypatch.setenv("OPENAI_ADMIN_BASE_URL", url + "/v1")
        monkeypatch.setenv("ANTHROPIC_ADMIN_BASE_URL", url + "/v1")
        yield url


def _price(sim: Simulator, service: str, model: str) -> tuple[Decimal, Decimal]:
    spec = sim.catalog.pools(service)[model].upstreams[0]  # type: ignore[arg-type]
    return spec.input_per_mtok, spec.output_per_mtok


def _serve(url: str, sim: Simulator, service: str, calls: int) -> list[dict[str, Any]]:
    """Make ``calls`` completions on the simulator; the ledger rows an honest meter writes
    for them, priced by hand at the model's list price."""
    model = sorted(sim.catalog.pools(service))[0]  # type: ignore[arg-type]
    price_in, price_out = _price(sim, service, model)
    rows = []
    for i in range(calls):
        if service == "openai":
            body = {"model": model, "messages": [{"role": "user", "content": f"question {i}"}]}
            r = httpx.post(
                url + "/v1/chat/completions", json=body, headers={"authorization": "Bearer sk-proj"}
            )
            usage = r.json()["usage"]
            tokens_in, tokens_out = usage["prompt_tokens"], usage["completion_tokens"]
        else:
            body = {
                "model": model,
                "max_tokens": 200,
                "messages": [{"role": "user", "content": f"question {i}"}],
            }
            r = httpx.post(url + "/v1/messages", json=body, headers={"x-api-key": "sk-ant"})
            usage = r.json()["usage"]
            tokens_in, tokens_out = usage["input_tokens"], usage["output_tokens"]
        assert r.status_code == 200, r.text
        cost = (tokens_in * price_in + tokens_out * price_out) / MTOK
        rows.append(
            row(
                0,
                started_at=SERVED_AT,
                requested_provider=service,
                provider=service,
                requested_model=model,
                model=r.json()["model"],
                input_tokens=tokens_in,
                output_tokens=tokens_out,
                cost_usd=cost,
                cost_source="computed",
            )
        )
    return rows


def _ledger(url: str) -> list[Any]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return list(conn.execute(select(token_usage).order_by(token_usage.c.id)))
    finally:
        engine.dispose()


def run(provider: str, *args: str) -> Result:
    return CliRunner().invoke(cli, ["reconcile", provider, *WINDOW, *args])


@pytest.fixture
def ledger_env(ledger_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> str:
    """SQLite and PostgreSQL."""
    monkeypatch.setenv("LEDGER_DATABASE_URL", ledger_url)
    monkeypatch.chdir(tmp_path)
    return ledger_url


@pytest.fixture
def sqlite_env(sqlite_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> str:
    monkeypatch.setenv("LEDGER_DATABASE_URL", sqlite_url)
    monkeypatch.chdir(tmp_path)
    return sqlite_url


def test_a_ledger_that_matches_the_bill_exits_0_and_is_left_unchanged(
    base: str, sim: Simulator, ledger_env: str
) -> None:
    insert_rows(ledger_env, _serve(base, sim, "openai", 6))
    before = _ledger(ledger_env)
    result = run("openai", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    (line,) = report["lines"]
    assert (line["day"], line["model"], line["status"]) == ("2025-03-10", "gpt-4o-mini", "ok")
    assert Decimal(line["billed_usd"]) == Decimal(line["ledger_usd"]) > 0
    assert line["billed_requests"] == line["ledger_rows"] == 6
    assert line["billed_input_tokens"] == line["ledger_input_tokens"]
    assert report["per_row_billed"] is False and "cannot fill" in report["note"]
    assert _ledger(ledger_env) == before  # a check, never a write


def test_drift_beyond_the_tolerance_exits_1_and_a_wider_tolerance_passes(
    base: str, sim: Simulator, sqlite_env: str
) -> None:
    sim.reports.discrepancy_rate = 1.0  # every call billed 10% above what was served
    sim.reports.discrepancy = Decimal("0.10")
    insert_rows(sqlite_env, _serve(base, sim, "anthropic", 4))
    result = run("anthropic", "--format", "json", "--min-usd", "0")  # cents of drift count
    assert result.exit_code == 1, result.output
    (line,) = json.loads(result.stdout)["lines"]
    assert line["status"] == "drift" and line["drift_pct"] == pytest.approx(100 / 11, abs=1e-3)
    assert line["billed_input_tokens"] == line["ledger_input_tokens"]  # tokens agree
    assert run("anthropic", "--json", "--min-usd", "0", "--tolerance", "10").exit_code == 0


def test_the_table_escapes_ledger_strings_and_names_spend_not_billed(
    base: str, sim: Simulator, sqlite_env: str
) -> None:
    rows = _serve(base, sim, "openai", 2)
    rows.append(
        row(
            0,
            started_at=SERVED_AT,
            requested_provider="openai",
            provider="openai",
            requested_model="evil\x1b[2J",
            model="evil\x1b[2J",
            cost_usd=Decimal("0.5"),
            cost_source="computed",
        )
    )
    rows.append({**rows[0], "event_id": "e-unpriced", "call_id": "c-unpriced", "cost_usd": None,
                 "input_tokens": 0, "output_tokens": 0})  # fmt: skip
    insert_rows(sqlite_env, rows)
    result = run("openai")
    assert result.exit_code == 1
    assert "1 ledger row(s) of unknown cost" in result.stdout
    assert "\x1b" not in result.stdout and "\\x1b[2j" in result.stdout  # model keys are lower case
    assert "not billed" in result.stdout and "cannot fill" in result.stdout


@pytest.mark.parametrize(
    ("provider", "variable"), [("openai", "OPENAI_ADMIN_KEY"), ("anthropic", "ANTHROPIC_ADMIN_KEY")]
)
def test_no_admin_key_is_a_clear_error_with_the_fix(
    provider: str, variable: str, sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LEDGER_DATABASE_URL", sqlite_url)
    for name in ("OPENAI_ADMIN_KEY", "ANTHROPIC_ADMIN_KEY", "ANTHROPIC_ADMIN_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    result = run(provider)
    assert result.exit_code == 2
    assert f"{variable} is not set" in result.stderr and "admin" in result.stderr.lower()


def test_a_refused_key_exits_2(
    base: str, sim: Simulator, sqlite_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_ADMIN_BASE_URL", base + "/nowhere")  # the simulator's 404
    result = run("openai")
    assert result.exit_code == 2 and "unexpected HTTP 404" in result.stderr


@pytest.fixture
def loopback(sqlite_env: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[LoopbackLLM]:
    monkeypatch.setenv("OPENAI_ADMIN_KEY", "sk-admin-test")
    with LoopbackLLM() as server:
        monkeypatch.setenv("OPENAI_ADMIN_BASE_URL", server.url + "/v1")
        yield server


def test_the_deadline_stops_a_trickling_report_with_exit_2(loopback: LoopbackLLM) -> None:
    loopback.default = Reply(b'{"data": [], "has_more": false}', chunk_size=1, delay_s=0.2)
    started = time.monotonic()
    result = run("openai", "--timeout", "60", "--deadline", "2")
    assert time.monotonic() - started < 6
    assert result.exit_code == 2, result.output
    assert "the run's --deadline (2 s) passed before the bill was read" in result.stderr


def test_deeply_nested_json_in_a_report_is_a_clear_error(loopback: LoopbackLLM) -> None:
    loopback.default = Reply(b'{"data": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    result = run("openai")
    assert result.exit_code == 2, result.output
    assert "nested too deeply to be a report" in result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit)
