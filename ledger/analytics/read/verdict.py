"""The provider routing verdict of one model, typed: what ``verdict_figures`` computes.

The SQL (``sql/verdict_figures.sql``) judges and projects and gives typed columns
only: the verdict's kind, the action, upstream names and slugs, intervals,
amounts, shares, counts, and the thresholds it judged against. :class:`Verdict`
is one such row, frozen; :func:`from_row` reads it from any engine's row
(DuckDB, pandas, Spark). The words a person reads are written from it in one
place, :mod:`ledger.analytics.read.verdict_words`.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from decimal import Decimal
from typing import Any, Final, Literal, cast

VerdictKind = Literal["warranted", "not_warranted", "insufficient_data", "does_not_apply"]
Action = Literal["ignore", "order"]

#: The kinds, in the order a reader meets them (warranted first).
KINDS: Final[tuple[VerdictKind, ...]] = (
    "warranted",
    "not_warranted",
    "insufficient_data",
    "does_not_apply",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Judgement:
    """One upstream found worse: what it was judged against and on which measures."""

    upstream: str
    judged_against: str
    errors_worse: bool
    latency_worse: bool
    cost_worse: bool
    error_rate: float | None
    against_error_rate: float | None
    p95_ms: float | None
    against_p95_ms: float | None
    cost_per_mtok: float | None
    against_cost_per_mtok: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Unjudged:
    """A pinned upstream with too few attempts (or no alternative) to be judged."""

    upstream: str
    attempts: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """One row of ``verdict_figures``; field names are its column names (README)."""

    requested_model: str
    verdict: VerdictKind
    pinned_upstream: str | None = None
    best_upstream: str | None = None
    recommendation: str | None = None
    monthly_effect_usd: Decimal | None = None
    sessions_affected_share: float | None = None
    pinned_share: float | None = None
    judged_upstreams: str | None = None
    worse_upstreams: str = ""
    error_rates_observable: bool | None = None
    unattributed_errors: int = 0
    pinned_error_rate: float | None = None
    pinned_error_low: float | None = None
    pinned_error_high: float | None = None
    best_error_rate: float | None = None
    best_error_low: float | None = None
    best_error_high: float | None = None
    pinned_p95_ms: float | None = None
    pinned_p95_low_ms: float | None = None
    pinned_p95_high_ms: float | None = None
    best_p95_ms: float | None = None
    best_p95_low_ms: float | None = None
    best_p95_high_ms: float | None = None
    pinned_error_deff: float | None = None
    pinned_hit_rate: float | None = None
    best_hit_rate: float | None = None
    pinned_cost_per_mtok: float | None = None
    best_cost_per_mtok: float | None = None
    cost_change_share: float | None = None
    switch_cost_usd: Decimal | None = None
    errors_worse: bool = False
    latency_worse: bool = False
    cost_worse: bool = False
    affordable: bool | None = None
    action: Action | None = None
    served_by: str | None = None
    pinned_worse: bool = False
    pinned_attempts: int | None = None
    pinned_latency_samples: int | None = None
    best_attempts: int | None = None
    routed_attempts: int = 0
    worse_judged: tuple[Judgement, ...] = ()
    unjudged: tuple[Unjudged, ...] = ()
    slug_unknown_upstreams: tuple[str, ...] = ()
    ignore_error_rate: float | None = None
    ignore_hit_rate: float | None = None
    ignore_cost_per_mtok: float | None = None
    order_hit_rate: float | None = None
    order_sticky_hit_rate: float | None = None
    order_error_rate: float | None = None
    order_pinned_share: float | None = None
    cost_change_usd: float | None = None
    switches: int = 0
    idle_releases: int = 0
    switch_tokens_lost: int = 0
    switch_unpriced: bool = False
    model_calls: int | None = None
    recent_calls: int | None = None
    recent_calls_per_day: float | None = None
    judged_since: dt.datetime | None = None
    window_start: dt.datetime | None = None
    window_end: dt.datetime | None = None
    window_days: float | None = None
    min_samples: int = 0
    error_margin: float = 0.0
    latency_margin: float = 0.0
    cost_margin: float = 0.0
    max_cost_increase: float = 0.0

    @property
    def judged(self) -> Judgement | None:
        """The worse upstream that speaks for the model (most harm), if any."""
        return self.worse_judged[0] if self.worse_judged else None

    @property
    def pinned_enough(self) -> bool:
        """Whether the pinned upstream has the samples to be judged."""
        return (self.pinned_attempts or 0) >= self.min_samples and (
            self.pinned_latency_samples or 0
        ) >= self.min_samples


_FIELDS: Final = {f.name: f for f in fields(Verdict)}
_INTS: Final = frozenset(n for n, f in _FIELDS.items() if str(f.type).startswith("int"))
_FLOATS: Final = frozenset(n for n, f in _FIELDS.items() if str(f.type).startswith("float"))
_BOOLS: Final = frozenset(n for n, f in _FIELDS.items() if str(f.type).startswith("bool"))
_MONEY: Final = frozenset(("monthly_effect_usd", "switch_cost_usd"))


def _missing(value: Any) -> bool:
    """NULL as each engine gives it: None, pandas' NaN/NA/NaT."""
    if value is None:
        return True
    if isinstance(value, float):
        return math.isnan(value)
    return type(value).__name__ in {"NAType", "NaTType"}


def _mapping(value: Any) -> Mapping[str, Any]:
    """A struct as DuckDB (dict) or Spark (Row) gives it."""
    if isinstance(value, Mapping):
        return value
    as_dict = getattr(value, "asDict", None)
    if as_dict is not None:
        return cast(Mapping[str, Any], as_dict())
    raise TypeError(f"a struct was expected, not {type(value).__name__}")


def _items(value: Any) -> Iterable[Any]:
    return () if _missing(value) else cast(Iterable[Any], value)


def _number(row: Mapping[str, Any], name: str) -> float | None:
    return None if _missing(row[name]) else float(row[name])


def _judgement(value: Any) -> Judgement:
    row = _mapping(value)
    return Judgement(
        upstream=str(row["upstream"]),
        judged_against=str(row["judged_against"]),
        errors_worse=bool(row["errors_worse"]),
        latency_worse=bool(row["latency_worse"]),
        cost_worse=bool(row["cost_worse"]),
        error_rate=_number(row, "error_rate"),
        against_error_rate=_number(row, "against_error_rate"),
        p95_ms=_number(row, "p95_ms"),
        against_p95_ms=_number(row, "against_p95_ms"),
        cost_per_mtok=_number(row, "cost_per_mtok"),
        against_cost_per_mtok=_number(row, "against_cost_per_mtok"),
    )


def _timestamp(value: Any) -> dt.datetime:
    """Aware UTC: DuckDB gives aware datetimes, pandas Timestamps, Spark naive UTC."""
    if isinstance(value, str):  # through JSON: DuckDB's '2025-03-01 10:00:00+00'
        value = dt.datetime.fromisoformat(value)
    stamp = cast(dt.datetime, value.to_pydatetime() if hasattr(value, "to_pydatetime") else value)
    return stamp.replace(tzinfo=dt.UTC) if stamp.tzinfo is None else stamp.astimezone(dt.UTC)


def _value(name: str, value: Any) -> Any:
    if _missing(value):
        return _FIELDS[name].default
    if name == "worse_judged":
        return tuple(_judgement(v) for v in _items(value))
    if name == "unjudged":
        return tuple(
            Unjudged(upstream=str(_mapping(v)["upstream"]), attempts=int(_mapping(v)["attempts"]))
            for v in _items(value)
        )
    if name == "slug_unknown_upstreams":
        return tuple(str(v) for v in _items(value))
    if name in ("judged_since", "window_start", "window_end"):
        return _timestamp(value)
    if name in _MONEY:
        return value if isinstance(value, Decimal) else Decimal(str(value))
    if name in _BOOLS:
        return bool(value)
    if name in _INTS:
        return int(value)
    if name in _FLOATS:
        return float(value)
    return str(value)


def from_row(row: Mapping[str, Any]) -> Verdict:
    """The :class:`Verdict` of one ``verdict_figures`` (or ``provider_order_verdict``)
    row; columns it does not know (``headline``, ``reason``) are ignored."""
    values = {name: _value(name, row[name]) for name in _FIELDS if name in row}
    return Verdict(**values)
