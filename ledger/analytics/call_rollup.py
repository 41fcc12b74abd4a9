"""The one-row calls counted per group: what ``call_groups`` (and the cost views) read.

Most calls are one row (one attempt), which ``state_single_calls`` keeps as a key
and a row id only (:mod:`ledger.analytics.aggregates`); the ``calls`` view projects
them from ``token_usage``. The views that only *count and sum* calls per agent,
model and provider (``cost_attribution``, ``cost_by_agent``,
``overview_totals``, ``response_cache_models``, through ``call_groups``) would
still read every row. This module keeps ``state_call_rollup``: one row per

    (actor_id, requested_provider, responding_provider, requested_model,
     fell_back, status, response_cache_hit)

over the one-row calls, with ``calls``, ``priced_calls`` (a known cost) and
``cost_usd`` (NULL when no call of the group is priced), each column as the
``calls`` view projects a one-row call (``sql/stored/calls.sql``). The calls of
several rows are read from ``state_calls`` as they are (few).

Every column is a sum, so it follows ``state_single_calls`` by addition: the
rows of one-row calls it gains are added (:func:`add`), those of calls it loses
(a call that gained a row, a row changed or deleted) are retracted with the
values the state held, and :func:`merge` folds both in.
"""

# Every SQL string here is a module constant over our own tables: S608 does not apply.
# ruff: noqa: S608
from __future__ import annotations

from typing import Final

import duckdb

from ledger.analytics.signed_sums import SignedSums

TABLE: Final = "state_call_rollup"

DDL: Final = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    actor_id VARCHAR, requested_provider VARCHAR, responding_provider VARCHAR,
    requested_model VARCHAR, fell_back BOOLEAN, status VARCHAR, response_cache_hit BOOLEAN,
    calls BIGINT NOT NULL, priced_calls BIGINT NOT NULL, cost_usd DECIMAL(38, 10))
"""

_KEY: Final = (
    "actor_id, requested_provider, responding_provider, requested_model, fell_back, status, "
    "response_cache_hit"
)

# {rows}: rows of one-row calls (token_usage's columns); {sign}: 1 to add, -1 to retract.
_PARTS: Final = f"""
INSERT INTO {TABLE}_delta
SELECT {_KEY}, {{sign}} * count(*), {{sign}} * count(cost_usd), {{sign}} * sum(cost_usd)
FROM (
    SELECT
        actor_id, requested_provider,
        CASE WHEN status = 'ok' THEN provider END AS responding_provider,
        requested_model,
        coalesce(CASE WHEN status = 'ok' THEN attempt END > 1, false) AS fell_back,
        CASE WHEN status = 'ok' THEN 'ok' ELSE 'error' END AS status,
        response_cache_hit,
        CAST(cost_usd AS DECIMAL(38, 10)) AS cost_usd
    FROM {{rows}}
)
GROUP BY {_KEY}
"""

_SUMS: Final = SignedSums(
    TABLE,
    _KEY,
    "CAST(sum(calls) AS BIGINT), CAST(sum(priced_calls) AS BIGINT), "
    "CASE WHEN sum(priced_calls) = 0 THEN NULL ELSE sum(cost_usd) END",
    "calls",
)


def ensure_table(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(DDL)


def add(con: duckdb.DuckDBPyConnection, rows: str) -> None:
    """Note that the one-row calls whose rows are relation ``rows`` joined the state."""
    _SUMS.note(con, _PARTS.format(rows=rows, sign=1))


def retract(con: duckdb.DuckDBPyConnection, rows: str) -> None:
    """Note that the one-row calls whose rows (as the state held them) are ``rows`` left it."""
    _SUMS.note(con, _PARTS.format(rows=rows, sign=-1))


def merge(con: duckdb.DuckDBPyConnection) -> None:
    """Fold what :func:`add` and :func:`retract` noted into the table; an emptied group goes."""
    _SUMS.merge(con)
