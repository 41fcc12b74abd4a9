"""Transitions summed by whole second of idle gap: what ``cache_decay`` and
``cache_decay_by_key`` read.

Both views group every transition (one per served attempt with a previous one in
its session) by buckets of idle gap: ``cache_decay`` per ``requested_model`` with
fixed edges (1, 5, 10, 30 minutes), ``cache_decay_by_key`` per ``key_sent`` with
edges at 1 and 5 minutes, the idle window (a setting), 30 minutes and an hour.
Read from ``state_transitions`` that is a pass over one row per transition (3.5 to
4 s at 100M ledger rows). This module keeps the same sums in ``state_decay``, one
row per

    (requested_model, key_sent, gap_ceil_s = least(ceil(gap_s), CAP_S + 1))

with ``calls``, ``changed_upstream``, ``reported_calls``, ``input_tokens``,
``cache_read_tokens`` (both over the transitions whose usage was reported) and
``hit_calls``, each as ``sql/cache_decay.sql`` defines it: a few thousand rows per
model. A bucket holds the gaps in ``(gap_ceil_s - 1, gap_ceil_s]``, the last one
every gap beyond :data:`CAP_S`. Every edge but the idle window is a whole number
of seconds below the cap, so it never cuts a bucket; a fractional window, or one
beyond the cap, cuts one, whose transitions the stored view reads one by one
(``sql/stored/cache_decay_by_key.sql``). No setting is applied here.

Every column is a sum, so it follows ``state_transitions`` by addition, exactly as
``state_moves`` does (:mod:`ledger.analytics.state.moves`): the transitions a fold removes
are retracted, the ones it adds are added, and the merge folds both in.
"""

# Every SQL string here is a module constant over our own tables: S608 does not apply.
# ruff: noqa: S608
from __future__ import annotations

from typing import Final

from ledger.analytics.state.signed_sums import SignedSums

TABLE: Final = "state_decay"
#: Gaps beyond a day share one bucket (``gap_ceil_s = CAP_S + 1``); the stored views
#: write the same number (sql/stored/cache_decay*.sql).
CAP_S: Final = 86_400

_DDL: Final = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    requested_model VARCHAR, key_sent BOOLEAN, gap_ceil_s BIGINT,
    calls BIGINT NOT NULL, changed_upstream BIGINT NOT NULL, reported_calls BIGINT NOT NULL,
    input_tokens BIGINT NOT NULL, cache_read_tokens BIGINT NOT NULL, hit_calls BIGINT NOT NULL)
"""

_KEY: Final = "requested_model, key_sent, gap_ceil_s"

# {src}: transitions (state_transitions' columns), their sessions in state_sessions;
# {sign}: 1 to add them, -1 to retract.
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
        t.key_sent,
        least(CAST(ceil(t.gap_s) AS BIGINT), {CAP_S + 1}) AS gap_ceil_s,
        t.changed, t.usage_reported, t.input_tokens, t.cache_read_tokens
    FROM {{src}} AS t
    JOIN state_sessions AS s USING (sid)
)
GROUP BY {_KEY}
"""

SUMS: Final = SignedSums(
    TABLE,
    _DDL,
    _KEY,
    _PARTS,
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
