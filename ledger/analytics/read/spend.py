"""Spend over a window and a scope: what budgets are checked against.

Functions next to :class:`~ledger.analytics.Analytics` (they take one): the
queries are module constants over ``token_usage`` in the local DuckDB file,
every value bound as a parameter.

*Unknown cost*: a row whose ``cost_usd`` is null although it was billable: a
served attempt, or any attempt that reported tokens. Response-cache hits cost
nothing, and a failed attempt that reported no tokens was not billed by the
provider (a refused or broken request is not charged), so neither is unknown.
Unknown-cost rows are counted and returned, never added as 0; a *turn* (a
call: all its attempts) holding one is left out of the per-turn figures and
counted instead.

Days are UTC days; a turn is dated by its first attempt.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import pandas as pd  # type: ignore[import-untyped]

from ledger.analytics.read.api import Analytics

# The rows in scope, with the unknown-cost flag. A NULL parameter means "any".
_SCOPED: Final = """
scoped AS (
    SELECT
        *,
        cost_usd IS NULL AND NOT response_cache_hit
            AND (status = 'ok' OR input_tokens + output_tokens > 0) AS unknown_cost,
        CAST(timezone('UTC', started_at) AS DATE) AS day
    FROM main.token_usage
    WHERE (CAST($start AS TIMESTAMPTZ) IS NULL OR started_at >= CAST($start AS TIMESTAMPTZ))
      AND (CAST($end AS TIMESTAMPTZ) IS NULL OR started_at < CAST($end AS TIMESTAMPTZ))
      AND (CAST($actor AS VARCHAR) IS NULL OR actor_id = CAST($actor AS VARCHAR))
      AND (CAST($model AS VARCHAR) IS NULL OR requested_model = CAST($model AS VARCHAR))
      AND (CAST($tag_paths AS VARCHAR[]) IS NULL
           OR json_extract_string(tags, CAST($tag_paths AS VARCHAR[]))
              IS NOT DISTINCT FROM CAST($tag_values AS VARCHAR[]))
),
turns AS (
    SELECT
        call_id,
        min(day) AS day,
        sum(coalesce(cost_usd, 0)) AS cost_usd,
        bool_or(unknown_cost) AS unknown
    FROM scoped
    GROUP BY call_id
)
"""

_TURN_FIGURES: Final = """
    count(*) AS calls,
    count(*) FILTER (WHERE unknown) AS unknown_cost_calls,
    coalesce(sum(cost_usd) FILTER (WHERE NOT unknown), 0) AS known_usd,
    quantile_disc(cost_usd, 0.95) FILTER (WHERE NOT unknown) AS p95_usd,
    max(cost_usd) FILTER (WHERE NOT unknown) AS max_usd
"""

#: One row: the turns in scope (see the module doc for unknown cost).
TURN_STATS: Final = f"""
WITH {_SCOPED}
SELECT
    {_TURN_FIGURES},
    (SELECT count(*) FROM scoped WHERE unknown_cost) AS unknown_cost_rows
FROM turns
"""  # noqa: S608 (our constants; values are bound)

#: One row per UTC day: the turns of that day.
TURN_STATS_BY_DAY: Final = f"""
WITH {_SCOPED}
SELECT day, {_TURN_FIGURES}
FROM turns
GROUP BY day
ORDER BY day
"""  # noqa: S608

#: One row per UTC day (or hour) and subject (agent or requested model): known spend.
SPEND_BY_SUBJECT: Final = f"""
WITH {_SCOPED}
SELECT
    CASE WHEN $hourly THEN date_trunc('hour', timezone('UTC', started_at))
         ELSE CAST(day AS TIMESTAMP) END AS period,
    CASE WHEN $by = 'agent' THEN actor_id ELSE requested_model END AS subject,
    coalesce(sum(cost_usd), 0) AS cost_usd,
    count(*) AS rows,
    count(*) FILTER (WHERE unknown_cost) AS unknown_cost_rows
FROM scoped
GROUP BY ALL
ORDER BY period, subject NULLS FIRST
"""  # noqa: S608

_AGENTS: Final = """
SELECT DISTINCT actor_id FROM main.token_usage WHERE actor_id IS NOT NULL ORDER BY actor_id
"""


def _pointer(key: str) -> str:
    """A tag name as a JSON pointer (RFC 6901 escapes), so any key is matched literally."""
    return "/" + key.replace("~", "~0").replace("/", "~1")


@dataclass(frozen=True, slots=True, kw_only=True)
class SpendScope:
    """Which rows count: ``[start, end)`` (tz-aware; None = open), one agent, one
    requested model, and tags every row must carry (compared as text)."""

    start: dt.datetime | None = None
    end: dt.datetime | None = None
    actor: str | None = None
    model: str | None = None
    tags: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("start", "end"):
            value = getattr(self, name)
            if value is not None and value.tzinfo is None:
                raise ValueError(f"{name} must be timezone-aware, got {value!r}")

    def parameters(self) -> dict[str, Any]:
        keys = sorted(self.tags)
        return {
            "start": self.start,
            "end": self.end,
            "actor": self.actor,
            "model": self.model,
            "tag_paths": [_pointer(k) for k in keys] if keys else None,
            "tag_values": [self.tags[k] for k in keys] if keys else None,
        }


def turn_stats(analytics: Analytics, scope: SpendScope) -> dict[str, Any]:
    """``calls``, ``unknown_cost_calls``, ``known_usd``, ``p95_usd``, ``max_usd`` (nearest
    rank) and ``unknown_cost_rows`` of the turns in scope; money as ``Decimal``."""
    frame = analytics.sql(TURN_STATS, scope.parameters())
    row = frame.iloc[0].to_dict()
    return {k: (None if v is None or v is pd.NA or v != v else v) for k, v in row.items()}


def turn_stats_by_day(analytics: Analytics, scope: SpendScope) -> pd.DataFrame:
    """The figures of :func:`turn_stats` (without ``unknown_cost_rows``) per UTC day."""
    return analytics.sql(TURN_STATS_BY_DAY, scope.parameters())


def spend_by_subject(
    analytics: Analytics,
    scope: SpendScope,
    *,
    by: Literal["agent", "model"],
    hourly: bool = False,
) -> pd.DataFrame:
    """Known spend per ``period`` (UTC day, or hour) and ``subject`` (agent or requested
    model), with ``rows`` and ``unknown_cost_rows``."""
    return analytics.sql(SPEND_BY_SUBJECT, {**scope.parameters(), "by": by, "hourly": hourly})


def known_agents(analytics: Analytics) -> set[str]:
    """Every ``actor_id`` the ledger has seen."""
    return {str(a) for a in analytics.sql(_AGENTS)["actor_id"]}
