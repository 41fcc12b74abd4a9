"""``state_calls`` and ``state_single_calls``: the calls folded from their rows.

A call of several rows (attempts) is kept as mergeable aggregates (min, max,
sums, bool_or) keyed by ``ckey = hash(call_id)``; a call of one row is its
row, so only its key and row id are kept, and the ``calls`` view projects the
row itself from ``token_usage``. The one-row calls are also counted in
``state_call_rollup`` (:mod:`ledger.analytics.state.call_rollup`) as they
come and go. Why Python and not one SQL text: the merge of a call's old
aggregate with its new rows, and the split into one-row and other calls, are
steps over several tables that a single SELECT cannot express incrementally.
:mod:`ledger.analytics.state.aggregates` calls :func:`fold` and :func:`refold`.
"""

# Every SQL string here is composed from this module's constants and
# ledger.schema's table name, never from input: S608 does not apply.
# ruff: noqa: S608
from __future__ import annotations

from typing import Final

import duckdb

from ledger.analytics.state import call_rollup
from ledger.schema import TABLE_NAME

#: ``state_single_calls``: the key and row id of each call of one row (see _CALL_DUPS).
SINGLE_DDL: Final = "(ckey UBIGINT NOT NULL, id BIGINT NOT NULL)"

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


def fold(con: duckdb.DuckDBPyConnection, src: str, *, fresh: bool) -> None:
    """Fold the calls of ``src``: rows the state does not reflect yet, all below any not folded."""
    if fresh:
        _stage_calls(con, src, "state_single_calls")
        con.execute("INSERT INTO state_calls SELECT * FROM state_new_calls")
        con.execute("DROP TABLE state_new_calls")
        return
    con.execute(f"CREATE OR REPLACE TEMP TABLE state_new_single {SINGLE_DDL}")
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


def refold(con: duckdb.DuckDBPyConnection) -> None:
    """Derive again, from their rows, the calls ``state_touched_rows`` (old and new versions
    of replaced or removed rows) touch."""
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
    for table in ("state_touched_calls", "state_touched_call_rows"):
        con.execute(f"DROP TABLE {table}")
