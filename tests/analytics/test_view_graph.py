"""The views' dependency graph is read from their SQL: it has no cycle, and what it reads exists.

Every view is created after the views its SQL reads (its definition's and its
stored variant's), and every relation a view reads is a view, a state table
or a table the analytics file holds, so a typo in a FROM fails here and not
in a user's query.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger.analytics import VIEW_NAMES
from ledger.analytics.models import graph, views
from tests.analytics.builders import migrated_sqlite, open_analytics


def test_every_view_comes_after_the_views_its_sql_reads() -> None:
    seen: set[str] = set()
    for name in VIEW_NAMES:
        assert set(views.VIEW_DEPENDENCIES[name]) <= seen, name
        seen.add(name)
    assert seen == set(views.VIEW_DEPENDENCIES)


def test_the_graph_is_the_sql_not_a_list() -> None:
    assert views.ROW_PARENTS["cost_attribution"] == {"call_groups"}
    assert views.ROW_PARENTS["call_groups"] == {"calls"}
    assert views.ROW_PARENTS["ledger_span"] == frozenset()
    # an intermediate kept as a state table reads it over every row, the rows when filtered
    assert views.materialized_as("attempt_groups") == "state_rollup"
    assert graph.relations_read(views.stored_view_body("attempt_groups")) == {"state_rollup"}
    assert graph.relations_read(views.view_body("attempt_groups")) == {"token_usage"}


def test_a_metric_over_an_intermediate_is_one_text() -> None:
    for name in ("cache_hits", "failed_attempts", "cost_attribution", "overview_totals"):
        assert views.stored_view_sql(name) == views.view_sql(name), name


def test_a_cycle_is_refused_and_named() -> None:
    with pytest.raises(graph.ViewCycle, match="a, b"):
        graph.creation_order({"a": ["b"], "b": ["a"], "c": []})


def test_a_cte_shadowing_a_view_is_not_a_parent() -> None:
    select = "WITH calls AS (SELECT 1 AS x FROM token_usage) SELECT * FROM calls JOIN transitions"
    assert graph.parents(select, VIEW_NAMES) == {"transitions"}


def test_every_relation_a_view_reads_exists_in_the_analytics_file(tmp_path: Path) -> None:
    with open_analytics(migrated_sqlite(tmp_path / "ledger.db"), tmp_path) as analytics:
        relations = (
            "SELECT table_name FROM duckdb_tables() UNION ALL SELECT view_name FROM duckdb_views()"
        )
        held = set(analytics.sql(relations)["table_name"])
    for name in VIEW_NAMES:
        for body in (views.view_body(name), views.stored_view_body(name)):
            assert graph.relations_read(body) <= held, name
