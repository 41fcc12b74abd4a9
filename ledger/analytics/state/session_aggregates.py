"""The session and transition state: how new rows extend the sessions sync keeps.

Part of the state tables of :mod:`ledger.analytics.state.aggregates` (``state_sessions``
and ``state_transitions``; see there). :func:`fold` merges a relation of new
rows into them: each touched session's last known served attempt seeds its
sequence, so the first new attempt pairs with it; a session a new served
attempt of which sorts before its last known one is recomputed from its rows.
``state_moves`` (:mod:`ledger.analytics.state.moves`) and ``state_decay``
(:mod:`ledger.analytics.state.decay`) follow every transition removed or added.
"""

# Every SQL string here is composed from this module's constants and
# ledger.schema's table name, never from input: S608 does not apply.
# ruff: noqa: S608
from __future__ import annotations

from typing import Final

import duckdb

from ledger.analytics.state import decay, moves
from ledger.schema import TABLE_NAME

# The sums kept per transition (each retract/add/merge over the same relations).
_TRANSITION_SUMS: Final = (moves.SUMS, decay.SUMS)


def _retract(con: duckdb.DuckDBPyConnection, src: str) -> None:
    for sums in _TRANSITION_SUMS:
        sums.retract(con, src)


def _add_and_merge(con: duckdb.DuckDBPyConnection, src: str) -> None:
    for sums in _TRANSITION_SUMS:
        sums.add(con, src)
        sums.merge(con)


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
    t.status = 'ok' AND NOT t.response_cache_hit AS served, t.attempt >= 1 AS is_attempt,
    t.input_tokens, t.cache_read_tokens, t.usage_reported
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
_EVERY_KEY: Final = (
    "CREATE OR REPLACE TEMP TABLE state_disordered AS SELECT sid, 0 AS first_id FROM state_keys"
)
# A disordered session's rows are all read again (the new ones are in the table by now).
_REREAD_DISORDERED: Final = f"""
DELETE FROM state_rows WHERE sid IN (SELECT sid FROM state_disordered);
INSERT INTO state_rows
SELECT {_ROW_FIELDS}
FROM (
    SELECT *, {_SESSION_KEY} AS skey FROM {TABLE_NAME}
    -- every row of the session, whatever its id: a late id can sit below the
    -- session's first one, and its later rows may not be among those folded.
    -- Only rows above $upto are not folded yet (a rebuild goes in id chunks)
    WHERE session_id IS NOT NULL AND id <= $upto
) AS t
JOIN state_keys AS k ON {_SAME_SESSION.format(a="k", b="t")}
WHERE k.sid IN (SELECT sid FROM state_disordered);
DELETE FROM state_old_sessions WHERE sid IN (SELECT sid FROM state_disordered);
DELETE FROM state_transitions WHERE sid IN (SELECT sid FROM state_disordered);
"""
# The transitions the rows add: each session's last known served attempt seeds
# the sequence, so the first new attempt pairs with it. A transition names its
# session by sid only (its session_id, actor_id and model are state_sessions'):
# writing three strings per transition cost a fifth of a first sync's session fold.
_TRANSITIONS: Final = """
WITH seq AS (
    SELECT sid, id, started_at, attempt, ident, has_key,
        input_tokens, cache_read_tokens, usage_reported, false AS seed
    FROM state_rows WHERE served
    UNION ALL
    -- the seed's cache reads come from its row (by id): the first new transition's
    -- previous_cache_read_tokens (what switch_costs says a switch loses)
    SELECT o.sid, o.last.i, o.last.s, o.last.a, o.last.u, NULL, NULL,
        t.cache_read_tokens, NULL, true
    FROM state_old_sessions AS o
    LEFT JOIN (
        -- the live sessions' last rows are recent: the id range lets zone maps skip the rest
        SELECT id, cache_read_tokens FROM {table}
        WHERE id >= (SELECT min(last.i) FROM state_old_sessions)
            AND id <= (SELECT max(last.i) FROM state_old_sessions)
    ) AS t ON t.id = o.last.i
    WHERE o.last IS NOT NULL
),
paired AS (
    SELECT *, lag(ident) OVER w AS previous_upstream, lag(started_at) OVER w AS previous_started_at,
        lag(cache_read_tokens) OVER w AS previous_cache_read_tokens
    FROM seq
    WINDOW w AS (PARTITION BY sid ORDER BY started_at, attempt, id)
)
SELECT
    sid, previous_started_at, started_at,
    previous_upstream, ident AS upstream, has_key AS key_sent,
    (epoch_us(started_at) - epoch_us(previous_started_at)) / 1e6 AS gap_s,
    ident <> previous_upstream AS changed,
    input_tokens,
    cache_read_tokens,
    usage_reported,
    previous_cache_read_tokens
FROM paired
WHERE NOT seed AND previous_started_at IS NOT NULL
""".replace("{table}", TABLE_NAME)
# The transitions of the sessions the rows touch: in a rebuild's chunk, those of the
# sessions it starts (whose sids, the largest, sit in the last row groups) and the few
# that cross into it; in a sync, the live ones.
TOUCHED_TRANSITIONS: Final = (
    "(SELECT * FROM state_transitions WHERE sid IN (SELECT sid FROM state_keys))"
)
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
-- every transition the sessions have now, old and new (TOUCHED_TRANSITIONS)
moves AS (
    SELECT sid, count(*) AS transitions, count(*) FILTER (WHERE changed) AS changes
    FROM {transitions}
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
    coalesce(m.transitions, 0),
    coalesce(m.changes, 0)
FROM part AS p
LEFT JOIN state_old_sessions AS o USING (sid)
LEFT JOIN moves AS m USING (sid)
"""


def _fold_fresh(con: duckdb.DuckDBPyConnection) -> None:
    """The transitions and sessions of ``state_rows`` into empty tables: the transitions go
    straight in (no temporary copy of a million of them), and are what the moves add."""
    con.execute(_OLD_SESSIONS)  # none: what the queries below merge with
    con.execute(f"INSERT INTO state_transitions {_TRANSITIONS}")
    con.execute(_MERGED_SESSIONS.replace("{transitions}", "state_transitions"))
    _add_and_merge(con, "state_transitions")
    for table in ("state_keys", "state_rows", "state_old_sessions"):
        con.execute(f"DROP TABLE {table}")


def fold(
    con: duckdb.DuckDBPyConnection,
    src: str,
    *,
    upto: int | None = None,
    rederive: bool = False,
    fresh: bool = False,
) -> None:
    """Fold the rows of relation ``src`` into the session state.

    ``upto``: the highest id folded so far when the table holds rows not
    folded yet (a rebuild in chunks); None when every row is. ``rederive``:
    recompute every session ``src`` names from the table's rows (``src``
    then holds old versions of changed or deleted rows too). ``fresh``: the
    session state is empty (a rebuild's first chunk).
    """
    con.execute(_KEYS.format(src=src))
    con.execute(_NEW_SESSION_ROWS.format(src=src))
    if fresh and not rederive:
        _fold_fresh(con)
        return
    con.execute(_OLD_SESSIONS)
    con.execute(_EVERY_KEY if rederive else _DISORDERED)
    # Every transition of a touched session leaves the transition sums here and comes back
    # below with the new ones: the new transitions go straight into state_transitions
    # (a temporary copy of them cost as much as the insert in a rebuild's chunk).
    _retract(con, TOUCHED_TRANSITIONS)
    disordered = con.execute("SELECT count(*) FROM state_disordered").fetchall()[0][0]
    if disordered:  # their transitions are derived again below
        bound = (1 << 62) if upto is None else upto
        for statement in _REREAD_DISORDERED.split(";"):  # one parameter, one statement
            if statement.strip():
                con.execute(statement, {"upto": bound} if "$upto" in statement else None)
    con.execute(f"INSERT INTO state_transitions {_TRANSITIONS}")
    con.execute(
        "DELETE FROM state_sessions WHERE sid IN (SELECT sid FROM state_keys WHERE existed)"
    )
    con.execute(_MERGED_SESSIONS.replace("{transitions}", TOUCHED_TRANSITIONS))
    _add_and_merge(con, TOUCHED_TRANSITIONS)
    for table in (
        "state_keys",
        "state_rows",
        "state_old_sessions",
        "state_disordered",
    ):
        con.execute(f"DROP TABLE {table}")
