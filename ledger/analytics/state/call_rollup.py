"""The one-row calls counted per group: what ``call_groups`` (and the cost views) read.

Most calls are one row (one attempt), which ``state_single_calls`` keeps as a key
and a row id only (:mod:`ledger.analytics.state.aggregates`); the ``calls`` view projects
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
rows of one-row calls it gains are added, those of calls it loses
(a call that gained a row, a row changed or deleted) are retracted with the
values the state held, and the merge folds both in (:data:`SUMS`).
"""

# Every SQL string here is a module constant over our own tables: S608 does not apply.
# ruff: noqa: S608
from __future__ import annotations

from typing import Final

from ledger.analytics.state.signed_sums import SignedSums

TABLE: Final = "state_call_rollup"

_DDL: Final = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    actor_id VARCHAR, requested_provider VARCHAR, responding_provider VARCHAR,
    requested_model VARCHAR, fell_back BOOLEAN, status VARCHAR, response_cache_hit BOOLEAN,
    calls BIGINT NOT NULL, priced_calls BIGINT NOT NULL, cost_usd DECIMAL(38, 10))
"""

_KEY: Final = (
    "actor_id, requested_provider, responding_provider, requested_model, fell_back, status, "
    "response_cache_hit"
)

# {src}: rows of one-row calls (token_usage's columns); {sign}: 1 to add, -1 to retract.
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
    FROM {{src}}
)
GROUP BY {_KEY}
"""

SUMS: Final = SignedSums(
    TABLE,
    _DDL,
    _KEY,
    _PARTS,
    "CAST(sum(calls) AS BIGINT), CAST(sum(priced_calls) AS BIGINT), "
    "CASE WHEN sum(priced_calls) = 0 THEN NULL ELSE sum(cost_usd) END",
    "calls",
)
