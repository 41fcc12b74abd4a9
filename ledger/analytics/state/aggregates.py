"""Aggregates kept beside ``token_usage`` so the views read thousands of rows, not millions.

The views of contract §2 are defined over rows (``sql/<name>.sql``), but
recomputing them from ten million rows takes seconds each. Sync therefore keeps
*state tables* that hold everything the views need in mergeable form, and the
views stored in the file (``sql/stored/<name>.sql``) read those instead:

``state_calls`` / ``state_single_calls``
    one row per call of several rows (attempts): the ``calls`` columns as
    mergeable aggregates (min, max, sums, bool_or), keyed by ``ckey =
    hash(call_id)`` for cheap lookups; a call of one row is its row, so only
    its key and row id are kept (``state_single_calls``) and the ``calls``
    view projects the row itself from ``token_usage``.
``state_sessions``
    one row per session (session_id, actor_id, requested_model), numbered by
    ``sid``: served calls, distinct upstream lists, the last served attempt
    and the transition counts that do not depend on the idle window.
``state_transitions``
    one row per transition (its session by ``sid`` alone) with its gap,
    whether the identity changed, the later attempt's input and cache-read
    tokens and the previous attempt's cache reads (what ``switch_costs`` says
    a switch lost); the idle window (a setting) is applied when the views read
    them.
``state_clusters`` / ``state_upstream_clusters``
    per session and upstream identity, attempt, error and latency sums: the
    session clusters the verdict's design effects come from, and those
    design effects per upstream, computed at the end of each sync
    (:mod:`ledger.analytics.state.clusters`).
``state_rollup``
    row counts and token/cost sums per (agent, model, provider, upstream,
    key_sent, status, response_cache_hit, attempt >= 1, usage_reported,
    abandoned, served model, error_type): ``cache_hits``, the scorecard's
    counts, the verdict's keyless hit rate, ``failed_attempts`` and
    ``prompt_cache_reads`` are sums over it. Rates take their token sums and denominators
    from the ``usage_reported`` rows only, so a missing usage never counts as
    zero; an ``abandoned`` attempt (the caller left) is no upstream error.
``state_upstreams`` / ``state_latency``
    served latencies per (requested_model, upstream identity) as small
    integers and doubles, for the quantiles and the p95 intervals; bands of
    each group around its p50 and p95 are also kept apart, where the
    quantiles and the interval are read (:mod:`ledger.analytics.state.latency_bands`).
``state_call_rollup``
    the one-row calls counted and their costs summed per agent, provider,
    model and outcome (:mod:`ledger.analytics.state.call_rollup`): what
    ``call_groups`` and the cost views read instead of every row.
``state_moves``
    the changed transitions (switches and idle releases) counted per model,
    agent, day and whole second of gap (:mod:`ledger.analytics.state.moves`).
``state_decay``
    every transition counted and its tokens summed per model, key_sent and
    whole second of gap (:mod:`ledger.analytics.state.decay`): what ``cache_decay``
    and ``cache_decay_by_key`` read.
``state_span``
    one row: the first and last ``started_at`` (``ledger_span``; the verdict
    scales its effect to a month by it), so no view scans the column.

Nothing here depends on a setting, so ``UPDATE ledger_settings`` takes effect
at once. New rows are folded in incrementally: a call's or session's existing
aggregate is merged with the new rows' one. What does not merge is derived
again from the rows, by key: a session whose new served attempt sorts
*before* its last known one (a late commit, a skewed clock), and every call
and session a changed or deleted row touches (:func:`fold_changes`).
``state_meta`` records the row count and max id the state reflects; when the
table no longer matches (the file came from an older version, or someone
edited ``token_usage`` by hand), the state is rebuilt from the rows.
"""

# Every SQL string here is composed from this module's constants and
# ledger.schema's table name, never from input: S608 does not apply.
# ruff: noqa: S608
from __future__ import annotations

import contextlib
import functools
import itertools
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Final

import duckdb

from ledger.analytics.copy import gaps
from ledger.analytics.state import (
    call_rollup,
    clusters,
    decay,
    latency_bands,
    moves,
    session_aggregates,
)
from ledger.schema import TABLE_NAME

#: Bump when a state table's shape or meaning changes: older files get rebuilt.
STATE_VERSION: Final = 14
#: When the new rows are at least this share of the table, rebuilding is cheaper.
REBUILD_SHARE: Final = 0.25
#: Rows folded at a time by a rebuild: bounds its memory (see :func:`rebuild`).
REBUILD_CHUNK_ROWS: Final = 2_000_000

#: ``state_single_calls``: the key and row id of each call of one row (see _CALL_DUPS).
_SINGLE_DDL: Final = "(ckey UBIGINT NOT NULL, id BIGINT NOT NULL)"

STATE_TABLES: Final = (
    "state_calls",
    "state_single_calls",
    "state_sessions",
    "state_transitions",
    "state_rollup",
    "state_upstreams",
    "state_latency",
    "state_span",
    *latency_bands.TABLES,
    moves.TABLE,
    decay.TABLE,
    call_rollup.TABLE,
)

#: State tables older versions kept and this one does not: dropped with the rest.
_RETIRED_TABLES: Final = ("state_latency_tail",)

STATE_DDL: Final = (
    "CREATE TABLE IF NOT EXISTS state_meta "
    "(version INTEGER NOT NULL, rows_total BIGINT NOT NULL, max_id BIGINT)",
    """CREATE TABLE IF NOT EXISTS state_calls (
        ckey UBIGINT NOT NULL, call_id VARCHAR NOT NULL, started_at TIMESTAMPTZ,
        session_id VARCHAR, actor_id VARCHAR, requested_provider VARCHAR,
        requested_model VARCHAR, responding_provider VARCHAR, upstream VARCHAR,
        attempts BIGINT, max_ok_attempt SMALLINT, any_ok BOOLEAN, response_cache_hit BOOLEAN,
        input_tokens BIGINT, output_tokens BIGINT, cache_read_tokens BIGINT,
        cache_write_tokens BIGINT, cost_usd DECIMAL(38, 10), latency_ms DOUBLE,
        key_sent BOOLEAN)""",
    """CREATE TABLE IF NOT EXISTS state_sessions (
        sid BIGINT NOT NULL, skey UBIGINT NOT NULL, session_id VARCHAR NOT NULL,
        actor_id VARCHAR, requested_model VARCHAR NOT NULL, first_id BIGINT NOT NULL,
        key_sent BOOLEAN, calls BIGINT NOT NULL, upstreams VARCHAR[] NOT NULL,
        attempt_upstreams VARCHAR[] NOT NULL,
        last STRUCT(s TIMESTAMPTZ, a SMALLINT, i BIGINT, u VARCHAR),
        transitions BIGINT NOT NULL, changes BIGINT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS state_transitions (
        sid BIGINT NOT NULL,
        previous_started_at TIMESTAMPTZ, started_at TIMESTAMPTZ, previous_upstream VARCHAR,
        upstream VARCHAR, key_sent BOOLEAN, gap_s DOUBLE, changed BOOLEAN,
        input_tokens BIGINT, cache_read_tokens BIGINT, usage_reported BOOLEAN,
        previous_cache_read_tokens BIGINT)""",
    """CREATE TABLE IF NOT EXISTS state_rollup (
        actor_id VARCHAR, requested_model VARCHAR, provider VARCHAR, upstream VARCHAR,
        key_sent BOOLEAN, status VARCHAR, response_cache_hit BOOLEAN, is_attempt BOOLEAN,
        usage_reported BOOLEAN, abandoned BOOLEAN, model VARCHAR, error_type VARCHAR,
        rows BIGINT, input_tokens BIGINT,
        cache_read_tokens BIGINT, cache_write_tokens BIGINT,
        read_rows BIGINT, latency_rows BIGINT, cost_usd DECIMAL(38, 10),
        costed_input_tokens BIGINT, cost_rows BIGINT)""",
    f"CREATE TABLE IF NOT EXISTS state_single_calls {_SINGLE_DDL}",
    "CREATE TABLE IF NOT EXISTS state_upstreams "
    "(gid INTEGER NOT NULL, requested_model VARCHAR, upstream VARCHAR)",
    "CREATE TABLE IF NOT EXISTS state_latency "
    "(gid INTEGER NOT NULL, latency_ms DOUBLE NOT NULL, id BIGINT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS state_span (first_at TIMESTAMPTZ, last_at TIMESTAMPTZ)",
)

# -- calls ----------------------------------------------------------------------
# {src} is the relation of rows to fold in: token_usage itself, or the new rows.
_CALL_PARTS: Final = """
SELECT
    hash(call_id) AS ckey, call_id, min(started_at) AS started_at,
    any_value(session_id) AS session_id, any_value(actor_id) AS actor_id,
    any_value(requested_provider) AS requested_provider,
    any_value(requested_model) AS requested_model,
    max(provider) FILTER (WHERE status = 'ok') AS responding_provider,
    max(upstream) FILTER (WHERE status = 'ok') AS upstream,
    count(*) FILTER (WHERE attempt >= 1) AS attempts,
    max(attempt) FILTER (WHERE status = 'ok') AS max_ok_attempt,
    bool_or(status = 'ok') AS any_ok,
    bool_or(response_cache_hit) AS response_cache_hit,
    CAST(sum(input_tokens) AS BIGINT) AS input_tokens,
    CAST(sum(output_tokens) AS BIGINT) AS output_tokens,
    CAST(sum(cache_read_tokens) AS BIGINT) AS cache_read_tokens,
    CAST(sum(cache_write_tokens) AS BIGINT) AS cache_write_tokens,
    sum(cost_usd) AS cost_usd, sum(latency_ms) AS latency_ms,
    bool_or(session_key IS NOT NULL) AS key_sent
FROM {src}
GROUP BY call_id
"""

# Most calls are one row (one attempt), and such a call's aggregate is a projection
# of its row: storing it copied the row (most of a first sync's state writing).
# state_calls therefore keeps only calls of several rows (or that had several once);
# state_single_calls keeps the other calls' key and row id, which is how a later fold
# finds that a call it meets already has a row. The calls view reads the single-row
# calls from token_usage itself (sql/stored/calls.sql projects them as below).
# Staging {src}: keys seen twice or more (hash collisions included: sorted out by call_id).
_CALL_DUPS: Final = """
CREATE OR REPLACE TEMP TABLE state_call_dups AS
SELECT ckey FROM (SELECT hash(call_id) AS ckey FROM {src}) GROUP BY ckey HAVING count(*) > 1
"""
_NEW_SINGLES: Final = """
INSERT INTO {single}
SELECT hash(call_id), id FROM {src} WHERE hash(call_id) NOT IN (SELECT ckey FROM state_call_dups)
"""
_NEW_CALLS: Final = "CREATE OR REPLACE TEMP TABLE state_new_calls AS " + _CALL_PARTS.replace(
    "FROM {src}", ", count(*) AS n_rows, min(id) AS first_id\nFROM {src}"
)
_DUP_ROWS: Final = "(SELECT * FROM {src} WHERE hash(call_id) IN (SELECT ckey FROM state_call_dups))"

# Merging two aggregates of one call: the same functions over the parts.
_CALL_MERGE: Final = """
SELECT
    ckey, call_id, min(started_at), any_value(session_id), any_value(actor_id),
    any_value(requested_provider), any_value(requested_model), max(responding_provider),
    max(upstream), CAST(sum(attempts) AS BIGINT), max(max_ok_attempt), bool_or(any_ok),
    bool_or(response_cache_hit), CAST(sum(input_tokens) AS BIGINT),
    CAST(sum(output_tokens) AS BIGINT), CAST(sum(cache_read_tokens) AS BIGINT),
    CAST(sum(cache_write_tokens) AS BIGINT), sum(cost_usd), sum(latency_ms), bool_or(key_sent)
FROM (SELECT * FROM state_old_calls UNION ALL {parts})
GROUP BY ckey, call_id
"""

# -- rollup ---------------------------------------------------------------------
_ROLLUP_KEYS: Final = (
    "actor_id, requested_model, provider, upstream, key_sent, status, "
    "response_cache_hit, is_attempt, usage_reported, abandoned, model, error_type"
)
_ROLLUP_PARTS: Final = f"""
SELECT {_ROLLUP_KEYS},
    count(*) AS rows,
    CAST(sum(input_tokens) AS BIGINT) AS input_tokens,
    CAST(sum(cache_read_tokens) AS BIGINT) AS cache_read_tokens,
    CAST(sum(cache_write_tokens) AS BIGINT) AS cache_write_tokens,
    count(*) FILTER (WHERE cache_read_tokens > 0) AS read_rows,
    count(latency_ms) AS latency_rows,
    sum(cost_usd) AS cost_usd,
    CAST(coalesce(sum(input_tokens) FILTER (WHERE cost_usd IS NOT NULL), 0) AS BIGINT)
        AS costed_input_tokens,
    count(cost_usd) AS cost_rows
FROM (
    SELECT *, session_key IS NOT NULL AS key_sent, attempt >= 1 AS is_attempt,
        coalesce(error_type = 'abandoned', false) AS abandoned
    FROM {{src}}
)
GROUP BY {_ROLLUP_KEYS}
"""
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


def _one(con: duckdb.DuckDBPyConnection, sql: str, params: Sequence[object] = ()) -> int:
    row = con.execute(sql, list(params)).fetchone()
    return 0 if row is None or row[0] is None else int(row[0])


def ensure_tables(con: duckdb.DuckDBPyConnection) -> None:
    if con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'state_meta'"
    ).fetchall()[0][0]:
        stored = con.execute("SELECT max(version) FROM state_meta").fetchall()[0][0]
        if stored is not None and stored != STATE_VERSION:
            # Another shape: dropped and created anew (then rebuilt, as not current).
            for table in (*STATE_TABLES, *clusters.TABLES, *_RETIRED_TABLES):
                con.execute(f"DROP TABLE IF EXISTS {table}")
            con.execute("DELETE FROM state_meta")
    for ddl in STATE_DDL:
        con.execute(ddl)
    gaps.ensure_table(con)
    latency_bands.ensure_tables(con)
    clusters.ensure_tables(con)
    moves.SUMS.ensure_table(con)
    decay.SUMS.ensure_table(con)
    call_rollup.SUMS.ensure_table(con)


def _stage_calls(con: duckdb.DuckDBPyConnection, src: str, single: str) -> None:
    """Sort the calls of ``src`` (all of their rows) into one-row calls, added to the table
    ``single`` as (ckey, id), and ``state_new_calls``: the aggregates of the others.
    One-row calls added to ``state_single_calls`` itself are counted in the call rollup
    here; staged elsewhere, when they are stored (:func:`_store_staged`)."""
    con.execute(_CALL_DUPS.format(src=src))
    con.execute(_NEW_SINGLES.format(src=src, single=single))
    con.execute(_NEW_CALLS.format(src=_DUP_ROWS.format(src=src)))
    if single == "state_single_calls":
        call_rollup.SUMS.add(
            con,
            f"(SELECT * FROM {src} WHERE hash(call_id) NOT IN (SELECT ckey FROM state_call_dups) "
            "OR id IN (SELECT first_id FROM state_new_calls WHERE n_rows = 1))",
        )
    # keys shared by distinct calls of one row each (a hash collision): one-row calls too
    con.execute(f"INSERT INTO {single} SELECT ckey, first_id FROM state_new_calls WHERE n_rows = 1")
    con.execute("DELETE FROM state_new_calls WHERE n_rows = 1")
    con.execute("ALTER TABLE state_new_calls DROP COLUMN n_rows")
    con.execute("ALTER TABLE state_new_calls DROP COLUMN first_id")
    con.execute("DROP TABLE state_call_dups")


def _store_staged(con: duckdb.DuckDBPyConnection, src: str) -> None:
    staged = f"(SELECT * FROM {src} WHERE id IN (SELECT id FROM state_new_single))"
    call_rollup.SUMS.add(con, staged)
    con.execute("INSERT INTO state_single_calls SELECT * FROM state_new_single")
    con.execute("INSERT INTO state_calls SELECT * FROM state_new_calls")
    con.execute("DROP TABLE state_new_single")
    con.execute("DROP TABLE state_new_calls")


_STAGED_KEYS: Final = (
    "(SELECT ckey FROM state_new_single UNION ALL SELECT ckey FROM state_new_calls)"
)


def _fold_calls(con: duckdb.DuckDBPyConnection, src: str, *, fresh: bool) -> None:
    """Fold the calls of ``src``: rows the state does not reflect yet, all below any not folded."""
    if fresh:
        _stage_calls(con, src, "state_single_calls")
        con.execute("INSERT INTO state_calls SELECT * FROM state_new_calls")
        con.execute("DROP TABLE state_new_calls")
        return
    con.execute(f"CREATE OR REPLACE TEMP TABLE state_new_single {_SINGLE_DDL}")
    _stage_calls(con, src, "state_new_single")
    # Calls seen before: a join on the integer key reads one column of each table;
    # only when there are some are their rows read (call_id tells hash collisions apart).
    held = con.execute(
        f"SELECT ckey, id FROM state_single_calls WHERE ckey IN {_STAGED_KEYS}"
    ).fetchall()
    seen = {
        int(k)
        for (k,) in con.execute(
            f"SELECT ckey FROM state_calls WHERE ckey IN {_STAGED_KEYS}"
        ).fetchall()
    }
    if held or seen:
        _merge_seen_calls(
            con, src, sorted(seen | {int(k) for k, _ in held}), [int(i) for _, i in held]
        )
    _store_staged(con, src)


def _merge_seen_calls(
    con: duckdb.DuckDBPyConnection, src: str, keys: list[int], ids: list[int]
) -> None:
    """Merge the staged calls that already had rows (``keys``: theirs; ``ids``: the rows of
    the one-row calls among the held keys) with what the state held of them, into
    ``state_calls``; they leave the staged tables and ``state_single_calls``."""
    con.execute(
        "CREATE OR REPLACE TEMP TABLE state_seen_calls AS "
        "SELECT call_id FROM state_new_calls WHERE list_contains(CAST($keys AS UBIGINT[]), ckey) "
        f"UNION ALL SELECT r.call_id FROM state_new_single AS s JOIN {src} AS r USING (id) "
        "WHERE list_contains(CAST($keys AS UBIGINT[]), s.ckey)",
        {"keys": keys},
    )
    # the held rows of one-row calls, found by id; those of another call share a key only
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE state_old_rows AS SELECT * FROM {TABLE_NAME} "
        "WHERE id BETWEEN $lo AND $hi AND list_contains(CAST($ids AS BIGINT[]), id) "
        "AND call_id IN (SELECT call_id FROM state_seen_calls)",
        {"lo": min(ids, default=0), "hi": max(ids, default=-1), "ids": ids},
    )
    con.execute(
        "CREATE OR REPLACE TEMP TABLE state_old_calls AS SELECT * FROM state_calls "
        "WHERE list_contains(CAST($keys AS UBIGINT[]), ckey) "
        "AND call_id IN (SELECT call_id FROM state_seen_calls)",
        {"keys": keys},
    )
    con.execute(
        "CREATE OR REPLACE TEMP TABLE state_joined_calls AS SELECT DISTINCT call_id FROM "
        "(SELECT call_id FROM state_old_rows UNION ALL SELECT call_id FROM state_old_calls)"
    )
    # the held one-row calls that gained rows leave state_single_calls (and the rollup)
    con.execute(
        "DELETE FROM state_single_calls WHERE list_contains(CAST($ids AS BIGINT[]), id) "
        "AND id IN (SELECT id FROM state_old_rows)",
        {"ids": ids},
    )
    call_rollup.SUMS.retract(con, "state_old_rows")
    con.execute(
        "DELETE FROM state_calls WHERE list_contains(CAST($keys AS UBIGINT[]), ckey) "
        "AND call_id IN (SELECT call_id FROM state_old_calls)",
        {"keys": keys},
    )
    joined_rows = (
        f"(SELECT * FROM {src} WHERE call_id IN (SELECT call_id FROM state_joined_calls) "
        "UNION ALL SELECT * FROM state_old_rows)"
    )
    parts = f"SELECT * FROM ({_CALL_PARTS.format(src=joined_rows)})"
    con.execute(f"INSERT INTO state_calls {_CALL_MERGE.format(parts=parts)}")
    con.execute(
        "DELETE FROM state_new_calls WHERE call_id IN (SELECT call_id FROM state_joined_calls)"
    )
    con.execute(
        f"DELETE FROM state_new_single WHERE id IN (SELECT id FROM {src} "
        "WHERE call_id IN (SELECT call_id FROM state_joined_calls))"
    )
    for table in ("state_seen_calls", "state_old_rows", "state_old_calls", "state_joined_calls"):
        con.execute(f"DROP TABLE {table}")


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


def _fold(
    con: duckdb.DuckDBPyConnection, src: str, *, fresh: bool, upto: int | None = None
) -> None:
    _fold_calls(con, src, fresh=fresh)
    call_rollup.SUMS.merge(con)
    _fold_rollup(con, src, fresh=fresh)
    _fold_latency(con, src)
    _fold_span(con, src)
    session_aggregates.fold(con, src, upto=upto, fresh=fresh)
    clusters.fold(con, src, fresh=fresh)


def _write_meta(con: duckdb.DuckDBPyConnection) -> None:
    table = con.execute(f"SELECT count(*), max(id) FROM {TABLE_NAME}").fetchone()
    rows, max_id = table if table is not None else (0, None)
    con.execute("DELETE FROM state_meta")
    con.execute("INSERT INTO state_meta VALUES (?, ?, ?)", [STATE_VERSION, rows, max_id])


def _chunk_bounds(con: duckdb.DuckDBPyConnection) -> list[int]:
    """Ids that cut ``token_usage`` into chunks of about REBUILD_CHUNK_ROWS rows."""
    count = _one(con, f"SELECT count(*) FROM {TABLE_NAME}")
    if count == 0:
        return []
    pieces = -(-count // REBUILD_CHUNK_ROWS)
    cuts = [i / pieces for i in range(1, pieces)]
    row = con.execute(
        f"SELECT min(id) - 1, quantile_disc(id, CAST(? AS DOUBLE[])), max(id) FROM {TABLE_NAME}",
        [cuts],
    ).fetchall()[0]
    return [int(row[0]), *sorted({int(c) for c in row[1] or []}), int(row[2])]


def _fold_range(
    con: duckdb.DuckDBPyConnection, low: int, high: int, *, fresh: bool, whole: bool = False
) -> None:
    """Fold the rows with ids in ``(low, high]``; ``whole``: they are every row of the table.

    The rows are read in place, each fold reading its own columns: the copy is in id
    order, so the id range skips the other row groups, and a temporary copy of millions
    of rows (every column) cost more than the folds read.
    """
    src = TABLE_NAME if whole else f"(SELECT * FROM {TABLE_NAME} WHERE id > {low} AND id <= {high})"
    _fold(con, src, fresh=fresh, upto=high)


def _clear(con: duckdb.DuckDBPyConnection) -> None:
    for table in (*STATE_TABLES, *clusters.TABLES, "state_meta"):
        con.execute(f"DELETE FROM {table}")


def rebuild(con: duckdb.DuckDBPyConnection) -> None:
    """Recompute every state table from ``token_usage`` (inside the caller's transaction).

    The rows are folded in id ranges of about REBUILD_CHUNK_ROWS, as a sync
    would fold them: aggregating ten million rows at once takes several GiB,
    a few million at a time a fraction of it, and the result is the same.
    """
    _clear(con)
    # No view relies on the tables' row order, and keeping it costs memory on
    # million-row group-bys; restored for the session's own queries after.
    con.execute("SET preserve_insertion_order = false")
    try:
        bounds = _chunk_bounds(con)
        for n, (low, high) in enumerate(itertools.pairwise(bounds)):
            _fold_range(con, low, high, fresh=n == 0, whole=len(bounds) == 2)
    finally:
        con.execute("RESET preserve_insertion_order")
    _finish(con)


def _finish(con: duckdb.DuckDBPyConnection) -> None:
    clusters.summarise(con)
    _write_meta(con)


def checkpoint(con: duckdb.DuckDBPyConnection) -> None:
    """Write what committed transactions left in memory to the file, if DuckDB can now.

    Only memory is at stake (the WAL already holds the data), so a checkpoint
    DuckDB refuses (another transaction in the way) is not worth failing for.
    """
    with contextlib.suppress(duckdb.TransactionException):
        con.execute("CHECKPOINT")


@contextlib.contextmanager
def one_thread(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """DuckDB on one thread for the block (the setting is the database's), then as before."""
    (threads,) = con.execute("SELECT current_setting('threads')").fetchall()[0]
    con.execute("SET threads = 1")
    try:
        yield
    finally:
        con.execute(f"SET threads = {int(threads)}")


@contextlib.contextmanager
def memory_at_most(
    con: duckdb.DuckDBPyConnection, limit: str, configured: str | None
) -> Iterator[None]:
    """DuckDB's memory limit (the database's) lowered to ``limit`` for the block, then set
    back to ``configured`` (what the file was opened with: DuckDB shows its limit rounded,
    so it is not read back). Nothing changes when ``configured`` is None or not higher."""
    if configured is None or _bytes(configured) <= _bytes(limit):
        yield
        return
    con.execute(f"SET memory_limit = '{_bytes(limit)}B'")
    try:
        yield
    finally:
        con.execute(f"SET memory_limit = '{_bytes(configured)}B'")


_SIZE: Final = re.compile(r"\s*([0-9.]+)\s*([KMGT]?)(I?)B\s*", re.IGNORECASE)


def _bytes(size: str) -> int:
    """Bytes in a DuckDB size setting: ``'3GB'``, ``'512 MiB'``, ``'100B'``."""
    match = _SIZE.fullmatch(size)
    if match is None:
        raise ValueError(f"not a memory size: {size!r}")
    number, prefix, binary = match.groups()
    power = "KMGT".index(prefix.upper()) + 1 if prefix else 0
    return int(float(number) * ((1024 if binary else 1000) ** power))


def in_transaction(con: duckdb.DuckDBPyConnection, work: Callable[[], None]) -> None:
    """``work`` in a DuckDB transaction of its own: all of it, or none."""
    con.execute("BEGIN TRANSACTION")
    try:
        work()
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise


def _step(con: duckdb.DuckDBPyConnection, work: Callable[[], None]) -> None:
    """``work`` in a transaction of its own, then a checkpoint."""
    in_transaction(con, work)
    checkpoint(con)


def rebuild_in_steps(con: duckdb.DuckDBPyConnection) -> None:
    """:func:`rebuild` outside any transaction, one committed step per chunk of rows.

    DuckDB keeps what a transaction wrote in memory until it is checkpointed,
    so one transaction over ten million rows peaks at several GiB; committing
    and checkpointing each chunk bounds it. ``state_meta`` is written last: if
    the rebuild is interrupted, the state is not current and is rebuilt again.
    """
    _step(con, lambda: _clear(con))
    con.execute("SET preserve_insertion_order = false")
    try:
        bounds = _chunk_bounds(con)
        for n, (low, high) in enumerate(itertools.pairwise(bounds)):
            fold = functools.partial(
                _fold_range, con, low, high, fresh=n == 0, whole=len(bounds) == 2
            )
            _step(con, fold)
        _step(con, functools.partial(_finish, con))
    finally:
        con.execute("RESET preserve_insertion_order")


def is_current(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether the state reflects exactly the rows ``token_usage`` holds now."""
    meta = con.execute("SELECT version, rows_total, max_id FROM state_meta").fetchall()
    # fetchall: a half-read result would keep the connection from registering Arrow data
    (table,) = con.execute(f"SELECT count(*), max(id) FROM {TABLE_NAME}").fetchall()
    return len(meta) == 1 and meta[0] == (STATE_VERSION, *table)


def _refold(con: duckdb.DuckDBPyConnection) -> None:
    """Fold changes that replaced or removed rows: what they touch is derived again.

    Calls and sessions touched by an old or a new version are recomputed from
    their rows (by key, wherever their ids are); the rollup takes the new rows'
    sums minus the old ones'; the old rows' latencies go by id.
    """
    con.execute(
        "CREATE OR REPLACE TEMP TABLE state_touched_rows AS "
        "SELECT * FROM state_removed_rows UNION ALL SELECT * FROM state_new_rows"
    )
    con.execute(
        "CREATE OR REPLACE TEMP TABLE state_touched_calls AS "
        "SELECT DISTINCT hash(call_id) AS ckey, call_id FROM state_touched_rows"
    )
    # every row the touched calls have now: they are derived again from those
    con.execute(
        "CREATE OR REPLACE TEMP TABLE state_touched_call_rows AS SELECT * FROM "
        f"{TABLE_NAME} WHERE call_id IN (SELECT call_id FROM state_touched_calls)"
    )
    con.execute(
        "DELETE FROM state_calls WHERE ckey IN (SELECT ckey FROM state_touched_calls) "
        "AND call_id IN (SELECT call_id FROM state_touched_calls)"
    )
    # a one-row call's entry goes by its row: one of the old versions, or a row it still has
    gone = (
        "(SELECT id FROM state_single_calls WHERE ckey IN (SELECT ckey FROM state_touched_calls) "
        "AND (id IN (SELECT id FROM state_removed_rows) "
        "OR id IN (SELECT id FROM state_touched_call_rows)))"
    )
    # the call rollup held them as the state did: an old version where there is one
    call_rollup.SUMS.retract(
        con,
        f"(SELECT * FROM state_removed_rows WHERE id IN {gone} UNION ALL "
        f"SELECT * FROM state_touched_call_rows WHERE id IN {gone} "
        "AND id NOT IN (SELECT id FROM state_removed_rows))",
    )
    con.execute(f"DELETE FROM state_single_calls WHERE id IN {gone}")
    _stage_calls(con, "state_touched_call_rows", "state_single_calls")
    call_rollup.SUMS.merge(con)
    con.execute("INSERT INTO state_calls SELECT * FROM state_new_calls")
    con.execute("DROP TABLE state_new_calls")
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE state_new_rollup AS "
        f"{_ROLLUP_PARTS.format(src='state_new_rows')} UNION ALL {_ROLLUP_NEGATED}"
    )
    con.execute(f"CREATE OR REPLACE TEMP TABLE state_merged_rollup AS {_ROLLUP_MERGE}")
    con.execute("DELETE FROM state_rollup")
    con.execute("INSERT INTO state_rollup SELECT * FROM state_merged_rollup")
    _unfold_latency(con)
    _fold_latency(con, "state_new_rows")
    session_aggregates.fold(con, "state_touched_rows", rederive=True)
    # The session clusters are sums too, but keyed wider than a row: recomputed
    # from the rows (one aggregate) when rows were replaced or removed.
    con.execute(f"DELETE FROM {clusters.TABLE}")
    clusters.fold(con, TABLE_NAME, fresh=True)
    con.execute("DELETE FROM state_span")
    _fold_span(con, TABLE_NAME)
    for table in (
        "state_touched_rows",
        "state_touched_calls",
        "state_touched_call_rows",
        "state_new_rollup",
        "state_merged_rollup",
    ):
        con.execute(f"DROP TABLE {table}")


def fold_changes(con: duckdb.DuckDBPyConnection) -> None:
    """Fold one sync's changes into the state, inside the sync's transaction.

    ``state_removed_rows``: the versions of the changed rows the copy held
    before (now gone from ``token_usage``); ``state_new_rows``: their current
    versions (now in it). Call only when the state matched the table before.
    """
    new = _one(con, "SELECT count(*) FROM state_new_rows")
    removed = _one(con, "SELECT count(*) FROM state_removed_rows")
    total = _one(con, f"SELECT count(*) FROM {TABLE_NAME}")
    if new + removed >= REBUILD_SHARE * total:
        rebuild(con)
        return
    if not (new or removed):
        _write_meta(con)
        return
    if removed:
        _refold(con)
    else:  # only rows the copy never held: their aggregates merge
        _fold(con, "state_new_rows", fresh=False)
    _finish(con)
