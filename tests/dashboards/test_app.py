"""Every page renders over a real ledger and shows the analytics layer's numbers.

The expected figures are computed here straight from ``Analytics`` (on its own
DuckDB file), never from the dashboard's helpers.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from dashboards import fmt
from ledger.analytics import Analytics, Filters
from tests.dashboards.conftest import APP

PAGES = [
    "screens/overview.py",
    "screens/stickiness.py",
    "screens/cache.py",
    "screens/cost.py",
    "screens/upstreams.py",
]


def open_page(page: str) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    if page != PAGES[0]:
        at.switch_page(page).run()
    return at


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def assert_clean(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def _usd(values: pd.Series) -> Decimal:
    return sum((Decimal(v) for v in values if v is not None and not pd.isna(v)), Decimal(0))


def share(numerator: float, denominator: float) -> float | None:
    return None if denominator == 0 else float(numerator) / float(denominator)


def expect_overview(a: Analytics, f: Filters) -> dict[str, str]:
    calls = a.calls(f)
    card = a.upstream_scorecard(f)
    provider_calls = int((~calls["response_cache_hit"]).sum())
    return {
        "Calls": f"{len(calls):,}",
        "Spend": fmt.dollars(_usd(calls["cost_usd"])),
        "Prompt-cache saving": fmt.dollars(a.prompt_cache_saving(f).usd),
        "Response-cache saving": fmt.dollars(a.response_cache_saving(f).usd),
        "Fallback rate": fmt.rate(share(calls["fell_back"].sum(), provider_calls)),
        "Error rate": fmt.rate(share(card["errors"].sum(), card["attempts"].sum())),
        # the figure `ledger report` prints: switches and idle releases
        "Cache lost to stickiness failures": fmt.dollars(a.switch_cost_totals(f).cost_usd),
    }


def expect_stickiness(a: Analytics, f: Filters) -> dict[str, str]:
    agents = a.agent_stickiness(f)
    # "without key" compares like with like: the models some session sent the key for
    agents = agents[agents["requested_model"].isin(agents[agents["key_sent"]]["requested_model"])]
    out = {}
    for sent, label in ((True, "with key"), (False, "without key")):
        part = agents[agents["key_sent"] == sent]
        switched = share(part["switches"].sum(), part["window_transitions"].sum())
        out[f"Stickiness {label}"] = fmt.rate(None if switched is None else 1 - switched)
        out[f"Sessions {label}"] = f"{int(part['sessions'].sum()):,}"
    return out


def expect_cache(a: Analytics, f: Filters) -> dict[str, str]:
    hits = a.cache_hits(f)
    out = {"Response-cache hits": f"{int(hits['response_cache_hits'].sum()):,}"}
    keyed = hits[hits["requested_model"].isin(hits[hits["key_sent"]]["requested_model"])]
    for sent, label in ((True, "with key"), (False, "without key")):
        part = keyed[keyed["key_sent"] == sent]
        out[f"Token hit rate {label}"] = fmt.rate(
            share(part["cache_read_tokens"].sum(), part["input_tokens"].sum())
        )
    out["Call hit rate"] = fmt.rate(share(hits["hit_calls"].sum(), hits["calls"].sum()))
    return out


VERDICT_LABELS = {
    "warranted": "provider.order warranted",
    "not_warranted": "provider.order not warranted",
    "insufficient_data": "insufficient data",
    "does_not_apply": "does not apply",
}


def expect_verdicts(a: Analytics, f: Filters) -> list[tuple[str, str, str, str]]:
    """Per model, in the page's order: (model, verdict label, pinned, best alternative)."""
    verdicts = a.provider_order_verdict(f).sort_values("requested_model")
    return [
        (
            str(v.requested_model),
            VERDICT_LABELS[str(v.verdict)],
            fmt.text(v.pinned_upstream),
            fmt.text(v.best_upstream),
        )
        for v in verdicts.itertuples()
    ]


def expect_cost(a: Analytics, f: Filters) -> dict[str, str]:
    costs = a.cost_attribution(f)
    return {
        "Total spend": fmt.dollars(_usd(costs["cost_usd"])),
        "Fallback calls": f"{int(costs['fallback_calls'].sum()):,}",
    }


EXPECTED: dict[str, Callable[[Analytics, Filters], dict[str, str]]] = {
    "screens/overview.py": expect_overview,
    "screens/stickiness.py": expect_stickiness,
    "screens/cache.py": expect_cache,
    "screens/cost.py": expect_cost,
}


def expected(url: str, tmp_path: Path, page: str, f: Filters | None = None) -> dict[str, str]:
    with Analytics(url, path=tmp_path / "expected.duckdb") as a:
        return EXPECTED[page](a, f or Filters())


@pytest.mark.parametrize("page", list(EXPECTED))
def test_page_shows_the_analytics_numbers(workload_url: str, tmp_path: Path, page: str) -> None:
    want = expected(workload_url, tmp_path, page)
    at = open_page(page)
    assert_clean(at)
    shown = metrics(at)
    assert {label: shown.get(label) for label in want} == want


def test_the_savings_are_checked_on_a_ledger_with_both_caches(
    workload_url: str, tmp_path: Path
) -> None:
    """The overview's savings above are real figures: the workload has both kinds of hits."""
    with Analytics(workload_url, path=tmp_path / "expected.duckdb") as a:
        prompt, response = a.prompt_cache_saving(), a.response_cache_saving()
        hits = int(a.overview_totals()["response_cache_hits"])
    assert hits > 0
    assert prompt.usd is not None and prompt.usd > 0
    assert response.usd is not None and response.usd > 0


@pytest.mark.parametrize("page", PAGES)
def test_every_table_offers_a_csv_download(workload_url: str, page: str) -> None:
    at = open_page(page)
    assert_clean(at)
    tables, downloads = at.dataframe, at.get("download_button")
    assert tables, f"{page} shows no table"
    assert len(downloads) == len(tables), f"{page}: {len(tables)} tables, {len(downloads)} CSVs"


def test_every_page_renders_without_exception(workload_url: str) -> None:
    at = open_page(PAGES[0])
    for page in PAGES:
        at.switch_page(page).run()
        assert_clean(at)
        assert at.title, f"{page} drew nothing"
        assert at.get("vega_lite_chart") or at.get("arrow_vega_lite_chart"), f"{page}: no chart"


BADGE_ORDER = ["warranted", "not_warranted", "insufficient_data", "does_not_apply"]
BADGE_TEXT = {
    "warranted": "Warranted",
    "not_warranted": "Not warranted",
    "insufficient_data": "Insufficient data",
    "does_not_apply": "Does not apply",
}


def strip_rows(at: AppTest) -> list[tuple[str, str]]:
    """(badge text, bold model line) per verdict strip row, top to bottom."""
    bodies = [m.value for m in at.markdown]
    badges = [re.sub(r"^:\w+-badge\[(.*)\]$", r"\1", b) for b in bodies if "-badge[" in b]
    models = [b for b in bodies if b.startswith("**") and b.endswith("**")]
    return list(zip(badges, models[: len(badges)], strict=True))


@pytest.mark.parametrize("page", ["screens/overview.py", "screens/upstreams.py"])
def test_verdict_strip_lists_every_model_warranted_first(
    workload_url: str, tmp_path: Path, page: str
) -> None:
    with Analytics(workload_url, path=tmp_path / "expected.duckdb") as a:
        verdicts = a.provider_order_verdict()
    want = sorted(
        zip(verdicts["verdict"], verdicts["requested_model"], strict=True),
        key=lambda v: (BADGE_ORDER.index(v[0]), v[1]),
    )
    at = open_page(page)
    assert_clean(at)
    assert strip_rows(at) == [(BADGE_TEXT[v], f"**{fmt.plain(m)}**") for v, m in want]


def test_verdict_page_states_each_models_reason_as_plain_text(
    workload_url: str, tmp_path: Path
) -> None:
    with Analytics(workload_url, path=tmp_path / "expected.duckdb") as a:
        verdicts = a.provider_order_verdict()
    at = open_page("screens/upstreams.py")
    assert_clean(at)
    models = sorted(verdicts["requested_model"])
    assert [h.value for h in at.main.header] == [fmt.plain(m) for m in models]
    texts = [t.value for t in at.text]
    for reason in verdicts["reason"]:
        assert reason in texts
    by_model = verdicts.set_index("requested_model")
    for model in models:
        pinned = fmt.text(by_model.loc[model, "pinned_upstream"])
        best = fmt.text(by_model.loc[model, "best_upstream"])
        assert f"Pinned upstream: {pinned} · best alternative: {best}" in texts


def test_drill_down_goes_from_an_agent_to_its_sessions_to_the_attempts(
    workload_url: str, tmp_path: Path
) -> None:
    """Two picks: an agent row, then one of its sessions; the attempts table is that session's."""
    with Analytics(workload_url, path=tmp_path / "expected.duckdb") as a:
        sessions = a.session_stickiness()
    at = open_page("screens/stickiness.py")
    assert_clean(at)
    scope = f"{abs(hash(Filters())):x}"  # the page keys its drill-down by the filters
    agent_key = f"drill_agent_{scope}"
    agents = at.dataframe[1].value  # after the per-agent table
    row = int(agents.index[agents["actor_id"] == "coder"][0])
    at.session_state[agent_key] = {"selection": {"rows": [row], "columns": []}}
    at.run()
    assert_clean(at)
    session_table = at.dataframe[2].value
    assert set(session_table["actor_id"]) == {"coder"}
    mine = sessions[sessions["actor_id"] == "coder"]
    assert len(session_table) == int((mine["calls"] > 0).sum())
    at.session_state[f"drill_session_{scope}_coder"] = {"selection": {"rows": [1], "columns": []}}
    at.run()
    assert_clean(at)
    picked = session_table.iloc[1]
    with Analytics(workload_url, path=tmp_path / "expected.duckdb") as a:
        want = a.session_attempts(
            None, str(picked["session_id"]), "coder", str(picked["requested_model"])
        )
    shown = at.dataframe[3].value
    assert list(shown["started_at"]) == list(want["started_at"])
    assert list(shown["upstream"]) == list(want["upstream"])
    assert metrics(at)["Switches"] == str(int(picked["switches"]))
    assert any(fmt.plain(picked["session_id"]) in m.value for m in at.markdown)
