"""Aggregates kept beside ``token_usage`` so the views read thousands of rows, not millions.

The views of contract §2 are defined over rows (``views/<name>.sql``), but
recomputing them from ten million rows takes seconds each. Sync therefore keeps
*state tables* that hold everything the views need in mergeable form, and the
views stored in the file (``views/stored/<name>.sql``) read those instead:

``state_calls``
    one row per call: the ``calls`` columns as mergeable aggregates (min, max,
    sums, bool_or), keyed by ``ckey = hash(call_id)`` for cheap lookups.
``state_sessions``
    one row per session (session_id, actor_id, requested_model), numbered by
    ``sid``: served calls, distinct upstream lists, the last served attempt
    and the transition counts that do not depend on the idle window.
``state_transitions``
    one row per transition with its gap and whether the identity changed; the
    idle window (a setting) is applied when the views read them.
``state_rollup``
    row counts and token/cost sums per (agent, model, provider, upstream,
    key_sent, status, response_cache_hit, attempt >= 1): ``cache_hits``, the
    scorecard's counts and the verdict's keyless hit rate are sums over it.
``state_upstreams`` / ``state_latency``
    served latencies per (requested_model, upstream identity) as small
    integers and doubles, for the quantiles and the p95 intervals.

Nothing here depends on a setting, so ``UPDATE ledger_settings`` takes effect
at once. New rows are folded in incrementally: a call's or session's existing
aggregate is merged with the new rows' one. The one thing that does not merge
is a session whose new served attempt sorts *before* its last known one (a
late commit, a skewed clock): such sessions are recomputed from their rows.
``state_meta`` records the row count and max id the state reflects; when the
table no longer matches (the file came from an older version, or someone
edited ``token_usage`` by hand), the state is rebuilt from the rows.
"""

# Every SQL string here is composed from this module's constants and
# ledger.schema's table name, never from input: S608 does not apply.
# ruff: noqa: S608
from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import duckdb

from ledger.schema import TABLE_NAME

#: Bump when a state table's shape or meaning changes: older files get rebuilt.
STATE_VERSION: Final = 1
#: When the new rows are at least this share of the table, rebuilding is cheaper.
REBUILD_SHARE: Final = 0.25

STATE_TABLES: Final = (
    "state_calls",
    "state_sessions",
    "state_transitions",
    "state_rollup",
    "state_upstreams",
    "state_latency",
)

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
        sid BIGINT NOT NULL, session_id VARCHAR, actor_id VARCHAR, requested_model VARCHAR,
        previous_started_at TIMESTAMPTZ, started_at TIMESTAMPTZ, previous_upstream VARCHAR,
        upstream VARCHAR, key_sent BOOLEAN, gap_s DOUBLE, changed BOOLEAN)""",
    """CREATE TABLE IF NOT EXISTS state_rollup (
        actor_id VARCHAR, requested_model VARCHAR, provider VARCHAR, upstream VARCHAR,
        key_sent BOOLEAN, status VARCHAR, response_cache_hit BOOLEAN, is_attempt BOOLEAN,
        rows BIGINT, input_tokens BIGINT, cache_read_tokens BIGINT, cache_write_tokens BIGINT,
        read_rows BIGINT, latency_rows BIGINT, cost_usd DECIMAL(38, 10),
        costed_input_tokens BIGINT)""",
    "CREATE TABLE IF NOT EXISTS state_upstreams "
    "(gid INTEGER NOT NULL, requested_model VARCHAR, upstream VARCHAR)",
    "CREATE TABLE IF NOT EXISTS state_latency (gid INTEGER NOT NULL, latency_ms DOUBLE NOT NULL)",
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

# Merging two aggregates of one call: the same functions over the parts.
_CALL_MERGE: Final = """
SELECT
    ckey, call_id, min(started_at), any_value(session_id), any_value(actor_id),
    any_value(requested_provider), any_value(requested_model), max(responding_provider),
    max(upstream), CAST(sum(attempts) AS BIGINT), max(max_ok_attempt), bool_or(any_ok),
    bool_or(response_cache_hit), CAST(sum(input_tokens) AS BIGINT),
    CAST(sum(output_tokens) AS BIGINT), CAST(sum(cache_read_tokens) AS BIGINT),
    CAST(sum(cache_write_tokens) AS BIGINT), sum(cost_usd), sum(latency_ms), bool_or(key_sent)
FROM (SELECT * FROM state_old_calls UNION ALL SELECT * FROM state_new_calls)
GROUP BY ckey, call_id
"""

# -- rollup ---------------------------------------------------------------------
_ROLLUP_KEYS: Final = (
    "actor_id, requested_model, provider, upstream, key_sent, status, "
    "response_cache_hit, is_attempt"
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
        AS costed_input_tokens
FROM (
    SELECT *, session_key IS NOT NULL AS key_sent, attempt >= 1 AS is_attempt FROM {{src}}
)
GROUP BY {_ROLLUP_KEYS}
"""
_ROLLUP_MERGE: Final = f"""
SELECT {_ROLLUP_KEYS},
    CAST(sum(rows) AS BIGINT), CAST(sum(input_tokens) AS BIGINT),
    CAST(sum(cache_read_tokens) AS BIGINT), CAST(sum(cache_write_tokens) AS BIGINT),
    CAST(sum(read_rows) AS BIGINT), CAST(sum(latency_rows) AS BIGINT), sum(cost_usd),
    CAST(sum(costed_input_tokens) AS BIGINT)
FROM (SELECT * FROM state_rollup UNION ALL SELECT * FROM state_new_rollup)
GROUP BY {_ROLLUP_KEYS}
"""

# -- latencies ------------------------------------------------------------------
_SERVED_LATENCY: Final = """
SELECT requested_model, coalesce(upstream, provider) AS upstream, latency_ms
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
INSERT INTO state_latency
SELECT g.gid, l.latency_ms
FROM ({_SERVED_LATENCY}) AS l
JOIN state_upstreams AS g USING (requested_model, upstream)
"""

# -- sessions and transitions ---------------------------------------------------
_SESSION_KEY: Final = "hash(session_id, actor_id, requested_model)"
_SAME_SESSION: Final = (
    "{a}.skey = {b}.skey AND {a}.session_id = {b}.session_id "
    "AND {a}.actor_id IS NOT DISTINCT FROM {b}.actor_id "
    "AND {a}.requested_model = {b}.requested_model"
)
# Every session the new rows touch, with its sid (new sessions get fresh ones).
_KEYS: Final = f"""
CREATE OR REPLACE TEMP TABLE state_keys AS
WITH k AS (
    SELECT DISTINCT {_SESSION_KEY} AS skey, session_id, actor_id, requested_model
    FROM {{src}} WHERE session_id IS NOT NULL
)
SELECT
    k.*,
    s.sid IS NOT NULL AS existed,
    coalesce(s.sid, (SELECT coalesce(max(sid), 0) FROM state_sessions)
        + row_number() OVER (PARTITION BY s.sid IS NULL)) AS sid
FROM k LEFT JOIN state_sessions AS s ON {_SAME_SESSION.format(a="s", b="k")}
"""
# What the session computations read of a row.
_ROW_FIELDS: Final = """
    k.sid, t.session_id, t.actor_id, t.requested_model, t.id, t.started_at, t.attempt,
    coalesce(t.upstream, t.provider) AS ident, t.session_key IS NOT NULL AS has_key,
    t.status = 'ok' AND NOT t.response_cache_hit AS served, t.attempt >= 1 AS is_attempt
"""
_NEW_SESSION_ROWS: Final = f"""
CREATE OR REPLACE TEMP TABLE state_rows AS
SELECT {_ROW_FIELDS}
FROM (SELECT *, {_SESSION_KEY} AS skey FROM {{src}} WHERE session_id IS NOT NULL) AS t
JOIN state_keys AS k ON {_SAME_SESSION.format(a="k", b="t")}
"""
_OLD_SESSIONS: Final = """
CREATE OR REPLACE TEMP TABLE state_old_sessions AS
SELECT * FROM state_sessions WHERE sid IN (SELECT sid FROM state_keys WHERE existed)
"""
# Sessions a new served attempt of which sorts before their last known one.
_DISORDERED: Final = """
CREATE OR REPLACE TEMP TABLE state_disordered AS
SELECT DISTINCT o.sid, o.first_id
FROM state_old_sessions AS o JOIN state_rows AS r USING (sid)
WHERE r.served AND o.last IS NOT NULL
    AND {'s': r.started_at, 'a': r.attempt, 'i': r.id}
        < {'s': o.last.s, 'a': o.last.a, 'i': o.last.i}
"""
# A disordered session's rows are all read again (the new ones are in the table by now).
_REREAD_DISORDERED: Final = f"""
DELETE FROM state_rows WHERE sid IN (SELECT sid FROM state_disordered);
INSERT INTO state_rows
SELECT {_ROW_FIELDS}
FROM (
    SELECT *, {_SESSION_KEY} AS skey FROM {TABLE_NAME}
    WHERE id >= (SELECT min(first_id) FROM state_disordered) AND session_id IS NOT NULL
) AS t
JOIN state_keys AS k ON {_SAME_SESSION.format(a="k", b="t")}
WHERE k.sid IN (SELECT sid FROM state_disordered);
DELETE FROM state_old_sessions WHERE sid IN (SELECT sid FROM state_disordered);
DELETE FROM state_transitions WHERE sid IN (SELECT sid FROM state_disordered);
"""
# The transitions the rows add: each session's last known served attempt seeds
# the sequence, so the first new attempt pairs with it.
_NEW_TRANSITIONS: Final = """
CREATE OR REPLACE TEMP TABLE state_new_transitions AS
WITH seq AS (
    SELECT sid, session_id, actor_id, requested_model, id, started_at, attempt, ident, has_key,
        false AS seed
    FROM state_rows WHERE served
    UNION ALL
    SELECT sid, NULL, NULL, NULL, last.i, last.s, last.a, last.u, NULL, true
    FROM state_old_sessions WHERE last IS NOT NULL
),
paired AS (
    SELECT *, lag(ident) OVER w AS previous_upstream, lag(started_at) OVER w AS previous_started_at
    FROM seq
    WINDOW w AS (PARTITION BY sid ORDER BY started_at, attempt, id)
)
SELECT
    sid, session_id, actor_id, requested_model, previous_started_at, started_at,
    previous_upstream, ident AS upstream, has_key AS key_sent,
    (epoch_us(started_at) - epoch_us(previous_started_at)) / 1e6 AS gap_s,
    ident <> previous_upstream AS changed
FROM paired
WHERE NOT seed AND previous_started_at IS NOT NULL
"""
# The rows' aggregate per session, merged with the session's old one if any.
_MERGED_SESSIONS: Final = """
INSERT INTO state_sessions
WITH part AS (
    SELECT
        sid, any_value(session_id) AS session_id, any_value(actor_id) AS actor_id,
        any_value(requested_model) AS requested_model, min(id) AS first_id,
        bool_or(has_key) FILTER (WHERE served) AS key_sent,
        count(*) FILTER (WHERE served) AS calls,
        coalesce(list(DISTINCT ident) FILTER (WHERE served), []) AS upstreams,
        coalesce(list(DISTINCT ident) FILTER (WHERE served AND is_attempt), [])
            AS attempt_upstreams,
        max({'s': started_at, 'a': attempt, 'i': id, 'u': ident}) FILTER (WHERE served)
            AS last
    FROM state_rows
    GROUP BY sid
),
moves AS (
    SELECT sid, count(*) AS transitions, count(*) FILTER (WHERE changed) AS changes
    FROM state_new_transitions
    GROUP BY sid
)
SELECT
    p.sid,
    hash(p.session_id, p.actor_id, p.requested_model),
    p.session_id, p.actor_id, p.requested_model,
    least(o.first_id, p.first_id),
    CASE
        WHEN o.key_sent IS NULL THEN p.key_sent
        WHEN p.key_sent IS NULL THEN o.key_sent
        ELSE o.key_sent OR p.key_sent
    END,
    coalesce(o.calls, 0) + p.calls,
    list_sort(list_distinct(list_concat(o.upstreams, p.upstreams))),
    list_sort(list_distinct(list_concat(o.attempt_upstreams, p.attempt_upstreams))),
    -- merged only for sessions whose new attempts all sort after the old last one
    coalesce(p.last, o.last),
    coalesce(o.transitions, 0) + coalesce(m.transitions, 0),
    coalesce(o.changes, 0) + coalesce(m.changes, 0)
FROM part AS p
LEFT JOIN state_old_sessions AS o USING (sid)
LEFT JOIN moves AS m USING (sid)
"""


def _one(con: duckdb.DuckDBPyConnection, sql: str, params: Sequence[object] = ()) -> int:
    row = con.execute(sql, list(params)).fetchone()
    return 0 if row is None or row[0] is None else int(row[0])


def ensure_tables(con: duckdb.DuckDBPyConnection) -> None:
    for ddl in STATE_DDL:
        con.execute(ddl)


def _fold_calls(con: duckdb.DuckDBPyConnection, src: str, *, fresh: bool) -> None:
    if fresh:
        con.execute(f"INSERT INTO state_calls {_CALL_PARTS.format(src=src)}")
        return
    con.execute(f"CREATE OR REPLACE TEMP TABLE state_new_calls AS {_CALL_PARTS.format(src=src)}")
    # Calls seen before: a join on the integer key reads one column of the table;
    # only when there are some are their rows read (the string check guards collisions).
    seen = [
        int(k)
        for (k,) in con.execute(
            "SELECT ckey FROM state_calls WHERE ckey IN (SELECT ckey FROM state_new_calls)"
        ).fetchall()
    ]
    if not seen:
        con.execute("INSERT INTO state_calls SELECT * FROM state_new_calls")
        con.execute("DROP TABLE state_new_calls")
        return
    con.execute(
        "CREATE OR REPLACE TEMP TABLE state_old_calls AS SELECT * FROM state_calls "
        "WHERE list_contains(CAST(? AS UBIGINT[]), ckey) "
        "AND call_id IN (SELECT call_id FROM state_new_calls)",
        [seen],
    )
    con.execute(
        "DELETE FROM state_calls WHERE ckey IN (SELECT ckey FROM state_old_calls) "
        "AND call_id IN (SELECT call_id FROM state_old_calls)"
    )
    con.execute(f"INSERT INTO state_calls {_CALL_MERGE}")
    con.execute("DROP TABLE state_new_calls")
    con.execute("DROP TABLE state_old_calls")


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


def _fold_sessions(con: duckdb.DuckDBPyConnection, src: str) -> None:
    con.execute(_KEYS.format(src=src))
    con.execute(_NEW_SESSION_ROWS.format(src=src))
    con.execute(_OLD_SESSIONS)
    con.execute(_DISORDERED)
    if _one(con, "SELECT count(*) FROM state_disordered"):
        con.execute(_REREAD_DISORDERED)
    con.execute(_NEW_TRANSITIONS)
    con.execute(
        "DELETE FROM state_sessions WHERE sid IN (SELECT sid FROM state_keys WHERE existed)"
    )
    con.execute(_MERGED_SESSIONS)
    con.execute("INSERT INTO state_transitions SELECT * FROM state_new_transitions")
    for table in (
        "state_keys",
        "state_rows",
        "state_old_sessions",
        "state_disordered",
        "state_new_transitions",
    ):
        con.execute(f"DROP TABLE {table}")


def _fold(con: duckdb.DuckDBPyConnection, src: str, *, fresh: bool) -> None:
    _fold_calls(con, src, fresh=fresh)
    _fold_rollup(con, src, fresh=fresh)
    _fold_latency(con, src)
    _fold_sessions(con, src)


def _write_meta(con: duckdb.DuckDBPyConnection) -> None:
    table = con.execute(f"SELECT count(*), max(id) FROM {TABLE_NAME}").fetchone()
    rows, max_id = table if table is not None else (0, None)
    con.execute("DELETE FROM state_meta")
    con.execute("INSERT INTO state_meta VALUES (?, ?, ?)", [STATE_VERSION, rows, max_id])


def rebuild(con: duckdb.DuckDBPyConnection) -> None:
    """Recompute every state table from ``token_usage`` (inside the caller's transaction)."""
    for table in STATE_TABLES:
        con.execute(f"DELETE FROM {table}")
    # No view relies on the tables' row order, and keeping it costs memory on
    # ten-million-row group-bys; restored for the session's own queries after.
    con.execute("SET preserve_insertion_order = false")
    try:
        _fold(con, TABLE_NAME, fresh=True)
    finally:
        con.execute("RESET preserve_insertion_order")
    _write_meta(con)


def is_current(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether the state reflects exactly the rows ``token_usage`` holds now."""
    meta = con.execute("SELECT version, rows_total, max_id FROM state_meta").fetchall()
    table = con.execute(f"SELECT count(*), max(id) FROM {TABLE_NAME}").fetchone()
    return len(meta) == 1 and meta[0] == (STATE_VERSION, *(table or (0, None)))


def fold_new_rows(
    con: duckdb.DuckDBPyConnection, *, above_id: int, late_ids: Sequence[int]
) -> None:
    """Fold the rows just copied (ids above ``above_id``, plus ``late_ids``) into the state.

    Call inside the sync's transaction, after the rows are in ``token_usage``
    and only when the state matched the table before they were added.
    """
    # Two plain range reads, so zone maps skip the old rows (an OR would scan them all).
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE state_new_rows AS SELECT * FROM {TABLE_NAME} WHERE id > ?",
        [above_id],
    )
    if late_ids:
        con.execute(
            f"INSERT INTO state_new_rows SELECT * FROM {TABLE_NAME} "
            "WHERE id >= ? AND id <= ? AND list_contains(CAST(? AS BIGINT[]), id)",
            [min(late_ids), max(late_ids), list(late_ids)],
        )
    new = _one(con, "SELECT count(*) FROM state_new_rows")
    total = _one(con, f"SELECT count(*) FROM {TABLE_NAME}")
    if new >= REBUILD_SHARE * total:
        con.execute("DROP TABLE state_new_rows")
        rebuild(con)
        return
    if new:
        _fold(con, "state_new_rows", fresh=False)
    con.execute("DROP TABLE state_new_rows")
    _write_meta(con)
