"""Switches and idle releases summed by whole seconds of gap: what ``switch_counts`` reads.

``switch_costs`` and ``provider_order_verdict`` count, per model (and agent
and day), the transitions whose upstream identity changed, split by the idle
window (a setting: ``gap_s <= idle_window_s`` is a switch, else an idle
release), and the cache reads the first call after each lost. Read from
``state_transitions`` that is a pass over one row per transition; this module
keeps the same counts in ``state_moves``, one row per

    (requested_model, actor_id, day_number, gap_ceil_s = ceil(gap_s))

with ``moves`` (changed transitions) and ``tokens_lost`` (their sum, see
``sql/switch_moves.sql``): a few hundred rows per model and day instead of
one per transition. A bucket holds the gaps in ``(gap_ceil_s - 1, gap_ceil_s]``,
so for an idle window ``w`` it is all switches when ``gap_ceil_s <= w`` and all
idle releases when ``gap_ceil_s - 1 >= w``; only a fractional window cuts a
bucket, and the stored view reads that one bucket's transitions one by one
(``sql/stored/switch_counts.sql``). No setting is applied here, so changing
the idle window takes effect at once.

Every column is a sum, so it follows ``state_transitions`` by addition
(:data:`SUMS`): the transitions a fold removes are retracted, the ones it adds
are added, and the merge folds both into the table
(:mod:`ledger.analytics.state.session_aggregates` does where it deletes and inserts
transitions).
"""

# Every SQL string here is a module constant over our own tables: S608 does not apply.
# ruff: noqa: S608
from __future__ import annotations

from typing import Final

from ledger.analytics.state.signed_sums import SignedSums

TABLE: Final = "state_moves"

_DDL: Final = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    requested_model VARCHAR, actor_id VARCHAR, day_number BIGINT, gap_ceil_s BIGINT,
    moves BIGINT NOT NULL, tokens_lost BIGINT NOT NULL)
"""

_KEY: Final = "requested_model, actor_id, day_number, gap_ceil_s"

# {src}: transitions (state_transitions' columns), their sessions in state_sessions;
# {sign}: 1 to add them, -1 to retract. tokens_lost as sql/switch_moves.sql defines it.
_PARTS: Final = f"""
INSERT INTO {TABLE}_delta
SELECT {_KEY}, {{sign}} * count(*), {{sign}} * CAST(coalesce(sum(tokens_lost), 0) AS BIGINT)
FROM (
    SELECT
        s.requested_model,
        s.actor_id,
        epoch_us(t.started_at) // 86400000000 AS day_number,
        CAST(ceil(gap_s) AS BIGINT) AS gap_ceil_s,
        CASE WHEN usage_reported THEN greatest(0,
            least(coalesce(previous_cache_read_tokens, 0), coalesce(input_tokens, 0))
                - coalesce(cache_read_tokens, 0)) ELSE 0 END AS tokens_lost
    FROM {{src}} AS t
    JOIN state_sessions AS s USING (sid)
    WHERE t.changed
)
GROUP BY {_KEY}
"""

SUMS: Final = SignedSums(
    TABLE,
    _DDL,
    _KEY,
    _PARTS,
    "CAST(sum(moves) AS BIGINT), CAST(sum(tokens_lost) AS BIGINT)",
    "moves",
)
