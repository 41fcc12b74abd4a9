"""The ledger's totals against a provider's reports, per UTC day and model.

The reports are aggregates: they say what a day of a model cost, never which
call cost what, so they cannot fill a row's ``billed_cost_usd`` (only
OpenRouter's per-generation stats can). What they can do is check the
ledger's totals: for each day and model (matched by :func:`model_key`, so a
dated snapshot name and its alias meet), the ledger's estimated cost and tokens
beside the billed ones, the drift (billed − ledger, in USD and % of billed),
spend the ledger never saw, and ledger spend the bill does not show (yet).

A line *exceeds* the tolerance when ``|drift| > max(tolerance% × billed, min_usd)``:
the floor keeps a day of a few cents from failing a cron job on rounding.
Billed lines with no model (tools, storage, a report not grouped by model)
cannot be matched: they count as spend the ledger never saw.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Final, Literal

import httpx
from sqlalchemy import func, select
from sqlalchemy.engine import Engine

from ledger.reconcile.admin import DEFAULT_LIMITS, Bill, Limits, ReportSource, fetch_bill
from ledger.reconcile.reports import BilledCost, BilledTokens, model_key
from ledger.reconcile.retry import DEFAULT_RETRY, Retry
from ledger.schema import token_usage

_t = token_usage.c
_QUANTUM: Final = Decimal("1e-10")
#: Shown for billed spend the report attributes to no model.
NO_MODEL: Final = "(not a model's tokens)"

Status = Literal["ok", "drift", "not in ledger", "not billed"]


@dataclass(slots=True)
class Tally:
    """One side's sums for one day and model."""

    cost_usd: Decimal = Decimal(0)
    rows: int = 0
    unpriced_rows: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    names: set[str] = field(default_factory=set)


@dataclass(frozen=True, slots=True)
class DriftLine:
    day: dt.date
    model: str
    ledger_usd: Decimal
    billed_usd: Decimal
    ledger_rows: int
    unpriced_rows: int  # ledger rows whose cost is unknown (not in ledger_usd)
    billed_requests: int | None
    ledger_input_tokens: int
    billed_input_tokens: int | None
    ledger_output_tokens: int
    billed_output_tokens: int | None
    scopes: dict[str, Decimal]  # billed cost per project / workspace
    status: Status

    @property
    def drift_usd(self) -> Decimal:
        return self.billed_usd - self.ledger_usd

    @property
    def drift_pct(self) -> float | None:
        return float(100 * self.drift_usd / self.billed_usd) if self.billed_usd else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "day": self.day.isoformat(),
            "model": self.model,
            "status": self.status,
            "ledger_usd": str(self.ledger_usd),
            "billed_usd": str(self.billed_usd),
            "drift_usd": str(self.drift_usd),
            "drift_pct": None if self.drift_pct is None else round(self.drift_pct, 3),
            "ledger_rows": self.ledger_rows,
            "unpriced_rows": self.unpriced_rows,
            "billed_requests": self.billed_requests,
            "ledger_input_tokens": self.ledger_input_tokens,
            "billed_input_tokens": self.billed_input_tokens,
            "ledger_output_tokens": self.ledger_output_tokens,
            "billed_output_tokens": self.billed_output_tokens,
            "billed_by_scope": {k: str(v) for k, v in sorted(self.scopes.items())},
        }


@dataclass(frozen=True, slots=True)
class Tolerance:
    pct: Decimal = Decimal(5)
    min_usd: Decimal = Decimal("0.01")

    def allows(self, drift: Decimal, billed: Decimal) -> bool:
        return abs(drift) <= max(self.pct / 100 * abs(billed), self.min_usd)


@dataclass(frozen=True, slots=True)
class DriftReport:
    provider: str
    start: dt.datetime
    end: dt.datetime
    tolerance: Tolerance
    lines: list[DriftLine]

    @property
    def ledger_usd(self) -> Decimal:
        return sum((line.ledger_usd for line in self.lines), Decimal(0))

    @property
    def billed_usd(self) -> Decimal:
        return sum((line.billed_usd for line in self.lines), Decimal(0))

    @property
    def unledgered_usd(self) -> Decimal:
        """Billed spend on days and models the ledger has no row for."""
        return sum((ln.billed_usd for ln in self.lines if ln.status == "not in ledger"), Decimal(0))

    @property
    def exceeded(self) -> list[DriftLine]:
        return [line for line in self.lines if line.status != "ok"]

    def as_dict(self) -> dict[str, Any]:
        return {
            "provider": self.provider,
            "start": self.start.isoformat(),
            "end": self.end.isoformat(),
            "tolerance_pct": str(self.tolerance.pct),
            "min_usd": str(self.tolerance.min_usd),
            "ledger_usd": str(self.ledger_usd),
            "billed_usd": str(self.billed_usd),
            "drift_usd": str(self.billed_usd - self.ledger_usd),
            "unledgered_usd": str(self.unledgered_usd),
            "exceeded": len(self.exceeded),
            "per_row_billed": False,
            "lines": [line.as_dict() for line in self.lines],
        }


def _day_expr(engine: Engine) -> Any:
    if engine.dialect.name == "postgresql":
        return func.date(func.timezone("UTC", _t.started_at))
    return func.date(_t.started_at)  # SQLite keeps naive UTC


def _money(value: Any) -> Decimal:
    if value is None:
        return Decimal(0)
    # SQLite sums doubles: a drift check needs ten decimals, not the float's tail.
    return (Decimal(repr(value)) if isinstance(value, float) else Decimal(value)).quantize(_QUANTUM)


def _as_date(value: Any) -> dt.date:
    return value if isinstance(value, dt.date) else dt.date.fromisoformat(str(value))


def ledger_tallies(
    engine: Engine, provider: str, start: dt.datetime, end: dt.datetime
) -> dict[tuple[dt.date, str], Tally]:
    """The ledger's sums per UTC day and model key for ``provider`` over ``[start, end)``."""
    day = _day_expr(engine).label("day")
    name = func.coalesce(_t.model, _t.requested_model).label("name")
    query = (
        select(
            day,
            name,
            func.sum(_t.cost_usd),
            func.count(),
            func.count(_t.cost_usd),
            func.sum(_t.input_tokens),
            func.sum(_t.output_tokens),
        )
        .where(_t.provider == provider, _t.started_at >= start, _t.started_at < end)
        .group_by(day, name)
    )
    tallies: dict[tuple[dt.date, str], Tally] = {}
    with engine.connect() as conn:
        for when, model, cost, rows, priced, tokens_in, tokens_out in conn.execute(query):
            key = (_as_date(when), model_key(model) or NO_MODEL)
            tally = tallies.setdefault(key, Tally())
            tally.cost_usd += _money(cost)
            tally.rows += rows
            tally.unpriced_rows += rows - priced
            tally.input_tokens += int(tokens_in or 0)
            tally.output_tokens += int(tokens_out or 0)
            tally.names.add(model)
    return tallies


def _billed_costs(costs: Iterable[BilledCost]) -> dict[tuple[dt.date, str], dict[str, Decimal]]:
    by_key: dict[tuple[dt.date, str], dict[str, Decimal]] = {}
    for line in costs:
        scopes = by_key.setdefault((line.day, model_key(line.model) or NO_MODEL), {})
        scope = line.scope or "(default)"
        scopes[scope] = scopes.get(scope, Decimal(0)) + line.cost_usd
    return by_key


def _billed_tokens(tokens: Iterable[BilledTokens]) -> dict[tuple[dt.date, str], BilledTokens]:
    by_key: dict[tuple[dt.date, str], BilledTokens] = {}
    for line in tokens:
        key = (line.day, model_key(line.model) or NO_MODEL)
        if (seen := by_key.get(key)) is not None:
            requests = (
                None
                if seen.requests is None or line.requests is None
                else seen.requests + line.requests
            )
            line = BilledTokens(
                line.day,
                line.model,
                None,
                requests,
                seen.input_tokens + line.input_tokens,
                seen.output_tokens + line.output_tokens,
                seen.cache_read_tokens + line.cache_read_tokens,
                seen.cache_write_tokens + line.cache_write_tokens,
            )
        by_key[key] = line
    return by_key


def _status(ledger: Tally | None, billed: Decimal, has_bill: bool, tol: Tolerance) -> Status:
    spent = ledger.cost_usd if ledger is not None else Decimal(0)
    if ledger is None and has_bill:
        return "ok" if tol.allows(billed, Decimal(0)) else "not in ledger"
    if not has_bill:
        return "ok" if tol.allows(spent, Decimal(0)) else "not billed"
    return "ok" if tol.allows(billed - spent, billed) else "drift"


def compare(
    provider: str,
    ledger: dict[tuple[dt.date, str], Tally],
    bill: Bill,
    *,
    start: dt.datetime,
    end: dt.datetime,
    tolerance: Tolerance,
) -> DriftReport:
    """Per day and model: the ledger's sums beside the bill's (pure)."""
    costs = _billed_costs(bill.costs)
    tokens = _billed_tokens(bill.tokens)
    lines: list[DriftLine] = []
    for key in sorted(set(ledger) | set(costs) | set(tokens)):
        mine = ledger.get(key)
        scopes = costs.get(key, {})
        billed = sum(scopes.values(), Decimal(0))
        used = tokens.get(key)
        lines.append(
            DriftLine(
                day=key[0],
                model=key[1],
                ledger_usd=mine.cost_usd if mine else Decimal(0),
                billed_usd=billed,
                ledger_rows=mine.rows if mine else 0,
                unpriced_rows=mine.unpriced_rows if mine else 0,
                billed_requests=used.requests if used else None,
                ledger_input_tokens=mine.input_tokens if mine else 0,
                billed_input_tokens=used.input_tokens if used else None,
                ledger_output_tokens=mine.output_tokens if mine else 0,
                billed_output_tokens=used.output_tokens if used else None,
                scopes=scopes,
                status=_status(mine, billed, key in costs, tolerance),
            )
        )
    return DriftReport(provider, start, end, tolerance, lines)


def check_bill(
    engine: Engine,
    http: httpx.Client,
    source: ReportSource,
    *,
    key: str,
    base_url: str,
    start: dt.datetime,
    end: dt.datetime,
    tolerance: Tolerance,
    retry: Retry = DEFAULT_RETRY,
    limits: Limits = DEFAULT_LIMITS,
) -> DriftReport:
    """Fetch ``source``'s reports for ``[start, end)`` and compare them with the ledger
    (read only: nothing is written)."""
    bill = fetch_bill(
        http,
        source,
        key=key,
        base_url=base_url,
        start=start,
        end=end,
        retry=retry,
        limits=limits,
    )
    tallies = ledger_tallies(engine, source.provider, start, end)
    return compare(source.provider, tallies, bill, start=start, end=end, tolerance=tolerance)
