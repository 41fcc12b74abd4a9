"""Stickiness on hand-built ledgers: every expected figure was worked out by hand."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tests.analytics.builders import (
    edit_copy,
    failed,
    insert_rows,
    open_analytics,
    response_cache_row,
    served,
)


def planner(session: str, key: bool) -> dict[str, object]:
    return {
        "session_id": session,
        "actor_id": "planner",
        "session_key": f"app:{session}:planner" if key else None,
    }


def stickiness_ledger() -> list[dict[str, object]]:
    s1, s2, s3, s4 = (
        planner("s1", True),
        planner("s2", False),
        planner("s3", False),
        planner("s4", True),
    )
    fail_over = "c-s2-2"
    return [
        # s1 (key): A A | B B (switch at 2) | 15-minute gap | C C (idle release) ...
        served(0, "A", **s1),
        served(1, "A", **s1),
        served(2, "B", **s1),
        served(3, "B", **s1),
        served(18, "C", **s1),
        served(19, "C", **s1),
        failed(19.5, "C", **s1),  # failed attempts are not served: no transition
        response_cache_row(20, **s1),  # response-cache hits are not served either
        served(21, "C", **s1),
        # s2 (no key): a call that fails over to Anthropic direct, then comes back
        served(0, "A", **s2),
        failed(1, "A", call_id=fail_over, **s2),
        served(1.01, None, call_id=fail_over, attempt=2, provider="anthropic", **s2),
        served(2, "A", **s2),
        # s3 (no key): pinned on A; s4 (key): a single call
        served(0, "A", **s3),
        served(5, "A", **s3),
        served(0, "A", **s4),
        # a direct provider call without any session: no transitions at all
        served(
            0,
            None,
            actor_id="coder",
            requested_provider="openai",
            provider="openai",
            requested_model="gpt-4o-mini",
        ),
    ]


@pytest.fixture
def sessions(ledger_url: str, tmp_path: Path) -> pd.DataFrame:
    insert_rows(ledger_url, stickiness_ledger())
    with open_analytics(ledger_url, tmp_path) as analytics:
        return analytics.session_stickiness().set_index("session_id").sort_index()


def test_a_switch_within_the_window_and_an_idle_release_after_a_gap(sessions: pd.DataFrame) -> None:
    s1 = sessions.loc["s1"]
    assert (s1.calls, s1.transitions, s1.window_transitions) == (7, 6, 5)
    assert (s1.switches, s1.idle_releases, s1.distinct_upstreams) == (1, 1, 3)
    assert s1.stickiness == pytest.approx(1 - 1 / 5)
    assert bool(s1.key_sent)


def test_a_session_that_fails_over_and_comes_back_switches_twice(sessions: pd.DataFrame) -> None:
    s2 = sessions.loc["s2"]
    assert (s2.calls, s2.transitions, s2.switches, s2.idle_releases) == (3, 2, 2, 0)
    assert s2.distinct_upstreams == 2  # A and "anthropic" (no upstream: the provider)
    assert s2.stickiness == 0.0
    assert not bool(s2.key_sent)


def test_single_call_session_has_no_stickiness(sessions: pd.DataFrame) -> None:
    s4 = sessions.loc["s4"]
    assert (s4.calls, s4.transitions) == (1, 0)
    assert pd.isna(s4.stickiness)


def test_rows_without_a_session_form_no_session(sessions: pd.DataFrame) -> None:
    assert sorted(sessions.index) == ["s1", "s2", "s3", "s4"]


def test_agent_stickiness_splits_by_the_sessions_key(ledger_url: str, tmp_path: Path) -> None:
    insert_rows(ledger_url, stickiness_ledger())
    with open_analytics(ledger_url, tmp_path) as analytics:
        agents = analytics.agent_stickiness()
    rows = agents[agents.actor_id == "planner"].set_index("key_sent")
    with_key, without = rows.loc[True], rows.loc[False]
    assert (with_key.sessions, with_key.calls, with_key.switches, with_key.idle_releases) == (
        2,
        8,
        1,
        1,
    )
    assert with_key.stickiness == pytest.approx(0.8)
    assert with_key.pinned_session_share == 0.0  # only s1 has >= 2 calls, on 3 upstreams
    assert with_key.avg_distinct_upstreams == pytest.approx(2.0)  # (3 + 1) / 2
    assert (without.sessions, without.calls, without.transitions, without.switches) == (2, 5, 3, 2)
    assert without.stickiness == pytest.approx(1 / 3)
    assert without.pinned_session_share == 0.5  # s3 pinned, s2 not
    assert without.avg_distinct_upstreams == pytest.approx(1.5)
    assert "coder" not in set(agents.actor_id)


def test_the_idle_window_is_a_setting_the_views_read(ledger_url: str, tmp_path: Path) -> None:
    insert_rows(ledger_url, stickiness_ledger())
    # A 20-minute window turns s1's idle release into a switch: 2 switches in 6.
    with open_analytics(ledger_url, tmp_path, idle_window_s=1200) as analytics:
        s1 = analytics.session_stickiness().set_index("session_id").loc["s1"]
        assert (s1.switches, s1.idle_releases, s1.window_transitions) == (2, 0, 6)
        assert s1.stickiness == pytest.approx(1 - 2 / 6)
        edit_copy(analytics, "UPDATE ledger_settings SET value = 30 WHERE name = 'idle_window_s'")
        s1 = analytics.session_stickiness().set_index("session_id").loc["s1"]
        assert (s1.switches, s1.idle_releases) == (0, 2)  # every gap is a minute or more


def test_each_setting_is_described_by_its_own_sentences(ledger_url: str, tmp_path: Path) -> None:
    with open_analytics(ledger_url, tmp_path) as analytics:
        described = analytics.sql("SELECT name, description FROM ledger_settings")
    by_name = dict(zip(described["name"], described["description"], strict=True))
    assert by_name["latency_margin"] == "relative p95 excess (0.25 = 25 %) between the same bounds."
    for name, description in by_name.items():
        others = [other for other in by_name if other != name and f"``{other}``:" in description]
        assert not others, (name, others)  # not the paragraph around it


def test_an_agent_whose_keyed_sessions_all_failed_has_no_empty_keyless_row(
    ledger_url: str, tmp_path: Path
) -> None:
    reviewer = {"actor_id": "reviewer", "session_key": "app:r:reviewer"}
    insert_rows(
        ledger_url,
        [
            served(0, "A", session_id="r1", **reviewer),
            served(1, "A", session_id="r1", **reviewer),
            # a session whose only attempt failed: nothing served says the key was sent
            failed(2, "A", session_id="r2", **reviewer),
        ],
    )
    with open_analytics(ledger_url, tmp_path) as analytics:
        agents = analytics.agent_stickiness()
        sessions = analytics.session_stickiness()
    assert agents[["actor_id", "key_sent", "sessions", "calls"]].values.tolist() == [
        ["reviewer", True, 1, 2]
    ]
    assert set(sessions.session_id) == {"r1", "r2"}  # the failed session is still counted there
