"""The Budgets page over the recorded workload: today's burn, the closest subjects, history."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from dashboards import fmt
from ledger.analytics import Analytics
from ledger.budgets import load_config
from ledger.budgets.config import ENV_BUDGETS_FILE
from ledger.budgets.status import budget_status
from tests.dashboards.conftest import APP

PAGE = "screens/budgets.py"
BUDGETS = """
[budgets.agents_daily]
kind = "agent_day"
limit_usd = 0.01

[budgets.turn]
kind = "turn"
mean_usd = 0.5
"""


def open_budgets() -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    at.switch_page(PAGE).run()
    return at


def test_budgets_page_shows_each_budgets_burn_on_the_ledgers_last_day(
    workload_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    budgets = tmp_path / "ledger.toml"
    budgets.write_text(BUDGETS)
    monkeypatch.setenv(ENV_BUDGETS_FILE, str(budgets))
    with Analytics(workload_url, path=tmp_path / "expected.duckdb") as a:
        last = a.sql("SELECT max(started_at) AS t FROM token_usage")["t"][0].to_pydatetime()
        end_of_day = dt.datetime.combine(last.astimezone(dt.UTC).date(), dt.time.max, dt.UTC)
        want = budget_status(a, load_config(budgets), at=end_of_day)
    at = open_budgets()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    shown = {m.label: m.value for m in at.metric}
    label = f"Budget lines on {end_of_day:%b %d}"  # a past day is not "today"
    assert shown[label] == fmt.count(len(want))
    assert shown["Over or projected over"] == fmt.count(sum(1 for s in want if s.used > 1))
    assert shown["Closest to its limit"] == fmt.rate(want[0].used)
    assert want[0].subject is not None
    assert any(want[0].subject in c.value for c in at.caption)
    table = at.dataframe[0].value
    assert list(table["subject"].fillna("")) == [s.subject or "" for s in want]
    assert at.get("vega_lite_chart") or at.get("arrow_vega_lite_chart")
    assert at.selectbox(key="budgets_history").options == ["agents_daily", "turn"]


def test_budgets_page_explains_how_to_configure_when_there_are_none(
    workload_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ENV_BUDGETS_FILE, raising=False)
    monkeypatch.chdir(tmp_path)
    at = open_budgets()
    assert not at.exception
    assert any("No budgets are configured" in i.value for i in at.info)
    assert at.code and "[tool.ledger.budgets" in at.code[0].value


def test_budgets_page_names_the_mistake_in_a_bad_file(
    workload_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    budgets = tmp_path / "ledger.toml"
    budgets.write_text(BUDGETS.replace("0.01", "-1"))
    monkeypatch.setenv(ENV_BUDGETS_FILE, str(budgets))
    at = open_budgets()
    assert not at.exception
    (error,) = at.error
    assert "budgets.agents_daily.limit_usd" in error.value and str(budgets) in error.value
