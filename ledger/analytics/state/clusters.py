"""Per-session attempt and latency sums per upstream: the clusters the verdict's intervals use.

Attempts within one session are correlated (one conversation, one prompt, one
pin), so an error rate or a p95 measured over attempts is less certain than
the attempt count suggests. ``provider_order_verdict`` therefore widens its
intervals by a *design effect* estimated from how the attempts cluster by
session (see ``sql/upstream_clusters.sql``). That needs, per session and
upstream identity, a few sums that merge by addition, kept here in
``state_clusters`` beside the other state tables (:mod:`ledger.analytics.state.aggregates`
folds new rows in and rebuilds it with them):

one row per (requested_model, upstream identity, session_id, actor_id)
    ``attempts`` (rows with attempt >= 1), ``errors`` (those with status
    'error', except abandoned ones: the caller left, no upstream failed),
    ``latencies`` (served attempts with a latency), ``latency_sum`` and
    ``latency_sq`` (their sum and sum of squares);
one row per (requested_model, upstream identity) with ``loose`` true
    the same sums over attempts outside any session (session_id NULL): each
    of them is a cluster of one, so their sums are all the view needs.

Every column is a sum, so new rows merge into a key's row by addition: order
of arrival does not matter (no late-commit special case).

``state_upstream_clusters`` holds the ``upstream_clusters`` view's rows,
computed from ``state_clusters`` at the end of each sync (:func:`summarise`):
no setting enters them, and the verdict reads them twice.
"""

# Every SQL string here is a module constant over our own tables: S608 does not apply.
# ruff: noqa: S608
from __future__ import annotations

import re
from typing import Final

import duckdb

from ledger.analytics.models import views

TABLE: Final = "state_clusters"
SUMMARY: Final = "state_upstream_clusters"
TABLES: Final = (TABLE, SUMMARY)

# The view's own definition (sql/upstream_clusters.sql) with its first CTE, the
# per-session sums computed from the rows, replaced by the sums kept here: the
# formulas stay in one place.
_ROW_SUMS: Final = re.compile(r"\AWITH cluster_sums AS \(.*?\n\),\n", re.DOTALL)


def _summary_sql() -> str:
    body = views.view_body("upstream_clusters").strip()
    summary, found = _ROW_SUMS.subn(f"WITH cluster_sums AS (SELECT * FROM {TABLE}),\n", body)
    if found != 1:
        raise AssertionError("sql/upstream_clusters.sql no longer opens with its cluster_sums CTE")
    return summary


_SUMMARY_SQL: Final = _summary_sql()

DDL: Final = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    ckey UBIGINT NOT NULL, requested_model VARCHAR, upstream VARCHAR, session_id VARCHAR,
    actor_id VARCHAR, loose BOOLEAN NOT NULL, attempts BIGINT NOT NULL, errors BIGINT NOT NULL,
    latencies BIGINT NOT NULL, latency_sum DOUBLE NOT NULL, latency_sq DOUBLE NOT NULL)
"""

_KEY: Final = "requested_model, upstream, session_id, actor_id, loose"

# {src} is the relation of rows to fold in.
_PARTS: Final = f"""
SELECT hash({_KEY}) AS ckey, {_KEY},
    count(*) AS attempts,
    count(*) FILTER (WHERE status = 'error' AND NOT abandoned) AS errors,
    count(latency_ms) FILTER (WHERE served) AS latencies,
    coalesce(sum(latency_ms) FILTER (WHERE served), 0) AS latency_sum,
    coalesce(sum(latency_ms * latency_ms) FILTER (WHERE served), 0) AS latency_sq
FROM (
    SELECT requested_model, coalesce(upstream, provider) AS upstream, session_id,
        CASE WHEN session_id IS NOT NULL THEN actor_id END AS actor_id,
        session_id IS NULL AS loose, status, latency_ms,
        coalesce(error_type = 'abandoned', false) AS abandoned,
        status = 'ok' AND NOT response_cache_hit AS served
    FROM {{src}}
    WHERE attempt >= 1
)
GROUP BY {_KEY}
"""

_SAME_KEY: Final = (
    "o.ckey = n.ckey AND o.requested_model IS NOT DISTINCT FROM n.requested_model "
    "AND o.upstream IS NOT DISTINCT FROM n.upstream "
    "AND o.session_id IS NOT DISTINCT FROM n.session_id "
    "AND o.actor_id IS NOT DISTINCT FROM n.actor_id AND o.loose = n.loose"
)

_MERGED: Final = f"""
SELECT ckey, {_KEY}, CAST(sum(attempts) AS BIGINT), CAST(sum(errors) AS BIGINT),
    CAST(sum(latencies) AS BIGINT), sum(latency_sum), sum(latency_sq)
FROM (SELECT * FROM clusters_old UNION ALL SELECT * FROM clusters_new)
GROUP BY ckey, {_KEY}
"""


def ensure_tables(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(DDL)
    con.execute(f"CREATE TABLE IF NOT EXISTS {SUMMARY} AS SELECT * FROM ({_SUMMARY_SQL}) LIMIT 0")


def summarise(con: duckdb.DuckDBPyConnection) -> None:
    """``state_upstream_clusters`` computed again from ``state_clusters``."""
    con.execute(f"DELETE FROM {SUMMARY}")
    con.execute(f"INSERT INTO {SUMMARY} {_SUMMARY_SQL}")


def fold(con: duckdb.DuckDBPyConnection, src: str, *, fresh: bool) -> None:
    """Add the sums of the rows in relation ``src`` (inside the caller's transaction)."""
    if fresh:
        con.execute(f"INSERT INTO {TABLE} {_PARTS.format(src=src)}")
        return
    con.execute(f"CREATE OR REPLACE TEMP TABLE clusters_new AS {_PARTS.format(src=src)}")
    # Keys seen before: a lookup on the integer key reads one column of the table;
    # only when there are some are their rows read (the key columns guard collisions).
    seen = [
        int(k)
        for (k,) in con.execute(
            f"SELECT ckey FROM {TABLE} WHERE ckey IN (SELECT ckey FROM clusters_new)"
        ).fetchall()
    ]
    if not seen:
        con.execute(f"INSERT INTO {TABLE} SELECT * FROM clusters_new")
        con.execute("DROP TABLE clusters_new")
        return
    # the old rows of those keys, by row id (a hash join on the key, then a delete by rowid)
    con.execute(
        "CREATE OR REPLACE TEMP TABLE clusters_old AS SELECT o.* FROM ("
        f"SELECT rowid AS rid, * FROM {TABLE} WHERE ckey IN (SELECT ckey FROM clusters_new)"
        f") AS o WHERE EXISTS (SELECT 1 FROM clusters_new AS n WHERE {_SAME_KEY})"
    )
    con.execute(f"DELETE FROM {TABLE} WHERE rowid IN (SELECT rid FROM clusters_old)")
    con.execute("ALTER TABLE clusters_old DROP COLUMN rid")
    con.execute(f"INSERT INTO {TABLE} {_MERGED}")
    con.execute("DROP TABLE clusters_new")
    con.execute("DROP TABLE clusters_old")
