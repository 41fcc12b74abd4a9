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

This module drives the folds, in order, and owns the state's version and
rebuilds; the calls are folded by :mod:`ledger.analytics.state.calls`, the
rollup, latencies and span by :mod:`ledger.analytics.state.rollup`, the
sessions and transitions by :mod:`ledger.analytics.state.session_aggregates`.
Why folds in Python rather than one SQL text each: a merge of a kept aggregate
with new rows, and the retraction of replaced rows, are steps over several
tables within one transaction, which a view cannot express.
"""

# Every SQL string here is composed from this module's constants and
# ledger.schema's table name, never from input: S608 does not apply.
# ruff: noqa: S608
from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Sequence
from typing import Final

import duckdb

from ledger.analytics.state import (
    call_rollup,
    calls,
    clusters,
    decay,
    latency_bands,
    moves,
    rollup,
    session_aggregates,
    steps,
)
from ledger.schema import TABLE_NAME

#: Bump when a state table's shape or meaning changes: older files get rebuilt.
STATE_VERSION: Final = 14
#: When the new rows are at least this share of the table, rebuilding is cheaper.
REBUILD_SHARE: Final = 0.25
#: Rows folded at a time by a rebuild: bounds its memory (see :func:`rebuild`).
REBUILD_CHUNK_ROWS: Final = 2_000_000

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
    f"CREATE TABLE IF NOT EXISTS state_single_calls {calls.SINGLE_DDL}",
    "CREATE TABLE IF NOT EXISTS state_upstreams "
    "(gid INTEGER NOT NULL, requested_model VARCHAR, upstream VARCHAR)",
    "CREATE TABLE IF NOT EXISTS state_latency "
    "(gid INTEGER NOT NULL, latency_ms DOUBLE NOT NULL, id BIGINT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS state_span (first_at TIMESTAMPTZ, last_at TIMESTAMPTZ)",
)


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
    latency_bands.ensure_tables(con)
    clusters.ensure_tables(con)
    moves.SUMS.ensure_table(con)
    decay.SUMS.ensure_table(con)
    call_rollup.SUMS.ensure_table(con)


def _fold(
    con: duckdb.DuckDBPyConnection, src: str, *, fresh: bool, upto: int | None = None
) -> None:
    calls.fold(con, src, fresh=fresh)
    call_rollup.SUMS.merge(con)
    rollup.fold(con, src, fresh=fresh)
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


def _step(con: duckdb.DuckDBPyConnection, work: Callable[[], None]) -> None:
    """``work`` in a transaction of its own, then a checkpoint."""
    steps.in_transaction(con, work)
    steps.checkpoint(con)


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
    calls.refold(con)
    rollup.refold(con)
    session_aggregates.fold(con, "state_touched_rows", rederive=True)
    # The session clusters are sums too, but keyed wider than a row: recomputed
    # from the rows (one aggregate) when rows were replaced or removed.
    con.execute(f"DELETE FROM {clusters.TABLE}")
    clusters.fold(con, TABLE_NAME, fresh=True)
    rollup.refold_span(con)
    con.execute("DROP TABLE state_touched_rows")


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
