"""``ledger budget check --notify`` and ``ledger budget watch`` against a loopback webhook,
over real ledgers (SQLite and PostgreSQL): one alert per budget, threshold and day."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from ledger.budgets.evaluation import start_of_day
from ledger.budgets.notify import sent_alerts
from ledger.cli import cli
from ledger.store.engine import make_engine
from tests.analytics.builders import insert_rows, row
from tests.llm_loopback import LoopbackLLM, Reply

BUDGETS = """
[tool.ledger.budgets.planner_daily]
kind = "agent_day"
agent = "planner"
limit_usd = 5
warn_at = 0.8
"""


@pytest.fixture
def project(ledger_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LEDGER_DATABASE_URL", ledger_url)
    monkeypatch.setenv("LEDGER_ANALYTICS_PATH", str(tmp_path / "analytics.duckdb"))
    monkeypatch.delenv("LEDGER_BUDGETS_FILE", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text(BUDGETS)
    return tmp_path


@pytest.fixture
def webhook(server: LoopbackLLM) -> LoopbackLLM:
    server.default = Reply(body=b"ok", headers={"content-type": "text/plain"})
    return server


def spend(url: str, *costs: str) -> None:
    """Planner spend today (at midnight UTC, so it is today whenever the test runs)."""
    midnight = start_of_day(dt.datetime.now(dt.UTC))
    insert_rows(
        url,
        [
            row(
                0,
                started_at=midnight,
                actor_id="planner",
                cost_usd=Decimal(c),
                cost_source="provider",
            )
            for c in costs
        ],
    )


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, ["budget", *args], env={"COLUMNS": "200"})


def check(url: str, *extra: str) -> Result:
    return run("check", "--notify", url + "/hooks/T000/B000/secret-token", *extra)


def test_crossing_80_then_100_percent_sends_exactly_two_alerts(
    project: Path, ledger_url: str, webhook: LoopbackLLM
) -> None:
    spend(ledger_url, "2.00", "2.10")  # $4.10: 82 %
    first = check(webhook.url)
    assert first.exit_code == 0, first.output
    assert (
        "alert sent to http://127.0.0.1: Budget planner_daily is past its warning" in first.stderr
    )
    assert "secret-token" not in first.output
    assert len(webhook.requests) == 1
    assert check(webhook.url).exit_code == 0
    assert len(webhook.requests) == 1  # a rerun sends none

    spend(ledger_url, "1.40")  # $5.50: over
    over = check(webhook.url)
    assert over.exit_code == 1  # the check's own verdict, alerts or not
    assert "is over its limit" in over.stderr
    assert check(webhook.url).exit_code == 1
    assert [r.body["ledger"]["threshold"] for r in webhook.requests] == ["warning", "limit"]

    warning, limit = (r.body for r in webhook.requests)
    assert webhook.requests[0].path == "/hooks/T000/B000/secret-token"
    assert warning["text"].startswith("Budget planner_daily is past its warning at 80%: ")
    assert "$4.1000 of $5.0000 (82%) for planner" in warning["text"]
    facts = warning["ledger"]
    assert (facts["budget"], facts["subject"], facts["spent_usd"], facts["limit_usd"]) == (
        "planner_daily",
        "planner",
        "4.1000000000",
        "5",
    )
    assert (
        facts["warn_at"] == "0.8" and facts["period"] == dt.datetime.now(dt.UTC).date().isoformat()
    )
    assert Decimal(facts["burn_usd_per_hour"]) > 0
    fields = {f["title"]: f["value"] for f in warning["attachments"][0]["fields"]}
    assert set(fields) == {"Spend", "Limit", "Burn rate", "Limit reached"}
    assert fields["Burn rate"].endswith("/h")
    assert limit["attachments"][0]["color"] == "#d00000"
    assert limit["ledger"]["limit_reached_at"] is not None
    assert fields_of(limit)["Limit reached"] == "reached"

    engine = make_engine(ledger_url)
    try:
        assert [(a["threshold"], a["subject"]) for a in sent_alerts(engine)] == [
            ("warning", "planner"),
            ("limit", "planner"),
        ]
    finally:
        engine.dispose()


def fields_of(body: dict[str, object]) -> dict[str, str]:
    attachments = body["attachments"]
    assert isinstance(attachments, list)
    return {f["title"]: f["value"] for f in attachments[0]["fields"]}


def test_a_500_is_retried_and_the_alert_delivered(
    project: Path, ledger_url: str, webhook: LoopbackLLM
) -> None:
    spend(ledger_url, "4.50")
    webhook.queue(Reply(status=500), Reply(status=503))
    result = check(webhook.url, "--retries", "3")
    assert result.exit_code == 0
    assert len(webhook.requests) == 3
    assert "alert sent" in result.stderr
    assert check(webhook.url).exit_code == 0
    assert len(webhook.requests) == 3


def test_a_webhook_that_keeps_failing_is_reported_and_changes_no_exit_code(
    project: Path, ledger_url: str, webhook: LoopbackLLM
) -> None:
    spend(ledger_url, "6.00")
    webhook.queue(*[Reply(status=500)] * 2)
    failed = check(webhook.url, "--retries", "1")
    assert failed.exit_code == 1  # exceeded, as without --notify
    assert "alert NOT delivered to http://127.0.0.1 after 2 attempt(s) (HTTP 500)" in failed.stderr
    assert len(webhook.requests) == 2
    # Nothing was recorded as sent: the next run delivers it.
    retried = check(webhook.url)
    assert retried.exit_code == 1 and "alert sent" in retried.stderr
    assert len(webhook.requests) == 3


def test_a_4xx_is_not_retried(project: Path, ledger_url: str, webhook: LoopbackLLM) -> None:
    spend(ledger_url, "4.50")
    webhook.queue(Reply(status=404))
    result = check(webhook.url, "--retries", "3")
    assert result.exit_code == 0
    assert "after 1 attempt(s) (HTTP 404)" in result.stderr
    assert len(webhook.requests) == 1


def test_an_unreachable_webhook_is_reported_without_its_secret(
    project: Path, ledger_url: str
) -> None:
    from ledger.simulator.server import free_port

    spend(ledger_url, "4.50")
    result = check(f"http://127.0.0.1:{free_port()}", "--retries", "0")
    assert result.exit_code == 0
    assert "alert NOT delivered" in result.stderr and "ConnectError" in result.stderr
    assert "secret-token" not in result.output


def test_no_alert_below_the_warning(project: Path, ledger_url: str, webhook: LoopbackLLM) -> None:
    spend(ledger_url, "3.99")
    assert check(webhook.url).exit_code == 0
    assert webhook.requests == []


def test_watch_checks_on_a_timer_and_alerts_once(
    project: Path, ledger_url: str, webhook: LoopbackLLM
) -> None:
    spend(ledger_url, "4.20")
    result = run("watch", "--every", "0.2s", "--notify", webhook.url, "--max-runs", "3")
    assert result.exit_code == 0, result.output
    assert len(webhook.requests) == 1
    assert result.stderr.count("alert sent") == 1


def test_watch_rejects_a_bad_interval(project: Path, webhook: LoopbackLLM) -> None:
    result = run("watch", "--every", "soon", "--notify", webhook.url, "--max-runs", "1")
    assert result.exit_code == 2
    assert "expected a duration such as 30s, 5m or 1h" in result.output
