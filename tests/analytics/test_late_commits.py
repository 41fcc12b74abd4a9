"""Rows committed late below the copy's last id: never lost, however far below.

On PostgreSQL a writer's batch (up to 5,000 rows) takes its ids when it
inserts and commits when it is done; another process's rows with higher ids
may be copied meanwhile. The ids are set explicitly here to stage that order.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.analytics.builders import insert_rows, open_analytics, served
from tests.analytics.test_incremental import assert_views_match_rows

S = {"session_id": "s", "actor_id": "a"}


def ids_of(analytics: object) -> list[int]:
    return [int(i) for i in analytics.sql("SELECT id FROM token_usage ORDER BY id").id]  # type: ignore[attr-defined]


def test_a_row_committed_far_below_the_last_id_is_copied(ledger_url: str, tmp_path: Path) -> None:
    insert_rows(ledger_url, [served(0, "A", id=1, **S), served(2, "A", id=5001, **S)])
    with open_analytics(ledger_url, tmp_path) as analytics:
        insert_rows(ledger_url, [served(1, "B", id=2, **S)])
        assert analytics.refresh().rows_added == 1
        assert ids_of(analytics) == [1, 2, 5001]
        assert analytics.session_stickiness().switches[0] == 2  # A, B, A
        assert_views_match_rows(analytics)
        assert analytics.refresh().up_to_date_already


def test_a_whole_batch_committed_after_a_later_one_is_copied(
    ledger_url: str, tmp_path: Path
) -> None:
    first = [served(i / 100, "A", id=i) for i in range(1, 11)]
    later = [served(60 + i / 100, "A", id=5010 + i) for i in range(1, 11)]
    insert_rows(ledger_url, first + later)
    with open_analytics(ledger_url, tmp_path) as analytics:
        # the batch that took ids 11..5010 commits last
        insert_rows(ledger_url, [served(30 + i / 1000, "B", id=i) for i in range(11, 5011)])
        result = analytics.refresh()
        assert (result.rows_added, result.rows_total) == (5000, 5020)
        assert ids_of(analytics) == list(range(1, 5021))
        assert analytics.sql("SELECT count(*) AS n FROM ledger_gaps").n[0] == 0
        assert_views_match_rows(analytics)


def test_ids_never_committed_cost_nothing_and_a_late_one_is_copied(
    ledger_url: str, tmp_path: Path
) -> None:
    # id 2 was rolled back (or lost to an ON CONFLICT replay): it never arrives
    insert_rows(ledger_url, [served(0, "A", id=1), served(1, "A", id=3)])
    with open_analytics(ledger_url, tmp_path) as analytics:
        for _ in range(2):
            assert analytics.refresh().up_to_date_already
        # row ids are keys, not a log: a missing id is no gap to wait for
        assert analytics.sql("SELECT count(*) AS n FROM ledger_gaps").n[0] == 0
        insert_rows(ledger_url, [served(2, "A", id=2)])
        assert analytics.refresh().rows_added == 1
        assert ids_of(analytics) == [1, 2, 3]


def test_interleaved_writers_lose_nothing(ledger_url: str, tmp_path: Path) -> None:
    evens = [served(i / 10, "A", id=i, **S) for i in range(2, 42, 2)]
    insert_rows(ledger_url, evens)
    with open_analytics(ledger_url, tmp_path) as analytics:
        # the other writer's odd ids commit, half now, half later
        insert_rows(ledger_url, [served(i / 10, "B", id=i, **S) for i in range(1, 21, 2)])
        assert analytics.refresh().rows_added == 10
        assert_views_match_rows(analytics)
        insert_rows(ledger_url, [served(i / 10, "B", id=i, **S) for i in range(21, 41, 2)])
        assert analytics.refresh().rows_added == 10
        assert ids_of(analytics) == list(range(1, 41))
        assert analytics.refresh().up_to_date_already
        assert_views_match_rows(analytics)


@pytest.mark.parametrize("late_id", [3, 1], ids=["above-first-id", "below-first-id"])
def test_a_late_row_of_a_folded_session_rederives_the_whole_session(
    ledger_url: str, tmp_path: Path, late_id: int
) -> None:
    # S's rows 2 and 9 are folded; its row late_id commits afterwards, served before them
    others = [served(i, "C", id=i, session_id="other") for i in range(10, 20)]
    insert_rows(ledger_url, [served(1, "A", id=2, **S), served(3, "A", id=9, **S), *others])
    with open_analytics(ledger_url, tmp_path) as analytics:
        insert_rows(ledger_url, [served(0.5, "B", id=late_id, **S)])
        assert analytics.refresh().rows_added == 1
        stickiness = analytics.session_stickiness().query("session_id == 's'")
        assert stickiness.calls.tolist() == [3]
        assert stickiness.switches.tolist() == [1]  # B, A, A
        assert_views_match_rows(analytics)
