"""The landing page's experiments strip: each running policy, its arms and its outcome."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from dashboards.fmt import plain
from ledger.policies import start_policy
from ledger.store.engine import ENV_URL, make_engine
from tests.analytics.builders import insert_rows, served
from tests.dashboards.conftest import APP

MODEL = "anthropic/claude-sonnet-4.6"


def _arms(policy_id: int, cost: dict[str, str]) -> list[Any]:
    rows = []
    for s in range(60):
        arm = "treatment" if s % 2 else "holdout"
        for turn in range(3):
            price = Decimal(cost[arm]) + Decimal(turn) / 100_000
            rows.append(
                served(
                    s * 3 + turn,
                    "A",
                    session_id=f"s-{s}",
                    actor_id="planner",
                    requested_model=MODEL,
                    cost_usd=price,
                    cost_source="provider",
                    policy_id=policy_id,
                    arm=arm,
                )
            )
    return rows


@pytest.mark.parametrize(
    ("treatment", "box", "said"),
    [
        ("0.0030", "error", "worse than the holdout beyond its interval"),
        ("0.0010", "success", "better: the treatment costs less per attempt"),
    ],
)
def test_a_running_policy_shows_its_arms_and_outcome_on_the_landing_page(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
    treatment: str, box: str, said: str,
) -> None:  # fmt: skip
    engine = make_engine(sqlite_url)
    policy_id = start_policy(
        engine, model=MODEL, provider={"ignore": ["amazon-bedrock"]}, holdout_share=0.5,
        by="ana", reason=None, now=dt.datetime(2026, 12, 1, 9, tzinfo=dt.UTC),
    )  # fmt: skip
    engine.dispose()
    insert_rows(sqlite_url, _arms(policy_id, {"treatment": treatment, "holdout": "0.0020"}))
    monkeypatch.setenv(ENV_URL, sqlite_url)
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert "Experiments running" in [h.value for h in at.subheader]
    (shown,) = [e.value for e in getattr(at, box) if "Experiment" in e.value]
    model, change = plain(MODEL), plain('provider {"ignore": ["amazon-bedrock"]}')
    assert f"Experiment {policy_id} on {model} since 2026-12-01 09:00 UTC: {change}" in shown
    assert "30 treatment / 30 holdout sessions" in shown and said in shown


def test_no_policy_no_strip(workload_url: str) -> None:
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    assert not at.exception
    assert "Experiments running" not in [h.value for h in at.subheader]
