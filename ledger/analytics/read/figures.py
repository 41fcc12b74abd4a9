"""Figures beyond the views: parameterised queries, and what the caches saved.

:class:`~ledger.analytics.Analytics` runs these (its ``timeline``,
``top_sessions``, ``prompt_cache_saving``… methods), over the stored views
when no filter is set and over the filtered rows otherwise, with every value
bound as a parameter. The dashboard and the demo get their numbers here and
write no SQL of their own.

Money stays ``Decimal``; a cost nobody knows is ``None``, never 0.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final

import pandas as pd  # type: ignore[import-untyped]

from ledger.pricing import computed_cost
from ledger.providers import PROVIDERS
from ledger.providers.base import Usage

# -- what the ledger holds (the dashboard's filter choices) -----------------------

# Row counts and names from the rollup sync keeps (a few thousand rows, not
# millions); the time span from the state sync keeps (ledger_span).
OPTIONS: Final = """
SELECT
    r.rows, t.first_at, t.last_at, r.actors, r.models, r.providers
FROM (
    SELECT
        CAST(coalesce(sum(rows), 0) AS BIGINT) AS rows,
        list(DISTINCT actor_id ORDER BY actor_id) FILTER (WHERE actor_id IS NOT NULL) AS actors,
        list(DISTINCT requested_model ORDER BY requested_model) AS models,
        list(DISTINCT provider ORDER BY provider) AS providers
    FROM state_rollup
) AS r
CROSS JOIN ledger_span AS t
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


def options_from(frame: pd.DataFrame) -> LedgerOptions:
    row = frame.iloc[0]

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


def totals_from(frame: pd.DataFrame) -> dict[str, Any]:
    """The ``overview_totals`` row as a dict: counts as ints, unknown values as None."""
    record: dict[str, Any] = frame.iloc[0].to_dict()
    for name, value in record.items():
        if name in ("first_at", "last_at", "spend_usd"):
            record[name] = None if pd.isna(value) else value
        else:
            record[name] = int(value)
    return record


# -- the dashboard views, in the order pages show them ----------------------------

# Per agent, model and key_sent: the cache_hits view summed over upstreams.
CACHE_HITS_BY_AGENT: Final = """
SELECT
    actor_id,
    requested_model,
    key_sent,
    CAST(sum(calls) AS BIGINT) AS calls,
    CAST(sum(reported_calls) AS BIGINT) AS reported_calls,
    CAST(sum(input_tokens) AS BIGINT) AS input_tokens,
    CAST(sum(cache_read_tokens) AS BIGINT) AS cache_read_tokens,
    CAST(sum(cache_read_tokens) AS DOUBLE) / nullif(sum(input_tokens), 0) AS token_hit_rate,
    CAST(sum(hit_calls) AS BIGINT) AS hit_calls,
    CAST(sum(hit_calls) AS DOUBLE) / nullif(sum(reported_calls), 0) AS call_hit_rate,
    CAST(sum(response_cache_hits) AS BIGINT) AS response_cache_hits
FROM cache_hits
GROUP BY actor_id, requested_model, key_sent
ORDER BY actor_id NULLS LAST, requested_model, key_sent DESC
"""

COST_BY_AGENT: Final = """
SELECT * FROM cost_by_agent
ORDER BY cost_usd DESC NULLS LAST, calls DESC, actor_id, requested_model
"""
FALLBACK_COST: Final = """
SELECT * FROM fallback_cost
ORDER BY cost_usd DESC NULLS LAST, fallback_calls DESC, requested_model
"""
FAILED_ATTEMPTS: Final = """
SELECT * FROM failed_attempts ORDER BY attempts DESC, provider, requested_model, error_type
"""
#: Per UTC day: the ledger's estimate beside what was billed, on the rows a reconcile
#: stored a billed figure for (``billed_at`` set), and how many rows await one (OpenRouter
#: rows with a generation id; other providers bill per day, never per row).
ESTIMATED_VS_BILLED: Final = """
SELECT
    CAST(timezone('UTC', started_at) AS DATE) AS day,
    count(*) AS rows,
    count(*) FILTER (WHERE billed_at IS NOT NULL) AS reconciled_rows,
    count(*) FILTER (WHERE billed_at IS NOT NULL AND cost_usd IS NULL) AS reconciled_unpriced_rows,
    count(*) FILTER (
        WHERE billed_at IS NULL AND provider = 'openrouter' AND generation_id IS NOT NULL
    ) AS awaiting_rows,
    sum(cost_usd) AS estimated_usd,
    sum(cost_usd) FILTER (WHERE billed_at IS NOT NULL) AS reconciled_estimated_usd,
    sum(billed_cost_usd) FILTER (WHERE billed_at IS NOT NULL) AS billed_usd
FROM token_usage
GROUP BY ALL
ORDER BY day
"""
CACHE_DECAY_BY_KEY: Final = "SELECT * FROM cache_decay_by_key ORDER BY gap_order, key_sent DESC"
CACHE_DECAY: Final = "SELECT * FROM cache_decay ORDER BY requested_model, gap_order"

# -- the verdict and what stickiness failures cost ----------------------------------

VERDICTS: Final = "SELECT * FROM verdict_figures ORDER BY requested_model"
SWITCH_COSTS: Final = """
SELECT * FROM switch_costs ORDER BY requested_model, actor_id NULLS LAST, day
"""
SWITCH_COST_TOTALS: Final = """
SELECT
    CAST(coalesce(sum(switches), 0) AS BIGINT) AS switches,
    CAST(coalesce(sum(idle_releases), 0) AS BIGINT) AS idle_releases,
    CAST(coalesce(sum(cache_read_tokens_lost), 0) AS BIGINT) AS cache_read_tokens_lost,
    sum(cost_usd) AS cost_usd,
    CAST(coalesce(sum(cache_read_tokens_lost) FILTER (WHERE cost_usd IS NULL), 0) AS BIGINT)
        AS unpriced_tokens
FROM switch_costs
"""


@dataclass(frozen=True, slots=True)
class SwitchCostTotals:
    """What switches and idle releases cost: cache reads lost, priced where possible."""

    switches: int
    idle_releases: int
    cache_read_tokens_lost: int
    cost_usd: Decimal | None  # over the priced models; None when none is priced
    unpriced_tokens: int  # lost tokens of models genai-prices does not price


def switch_totals_from(frame: pd.DataFrame) -> SwitchCostTotals:
    row = frame.iloc[0]
    cost = row["cost_usd"]
    return SwitchCostTotals(
        switches=int(row["switches"]),
        idle_releases=int(row["idle_releases"]),
        cache_read_tokens_lost=int(row["cache_read_tokens_lost"]),
        cost_usd=None if cost is None or pd.isna(cost) else Decimal(cost),
        unpriced_tokens=int(row["unpriced_tokens"]),
    )


# -- over time --------------------------------------------------------------------

TIMELINE: Final = """
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

#: Spend and calls per time bucket and model, or agent (a NULL agent reads "(no agent)").
SPEND_OVER_TIME: Final[dict[str, str]] = {
    group: f"""
SELECT
    time_bucket(CAST($bucket AS INTERVAL), started_at) AS bucket,
    {expression} AS {group},
    count(*) AS calls,
    sum(cost_usd) AS spend_usd
FROM calls
GROUP BY ALL
ORDER BY bucket, {group}
"""  # noqa: S608 (module constants)
    for group, expression in (
        ("requested_model", "requested_model"),
        ("actor_id", "coalesce(actor_id, '(no agent)')"),
    )
}

# -- sessions -----------------------------------------------------------------------

TOP_SESSIONS: Final = """
SELECT *
FROM session_stickiness
WHERE calls > 0
ORDER BY switches DESC, idle_releases DESC, calls DESC, session_id
LIMIT $limit
"""

SESSION_ATTEMPTS: Final = """
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

SESSION_MOVES: Final = """
SELECT started_at, previous_upstream, upstream, gap_s,
       CASE WHEN is_switch THEN 'switch' ELSE 'idle release' END AS move
FROM transitions
WHERE session_id = $session_id
  AND actor_id IS NOT DISTINCT FROM $actor_id
  AND requested_model = $model
  AND (is_switch OR is_idle_release)
ORDER BY started_at
"""

# -- what caching saved ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Saving:
    """An estimated saving: ``usd`` over what could be priced, and what could not."""

    usd: Decimal | None
    unpriced: int  # tokens (prompt cache) or calls (response cache) left out


def cache_read_discount(provider: str, model: str, tokens: int) -> Decimal | None:
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


def prompt_cache_saving(reads: pd.DataFrame) -> Saving:
    """What the ``prompt_cache_reads`` saved at list prices (genai-prices)."""
    total: Decimal | None = None
    unpriced = 0
    for row in reads.itertuples(index=False):
        saved = cache_read_discount(str(row.provider), str(row.model), int(row.cache_read_tokens))
        if saved is None:
            unpriced += int(row.cache_read_tokens)
        else:
            total = saved if total is None else total + saved
    return Saving(total, unpriced)


def response_cache_saving(models: pd.DataFrame) -> Saving:
    """``response_cache_models``' hits times the mean known cost of a served call of the model."""
    total: Decimal | None = None
    unpriced = 0
    for row in models.itertuples(index=False):
        hits, priced = int(row.hits), int(row.served_priced)
        if priced == 0 or row.served_cost_usd is None or pd.isna(row.served_cost_usd):
            unpriced += hits
            continue
        saved = Decimal(row.served_cost_usd) * hits / priced
        total = saved if total is None else total + saved
    return Saving(total, unpriced)
