"""Transitions summed by model and idle-gap bucket: what ``cache_decay`` reads.

``cache_decay`` groups every transition (one per served attempt with a previous
one in its session) by ``requested_model`` and five fixed buckets of idle gap
(upper edges 1, 5, 10 and 30 minutes, whole seconds, so no setting moves them).
Read from ``state_transitions`` that is a pass over one row per transition: 3.99 s
at 100M ledger rows. This module keeps the same sums in ``state_decay``, one row per

    (requested_model, gap_order)

with ``calls``, ``changed_upstream``, ``reported_calls``, ``input_tokens``,
``cache_read_tokens`` (both over the transitions whose usage was reported) and
``hit_calls``: each column as ``sql/cache_decay.sql`` defines it.

Every column is a sum, so it follows ``state_transitions`` by addition, exactly as
``state_moves`` does (:mod:`ledger.analytics.moves`): the transitions a fold removes
are retracted, the ones it adds are added, and :func:`merge` folds both in.
"""

# Every SQL string here is a module constant over our own tables: S608 does not apply.
# ruff: noqa: S608
from __future__ import annotations

from typing import Final

import duckdb

from ledger.analytics.signed_sums import SignedSums

TABLE: Final = "state_decay"

DDL: Final = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    requested_model VARCHAR, gap_order INTEGER,
    calls BIGINT NOT NULL, changed_upstream BIGINT NOT NULL, reported_calls BIGINT NOT NULL,
    input_tokens BIGINT NOT NULL, cache_read_tokens BIGINT NOT NULL, hit_calls BIGINT NOT NULL)
"""

_KEY: Final = "requested_model, gap_order"

# {src}: transitions (state_transitions' columns), their sessions in state_sessions;
# {sign}: 1 to add them, -1 to retract. The buckets are sql/cache_decay.sql's.
_PARTS: Final = f"""
INSERT INTO {TABLE}_delta
SELECT
    {_KEY},
    {{sign}} * count(*),
    {{sign}} * count(*) FILTER (WHERE changed),
    {{sign}} * count(*) FILTER (WHERE usage_reported),
    {{sign}} * CAST(coalesce(sum(input_tokens) FILTER (WHERE usage_reported), 0) AS BIGINT),
    {{sign}} * CAST(coalesce(sum(cache_read_tokens) FILTER (WHERE usage_reported), 0) AS BIGINT),
    {{sign}} * count(*) FILTER (WHERE usage_reported AND cache_read_tokens > 0)
FROM (
    SELECT
        s.requested_model,
        CASE
            WHEN t.gap_s <= 60 THEN 0
            WHEN t.gap_s <= 300 THEN 1
            WHEN t.gap_s <= 600 THEN 2
            WHEN t.gap_s <= 1800 THEN 3
            ELSE 4
        END AS gap_order,
        t.changed, t.usage_reported, t.input_tokens, t.cache_read_tokens
    FROM {{src}} AS t
    JOIN state_sessions AS s USING (sid)
)
GROUP BY {_KEY}
"""

_SUMS: Final = SignedSums(
    TABLE,
    _KEY,
    ", ".join(
        f"CAST(sum({c}) AS BIGINT)"
        for c in (
            "calls",
            "changed_upstream",
            "reported_calls",
            "input_tokens",
            "cache_read_tokens",
            "hit_calls",
        )
    ),
    "calls",
)


def ensure_table(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(DDL)


def retract(con: duckdb.DuckDBPyConnection, src: str) -> None:
    """Note that the transitions of relation ``src`` are about to leave ``state_transitions``."""
    _SUMS.note(con, _PARTS.format(src=src, sign=-1))


def add(con: duckdb.DuckDBPyConnection, src: str) -> None:
    """Note that the transitions of relation ``src`` joined ``state_transitions``."""
    _SUMS.note(con, _PARTS.format(src=src, sign=1))


def merge(con: duckdb.DuckDBPyConnection) -> None:
    """Fold what :func:`retract` and :func:`add` noted into ``state_decay``."""
    _SUMS.merge(con)
