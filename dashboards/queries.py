"""Figures the dashboard needs that the analytics API does not offer (yet).

Every query here reads the ledger through the analytics layer: it runs with
:meth:`Analytics.sql` over :func:`ledger.analytics.views.filtered_query`, so
the sidebar filters select *rows* exactly as they do for the views, and all
values travel as bound parameters. They are kept in this one module so the
analytics owner can move each into a view (``overview_totals`` and
``timeline`` over ``calls``, ``cache_decay``, ``session_attempts``…) and the
pages would only change the call.

Money stays ``Decimal``; a cost nobody knows is ``None``, never 0.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final

import pandas as pd

from ledger.analytics import Analytics, Filters
from ledger.analytics.views import filtered_query
from ledger.pricing import computed_cost
from ledger.providers import PROVIDERS
from ledger.providers.base import Usage


def run(
    analytics: Analytics, filters: Filters, view: str, select: str, **params: Any
) -> pd.DataFrame:
    """``select`` over the filtered rows and the filtered ``view`` (and what it reads).

    ``select`` may read ``token_usage``, ``view`` and the views ``view`` depends on;
    any other view name would silently read unfiltered rows, so pick ``view``
    to cover what ``select`` reads.
    """
    if select.lstrip().upper().startswith("WITH"):
        # filtered_query puts its own CTEs first; a nested WITH still sees them.
        select = f"SELECT * FROM ({select})"  # noqa: S608 (our constants, values bound)
    return analytics.sql(filtered_query(view, select), {**filters.parameters(), **params})


# -- the frame: what the filters can choose from ------------------------------

_OPTIONS: Final = """
SELECT
    count(*) AS rows,
    min(started_at) AS first_at,
    max(started_at) AS last_at,
    list(DISTINCT actor_id ORDER BY actor_id) FILTER (WHERE actor_id IS NOT NULL) AS actors,
    list(DISTINCT requested_model ORDER BY requested_model) AS models,
    list(DISTINCT provider ORDER BY provider) AS providers
FROM token_usage
"""


@dataclass(frozen=True, slots=True)
class LedgerOptions:
    """What the whole ledger holds: its size, time span and the values filters offer."""

    rows: int
    first_at: dt.datetime | None
    last_at: dt.datetime | None
    actors: tuple[str, ...]
    models: tuple[str, ...]
    providers: tuple[str, ...]


def ledger_options(analytics: Analytics) -> LedgerOptions:
    row = analytics.sql(_OPTIONS).iloc[0]

    def names(value: Any) -> tuple[str, ...]:
        return () if value is None else tuple(str(v) for v in value)

    def when(value: Any) -> dt.datetime | None:
        return None if pd.isna(value) else pd.Timestamp(value).to_pydatetime()

    return LedgerOptions(
        rows=int(row["rows"]),
        first_at=when(row["first_at"]),
        last_at=when(row["last_at"]),
        actors=names(row["actors"]),
        models=names(row["models"]),
        providers=names(row["providers"]),
    )


# -- overview -------------------------------------------------------------------

# A call's failed attempts are its attempts minus the one that answered;
# counting rows with status = 'error' gives the same and is the scorecard's rule.
_TOTALS: Final = """
SELECT
    (SELECT count(*) FROM calls) AS calls,
    (SELECT count(*) FROM calls WHERE NOT response_cache_hit) AS provider_calls,
    (SELECT sum(cost_usd) FROM calls) AS spend_usd,
    (SELECT count(*) FROM calls WHERE cost_usd IS NULL AND NOT response_cache_hit)
        AS unpriced_calls,
    (SELECT count(*) FROM calls WHERE fell_back) AS fallback_calls,
    (SELECT count(*) FROM calls WHERE status = 'error') AS failed_calls,
    (SELECT count(*) FROM calls WHERE response_cache_hit) AS response_cache_hits,
    (SELECT count(*) FROM token_usage WHERE attempt >= 1) AS attempts,
    (SELECT count(*) FROM token_usage WHERE attempt >= 1 AND status = 'error') AS failed_attempts,
    (SELECT min(started_at) FROM token_usage) AS first_at,
    (SELECT max(started_at) FROM token_usage) AS last_at
"""


def overview_totals(analytics: Analytics, filters: Filters) -> dict[str, Any]:
    """Calls, spend, fallbacks and failures over the filtered rows (one dict)."""
    record: dict[str, Any] = run(analytics, filters, "calls", _TOTALS).iloc[0].to_dict()
    for name, value in record.items():
        if name in ("first_at", "last_at", "spend_usd"):
            record[name] = None if pd.isna(value) else value
        else:
            record[name] = int(value)
    return record


_TIMELINE: Final = """
WITH by_call AS (
    SELECT
        time_bucket(CAST($bucket AS INTERVAL), started_at) AS bucket,
        count(*) AS calls,
        sum(cost_usd) AS spend_usd,
        count(*) FILTER (WHERE fell_back) AS fallback_calls,
        count(*) FILTER (WHERE response_cache_hit) AS response_cache_hits,
        count(*) FILTER (WHERE status = 'error') AS failed_calls
    FROM calls
    GROUP BY 1
),
by_attempt AS (
    SELECT
        time_bucket(CAST($bucket AS INTERVAL), started_at) AS bucket,
        count(*) AS attempts,
        count(*) FILTER (WHERE status = 'error') AS failed_attempts
    FROM token_usage
    WHERE attempt >= 1
    GROUP BY 1
)
SELECT
    bucket,
    coalesce(c.calls, 0) AS calls,
    c.spend_usd,
    coalesce(c.fallback_calls, 0) AS fallback_calls,
    coalesce(c.response_cache_hits, 0) AS response_cache_hits,
    coalesce(c.failed_calls, 0) AS failed_calls,
    coalesce(a.attempts, 0) AS attempts,
    coalesce(a.failed_attempts, 0) AS failed_attempts
FROM by_call AS c
FULL JOIN by_attempt AS a USING (bucket)
ORDER BY bucket
"""

#: Bucket widths a timeline may use, smallest first.
BUCKETS: Final = (
    dt.timedelta(minutes=1),
    dt.timedelta(minutes=5),
    dt.timedelta(minutes=15),
    dt.timedelta(hours=1),
    dt.timedelta(hours=6),
    dt.timedelta(days=1),
    dt.timedelta(days=7),
)
MAX_BUCKETS: Final = 200


def bucket_for(span: dt.timedelta) -> dt.timedelta:
    """The smallest bucket that draws ``span`` in at most MAX_BUCKETS bars."""
    for width in BUCKETS:
        if span / width <= MAX_BUCKETS:
            return width
    return BUCKETS[-1]


def timeline(analytics: Analytics, filters: Filters, bucket: dt.timedelta) -> pd.DataFrame:
    """Per time bucket: calls, spend, fallbacks, response-cache hits and failures."""
    seconds = int(bucket.total_seconds())
    return run(analytics, filters, "calls", _TIMELINE, bucket=f"{seconds} seconds")


# -- what caching saved -------------------------------------------------------

_CACHE_READS: Final = """
SELECT provider, coalesce(model, requested_model) AS model,
       CAST(sum(cache_read_tokens) AS BIGINT) AS cache_read_tokens
FROM token_usage
WHERE status = 'ok' AND NOT response_cache_hit AND cache_read_tokens > 0
GROUP BY 1, 2
"""


@dataclass(frozen=True, slots=True)
class Saving:
    """An estimated saving: ``usd`` over what could be priced, and what could not."""

    usd: Decimal | None
    unpriced: int  # tokens (prompt cache) or calls (response cache) left out


def _read_discount(provider: str, model: str, tokens: int) -> Decimal | None:
    """List price of ``tokens`` input tokens uncached minus their price as cache reads."""
    cls = PROVIDERS.get(provider)
    prices_id = cls.prices_provider_id if cls is not None else None
    full = computed_cost(
        Usage(input_tokens=tokens), model, provider=provider, provider_id=prices_id
    )
    cached = computed_cost(
        Usage(input_tokens=tokens, cache_read_tokens=tokens),
        model,
        provider=provider,
        provider_id=prices_id,
    )
    return None if full is None or cached is None else full - cached


def prompt_cache_saving(analytics: Analytics, filters: Filters) -> Saving:
    """What the prompt cache's reads saved at list prices (genai-prices)."""
    total: Decimal | None = None
    unpriced = 0
    for row in run(analytics, filters, "calls", _CACHE_READS).itertuples(index=False):
        saved = _read_discount(str(row.provider), str(row.model), int(row.cache_read_tokens))
        if saved is None:
            unpriced += int(row.cache_read_tokens)
        else:
            total = saved if total is None else total + saved
    return Saving(total, unpriced)


_RESPONSE_HITS: Final = """
SELECT
    requested_model,
    count(*) FILTER (WHERE response_cache_hit) AS hits,
    sum(cost_usd) FILTER (WHERE status = 'ok' AND NOT response_cache_hit) AS served_cost_usd,
    count(cost_usd) FILTER (WHERE status = 'ok' AND NOT response_cache_hit) AS served_priced
FROM calls
GROUP BY requested_model
HAVING count(*) FILTER (WHERE response_cache_hit) > 0
"""


def response_cache_saving(analytics: Analytics, filters: Filters) -> Saving:
    """Response-cache hits times the mean cost of a served call of the same model."""
    total: Decimal | None = None
    unpriced = 0
    for row in run(analytics, filters, "calls", _RESPONSE_HITS).itertuples(index=False):
        hits, priced = int(row.hits), int(row.served_priced)
        if priced == 0 or row.served_cost_usd is None:
            unpriced += hits
            continue
        saved = Decimal(row.served_cost_usd) * hits / priced
        total = saved if total is None else total + saved
    return Saving(total, unpriced)


# -- cost -----------------------------------------------------------------------

_COST_BY_AGENT: Final = """
SELECT
    actor_id,
    requested_model,
    requested_provider,
    responding_provider,
    count(*) AS calls,
    sum(cost_usd) AS cost_usd,
    count(*) FILTER (WHERE fell_back) AS fallback_calls
FROM calls
GROUP BY ALL
ORDER BY cost_usd DESC NULLS LAST, calls DESC
"""


def cost_by_agent(analytics: Analytics, filters: Filters) -> pd.DataFrame:
    """``cost_attribution`` split by agent too: who spent what, where it was answered."""
    return run(analytics, filters, "calls", _COST_BY_AGENT)


_FALLBACK_COST: Final = """
SELECT
    c.requested_provider,
    c.responding_provider,
    c.requested_model,
    count(*) AS fallback_calls,
    sum(c.cost_usd) AS cost_usd,
    sum(f.failed_cost_usd) AS failed_attempts_cost_usd,
    CAST(sum(f.failed_attempts) AS BIGINT) AS failed_attempts
FROM calls AS c
LEFT JOIN (
    SELECT call_id, count(*) AS failed_attempts, sum(cost_usd) AS failed_cost_usd
    FROM token_usage
    WHERE status = 'error'
    GROUP BY call_id
) AS f USING (call_id)
WHERE c.fell_back
GROUP BY ALL
ORDER BY cost_usd DESC NULLS LAST
"""


def fallback_cost(analytics: Analytics, filters: Filters) -> pd.DataFrame:
    """Calls answered after a fallback: what they cost in all, and their failed attempts."""
    return run(analytics, filters, "calls", _FALLBACK_COST)


_FAILED_SPEND: Final = """
SELECT
    provider,
    requested_model,
    error_type,
    count(*) AS attempts,
    sum(cost_usd) AS cost_usd
FROM token_usage
WHERE status = 'error'
GROUP BY ALL
ORDER BY attempts DESC
"""


def failed_attempts(analytics: Analytics, filters: Filters) -> pd.DataFrame:
    """Failed attempts per provider, model and error type, with any spend they caused."""
    return run(analytics, filters, "calls", _FAILED_SPEND)


# -- cache ----------------------------------------------------------------------

# Gap since the session's previous served attempt (the transitions' order), in
# buckets whose edges include the 10-minute idle window.
_CACHE_DECAY: Final = """
WITH served AS (
    SELECT
        session_key IS NOT NULL AS key_sent,
        input_tokens,
        cache_read_tokens,
        (epoch_us(started_at) - epoch_us(lag(started_at) OVER (
            PARTITION BY session_id, actor_id, requested_model
            ORDER BY started_at, attempt, id))) / 1e6 AS gap_s
    FROM token_usage
    WHERE status = 'ok' AND NOT response_cache_hit AND session_id IS NOT NULL
),
bucketed AS (
    SELECT
        *,
        CASE
            WHEN gap_s < 60 THEN 0
            WHEN gap_s < 300 THEN 1
            WHEN gap_s <= 600 THEN 2
            WHEN gap_s < 1800 THEN 3
            WHEN gap_s < 3600 THEN 4
            ELSE 5
        END AS gap_order
    FROM served
    WHERE gap_s IS NOT NULL
)
SELECT
    gap_order,
    key_sent,
    count(*) AS calls,
    CAST(sum(input_tokens) AS BIGINT) AS input_tokens,
    CAST(sum(cache_read_tokens) AS BIGINT) AS cache_read_tokens,
    CAST(sum(cache_read_tokens) AS DOUBLE) / nullif(sum(input_tokens), 0) AS token_hit_rate,
    CAST(count(*) FILTER (WHERE cache_read_tokens > 0) AS DOUBLE) / count(*) AS call_hit_rate
FROM bucketed
GROUP BY ALL
ORDER BY gap_order, key_sent DESC
"""

GAP_LABELS: Final = ("< 1 min", "1–5 min", "5–10 min", "10–30 min", "30–60 min", "≥ 1 h")


def cache_decay(analytics: Analytics, filters: Filters) -> pd.DataFrame:
    """Prompt-cache hit rates by the idle gap before each served attempt of a session."""
    frame = run(analytics, filters, "calls", _CACHE_DECAY)
    frame.insert(0, "idle_gap", [GAP_LABELS[int(i)] for i in frame["gap_order"]])
    return frame


# -- session drill-down ---------------------------------------------------------

_SESSIONS: Final = """
SELECT *
FROM session_stickiness
WHERE calls > 0
ORDER BY switches DESC, idle_releases DESC, calls DESC, session_id
LIMIT $limit
"""


def top_sessions(analytics: Analytics, filters: Filters, limit: int = 200) -> pd.DataFrame:
    """The sessions worth a look first: most switches, then idle releases, then calls."""
    return run(analytics, filters, "session_stickiness", _SESSIONS, limit=limit)


_SESSION_ATTEMPTS: Final = """
SELECT
    started_at,
    attempt,
    status,
    coalesce(upstream, provider) AS upstream,
    provider,
    session_key IS NOT NULL AS key_sent,
    response_cache_hit,
    error_type,
    latency_ms,
    input_tokens,
    cache_read_tokens,
    cost_usd
FROM token_usage
WHERE session_id = $session_id
  AND actor_id IS NOT DISTINCT FROM $actor_id
  AND requested_model = $model
ORDER BY started_at, attempt, id
"""

_SESSION_MOVES: Final = """
SELECT started_at, previous_upstream, upstream, gap_s,
       CASE WHEN is_switch THEN 'switch' ELSE 'idle release' END AS move
FROM transitions
WHERE session_id = $session_id
  AND actor_id IS NOT DISTINCT FROM $actor_id
  AND requested_model = $model
  AND (is_switch OR is_idle_release)
ORDER BY started_at
"""


def session_attempts(
    analytics: Analytics, filters: Filters, session_id: str, actor_id: str | None, model: str
) -> pd.DataFrame:
    """Every attempt of one session (failed and response-cache ones included), in order."""
    key = {"session_id": session_id, "actor_id": actor_id, "model": model}
    return run(analytics, filters, "calls", _SESSION_ATTEMPTS, **key)


def session_moves(
    analytics: Analytics, filters: Filters, session_id: str, actor_id: str | None, model: str
) -> pd.DataFrame:
    """One session's switches and idle releases (from the ``transitions`` view)."""
    key = {"session_id": session_id, "actor_id": actor_id, "model": model}
    return run(analytics, filters, "transitions", _SESSION_MOVES, **key)
