"""The sidebar filters change every page's numbers exactly as the analytics Filters do."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from dashboards import fmt
from ledger.analytics import Analytics, Filters
from tests.dashboards.test_app import assert_clean, expected, metrics, open_page
from tests.dashboards.workload import GPT, T0

OVERVIEW, STICKINESS, COST = "screens/overview.py", "screens/stickiness.py", "screens/cost.py"


def test_agent_filter_counts_only_that_agents_calls(workload_url: str, tmp_path: Path) -> None:
    everything = expected(workload_url, tmp_path, OVERVIEW)
    planner = expected(workload_url, tmp_path, OVERVIEW, Filters(actors=("planner",)))
    at = open_page(OVERVIEW)
    at.multiselect(key="filter_actors").set_value(["planner"]).run()
    assert_clean(at)
    shown = metrics(at)
    assert {k: shown[k] for k in planner} == planner
    assert shown["Calls"] != everything["Calls"]


def test_key_sent_filter_leaves_only_keyed_sessions(workload_url: str, tmp_path: Path) -> None:
    keyed = expected(workload_url, tmp_path, STICKINESS, Filters(key_sent=True))
    at = open_page(STICKINESS)
    at.radio(key="filter_key").set_value("Sent").run()
    assert_clean(at)
    shown = metrics(at)
    assert shown["Stickiness with key"] == keyed["Stickiness with key"]
    assert shown["Stickiness without key"] == "–"
    assert shown["Sessions without key"] == "0"


def test_provider_filter_narrows_the_spend(workload_url: str, tmp_path: Path) -> None:
    everything = expected(workload_url, tmp_path, COST)
    anthropic = expected(workload_url, tmp_path, COST, Filters(providers=("anthropic",)))
    at = open_page(COST)
    at.multiselect(key="filter_providers").set_value(["anthropic"]).run()
    assert_clean(at)
    assert metrics(at)["Total spend"] == anthropic["Total spend"] != everything["Total spend"]


def test_model_filter_keeps_one_model_on_the_verdict_page(workload_url: str) -> None:
    at = open_page("screens/upstreams.py")
    assert len(at.main.header) == 2
    at.multiselect(key="filter_models").set_value([GPT]).run()
    assert_clean(at)
    assert [h.value for h in at.main.header] == [fmt.plain(GPT)]


def test_custom_dates_select_whole_utc_days(workload_url: str, tmp_path: Path) -> None:
    at = open_page(OVERVIEW)
    at.selectbox(key="filter_range").set_value("Custom dates").run()
    at.date_input(key="filter_dates").set_value((T0.date(), T0.date())).run()
    assert_clean(at)
    day = T0.replace(hour=0)
    want = expected(workload_url, tmp_path, OVERVIEW, Filters(start=day, end=day + dt.timedelta(1)))
    assert metrics(at)["Calls"] == want["Calls"]
    next_day = T0.date() + dt.timedelta(days=1)
    at.date_input(key="filter_dates").set_value((next_day, next_day)).run()
    assert_clean(at)
    assert any("No ledger rows match" in w.value for w in at.warning)


def test_last_hour_of_an_old_ledger_ends_at_its_latest_row(
    workload_url: str, tmp_path: Path
) -> None:
    """The workload is from 2025: "Last hour" means its last hour, not an empty page."""
    with Analytics(workload_url, path=tmp_path / "expected.duckdb") as a:
        last = a.ledger_options().last_at
    assert last is not None
    end = last.replace(second=0, microsecond=0) + dt.timedelta(minutes=1)
    want = expected(workload_url, tmp_path, OVERVIEW, Filters(start=end - dt.timedelta(hours=1)))
    at = open_page(OVERVIEW)
    at.selectbox(key="filter_range").set_value("Last hour").run()
    assert_clean(at)
    assert metrics(at)["Calls"] == want["Calls"] != "0"
    assert any("latest row" in c.value for c in at.sidebar.caption)


def test_dates_outside_the_data_say_nothing_matches(workload_url: str) -> None:
    at = open_page(STICKINESS)
    at.selectbox(key="filter_range").set_value("Custom dates").run()
    at.date_input(key="filter_dates").set_value((dt.date(2020, 1, 1), dt.date(2020, 1, 2))).run()
    assert_clean(at)
    assert any("No ledger rows match" in w.value for w in at.warning)
    assert not at.metric
