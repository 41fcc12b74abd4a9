"""``state_rollup``, ``state_upstreams``/``state_latency`` and ``state_span``: folds by row.

``state_rollup`` is the ``attempt_groups`` view (``sql/attempt_groups.sql``)
kept incrementally: that view's own text run over the new rows, its sums
added, and those of replaced rows, as the state held them, subtracted
(:func:`refold`). The served latencies are kept per (model, upstream) for the
quantiles; ``state_span`` the first and last ``started_at``. Python keeps the
merge (a group's sums plus the new ones, a group with no rows left dropped):
a view cannot update the table it reads.
:mod:`ledger.analytics.state.aggregates` drives them.
"""

# Every SQL string here is composed from this module's constants, never from input.
# ruff: noqa: S608
from __future__ import annotations

from typing import Final

import duckdb

from ledger.analytics.models import views
from ledger.analytics.state import latency_bands
from ledger.schema import TABLE_NAME

_ROLLUP_KEYS: Final = (
    "actor_id, requested_model, provider, upstream, key_sent, status, "
    "response_cache_hit, is_attempt, usage_reported, abandoned, model, error_type"
)
# The rows of relation {src} grouped as the attempt_groups view groups token_usage: that
# view's own text over {src}, so the state and a filtered read cannot disagree.
_ROLLUP_PARTS: Final = (
    f"SELECT * FROM (WITH {TABLE_NAME} AS (SELECT * FROM {{src}}) "
    f"{views.view_body('attempt_groups')})"
)
# Parts may be negative (rows removed or replaced): a group left with no rows
# goes, and a cost sum over no costed row is NULL, as sum() over rows says.
_ROLLUP_MERGE: Final = f"""
SELECT {_ROLLUP_KEYS}, rows, input_tokens, cache_read_tokens, cache_write_tokens, read_rows,
    latency_rows, CASE WHEN cost_rows = 0 THEN NULL ELSE cost_usd END, costed_input_tokens,
    cost_rows
FROM (
    SELECT {_ROLLUP_KEYS},
        CAST(sum(rows) AS BIGINT) AS rows, CAST(sum(input_tokens) AS BIGINT) AS input_tokens,
        CAST(sum(cache_read_tokens) AS BIGINT) AS cache_read_tokens,
        CAST(sum(cache_write_tokens) AS BIGINT) AS cache_write_tokens,
        CAST(sum(read_rows) AS BIGINT) AS read_rows,
        CAST(sum(latency_rows) AS BIGINT) AS latency_rows, sum(cost_usd) AS cost_usd,
        CAST(sum(costed_input_tokens) AS BIGINT) AS costed_input_tokens,
        CAST(sum(cost_rows) AS BIGINT) AS cost_rows
    FROM (SELECT * FROM state_rollup UNION ALL SELECT * FROM state_new_rollup)
    GROUP BY {_ROLLUP_KEYS}
)
WHERE rows <> 0
"""
_ROLLUP_NEGATED: Final = f"""
SELECT {_ROLLUP_KEYS}, -rows, -input_tokens, -cache_read_tokens, -cache_write_tokens,
    -read_rows, -latency_rows, -cost_usd, -costed_input_tokens, -cost_rows
FROM ({_ROLLUP_PARTS.format(src="state_removed_rows")})
"""

# -- latencies ------------------------------------------------------------------
_SERVED_LATENCY: Final = """
SELECT requested_model, coalesce(upstream, provider) AS upstream, latency_ms, id
FROM {src}
WHERE attempt >= 1 AND status = 'ok' AND NOT response_cache_hit AND latency_ms IS NOT NULL
"""
_NEW_UPSTREAMS: Final = f"""
INSERT INTO state_upstreams
SELECT (SELECT coalesce(max(gid), 0) FROM state_upstreams) + row_number() OVER (), *
FROM (
    SELECT DISTINCT requested_model, upstream FROM ({_SERVED_LATENCY}) AS n
    WHERE NOT EXISTS (
        SELECT 1 FROM state_upstreams AS g
        WHERE g.requested_model = n.requested_model AND g.upstream = n.upstream
    )
)
"""
_NEW_LATENCIES: Final = f"""
CREATE OR REPLACE TEMP TABLE state_new_latency AS
SELECT g.gid, l.latency_ms, l.id
FROM ({_SERVED_LATENCY}) AS l
JOIN state_upstreams AS g USING (requested_model, upstream)
"""

# -- span -----------------------------------------------------------------------
# The held span widened by {src}'s rows. Rows replaced or removed may have been the
# first or last: the span is then read again from every row (_refold, which reads
# every row for the clusters anyway).
_SPAN: Final = """
CREATE OR REPLACE TEMP TABLE state_new_span AS
SELECT min(first_at) AS first_at, max(last_at) AS last_at
FROM (
    SELECT first_at, last_at FROM state_span
    UNION ALL
    SELECT min(started_at), max(started_at) FROM {src}
)
"""


def _fold_span(con: duckdb.DuckDBPyConnection, src: str) -> None:
    con.execute(_SPAN.format(src=src))
    con.execute("DELETE FROM state_span")
    con.execute("INSERT INTO state_span SELECT * FROM state_new_span")
    con.execute("DROP TABLE state_new_span")


def _fold_rollup(con: duckdb.DuckDBPyConnection, src: str, *, fresh: bool) -> None:
    if fresh:
        con.execute(f"INSERT INTO state_rollup {_ROLLUP_PARTS.format(src=src)}")
        return
    con.execute(f"CREATE OR REPLACE TEMP TABLE state_new_rollup AS {_ROLLUP_PARTS.format(src=src)}")
    con.execute(f"CREATE OR REPLACE TEMP TABLE state_merged_rollup AS {_ROLLUP_MERGE}")
    con.execute("DELETE FROM state_rollup")
    con.execute("INSERT INTO state_rollup SELECT * FROM state_merged_rollup")
    con.execute("DROP TABLE state_new_rollup")
    con.execute("DROP TABLE state_merged_rollup")


def _fold_latency(con: duckdb.DuckDBPyConnection, src: str) -> None:
    con.execute(_NEW_UPSTREAMS.format(src=src))
    con.execute(_NEW_LATENCIES.format(src=src))
    con.execute("INSERT INTO state_latency SELECT * FROM state_new_latency")
    latency_bands.add(con, "state_new_latency")
    con.execute("DROP TABLE state_new_latency")


def _unfold_latency(con: duckdb.DuckDBPyConnection) -> None:
    """Remove the latencies of ``state_removed_rows`` (by row id)."""
    con.execute(
        "CREATE OR REPLACE TEMP TABLE state_gone_latency AS SELECT * FROM state_latency "
        "WHERE id IN (SELECT id FROM state_removed_rows)"
    )
    con.execute("DELETE FROM state_latency WHERE id IN (SELECT id FROM state_gone_latency)")
    latency_bands.remove(con, "state_gone_latency")
    con.execute("DROP TABLE state_gone_latency")


def fold(con: duckdb.DuckDBPyConnection, src: str, *, fresh: bool) -> None:
    """Fold the rows of relation ``src`` (none of them folded before)."""
    _fold_rollup(con, src, fresh=fresh)
    _fold_latency(con, src)
    _fold_span(con, src)


def refold(con: duckdb.DuckDBPyConnection) -> None:
    """Retract ``state_removed_rows`` (as the state held them), add ``state_new_rows``."""
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE state_new_rollup AS "
        f"{_ROLLUP_PARTS.format(src='state_new_rows')} UNION ALL {_ROLLUP_NEGATED}"
    )
    con.execute(f"CREATE OR REPLACE TEMP TABLE state_merged_rollup AS {_ROLLUP_MERGE}")
    con.execute("DELETE FROM state_rollup")
    con.execute("INSERT INTO state_rollup SELECT * FROM state_merged_rollup")
    con.execute("DROP TABLE state_new_rollup")
    con.execute("DROP TABLE state_merged_rollup")
    _unfold_latency(con)
    _fold_latency(con, "state_new_rows")


def refold_span(con: duckdb.DuckDBPyConnection) -> None:
    """The span read again from every row (a removed row may have been the first or last)."""
    con.execute("DELETE FROM state_span")
    _fold_span(con, TABLE_NAME)
