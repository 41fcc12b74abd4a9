"""Recompute the computed costs of past rows after a price change.

Only rows whose cost the ledger computed are touched: ``cost_source`` of
``computed`` or ``incomplete``, and served rows of unknown cost whose usage was reported
(``usage_reported``; a price override may now price their model). A provider-reported cost is
what the provider said, and a billed cost is what the invoice said: neither is
ever recomputed, and the UPDATE says so again in its WHERE clause, so a row
reconciled meanwhile is left alone.

A row is priced as the client prices a new call (:func:`ledger.pricing.attempt_cost`):
the served model, at the row's ``started_at``, an override first. The usage is
rebuilt from the row's columns and its ``usage_details`` (audio tokens, 1-hour
cache writes). Rows of a provider genai-prices cannot name (``openai_compatible``,
priced by its URL when recorded) are repriced only by an override.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final

from sqlalchemy import and_, or_, select, update
from sqlalchemy.engine import Engine

from ledger.price_overrides import PriceBook
from ledger.pricing import Cost, attempt_cost
from ledger.providers import PROVIDERS
from ledger.providers.base import Usage
from ledger.schema import COST_SCALE, token_usage

#: Cost sources the ledger computed itself, which a reprice may change.
REPRICEABLE: Final = ("computed", "incomplete")
_PAGE: Final = 2000
_QUANTUM: Final = Decimal(1).scaleb(-COST_SCALE)
_t = token_usage.c


@dataclass(frozen=True, slots=True)
class Change:
    """One row whose computed cost changed."""

    id: int
    event_id: str
    started_at: dt.datetime
    provider: str
    model: str
    old_usd: Decimal | None
    old_source: str | None
    new_usd: Decimal | None
    new_source: str | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "event_id": self.event_id,
            "started_at": self.started_at.isoformat(),
            "provider": self.provider,
            "model": self.model,
            "old_cost_usd": None if self.old_usd is None else str(self.old_usd),
            "old_cost_source": self.old_source,
            "new_cost_usd": None if self.new_usd is None else str(self.new_usd),
            "new_cost_source": self.new_source,
        }


@dataclass(frozen=True, slots=True)
class RepriceReport:
    examined: int
    changes: tuple[Change, ...]
    written: bool

    @property
    def delta_usd(self) -> Decimal:
        zero = Decimal(0)
        return sum(((c.new_usd or zero) - (c.old_usd or zero) for c in self.changes), zero)


def _count(details: Mapping[str, Any], part: str, key: str) -> int:
    split = details.get(part)
    value = split.get(key) if isinstance(split, Mapping) else None
    return value if type(value) is int and value > 0 else 0


def usage_of(row: Mapping[str, Any]) -> Usage:
    """The usage a row records, audio and 1-hour cache writes included."""
    details = row["usage_details"] if isinstance(row["usage_details"], Mapping) else {}
    return Usage(
        input_tokens=row["input_tokens"],
        output_tokens=row["output_tokens"],
        cache_read_tokens=row["cache_read_tokens"],
        cache_write_tokens=row["cache_write_tokens"],
        reasoning_tokens=row["reasoning_tokens"],
        cache_write_1h_tokens=_count(details, "cache_write", "ttl_1h"),
        input_audio_tokens=_count(details, "input", "audio"),
        cache_audio_read_tokens=_count(details, "cache_read", "audio"),
        output_audio_tokens=_count(details, "output", "audio"),
    )


def _quantised(value: Decimal | None) -> Decimal | None:
    return None if value is None else value.quantize(_QUANTUM)


def reprice_row(row: Mapping[str, Any], prices: PriceBook) -> Cost | None:
    """The row's cost under today's prices, or None when it cannot be repriced here."""
    provider_class = PROVIDERS.get(row["provider"])
    provider_id = provider_class.prices_provider_id if provider_class is not None else None
    at: dt.datetime = row["started_at"]
    if provider_id is None and prices.find(row["provider"], row["model"], at) is None:
        return None  # priced by the endpoint's URL when recorded; the row does not keep it
    return attempt_cost(
        usage=usage_of(row),
        model=row["model"],
        reported=None,
        provider=row["provider"],
        provider_id=provider_id,
        at=at,
        overrides=prices,
    )


def _candidates() -> Any:
    return and_(
        _t.model.is_not(None),
        or_(
            _t.cost_source.in_(REPRICEABLE),
            and_(
                _t.cost_source.is_(None),
                _t.status == "ok",
                _t.usage_reported.is_(True),
                or_(_t.input_tokens > 0, _t.output_tokens > 0),
            ),
        ),
    )


def _pages(
    engine: Engine, since: dt.datetime | None, until: dt.datetime | None
) -> Iterator[list[Any]]:
    after = 0
    while True:
        query = select(token_usage).where(_candidates(), _t.id > after)
        if since is not None:
            query = query.where(_t.started_at >= since)
        if until is not None:
            query = query.where(_t.started_at < until)
        with engine.connect() as conn:
            rows = conn.execute(query.order_by(_t.id).limit(_PAGE)).mappings().all()
        if not rows:
            return
        yield list(rows)
        after = rows[-1]["id"]


def reprice(
    engine: Engine,
    prices: PriceBook,
    *,
    since: dt.datetime | None,
    until: dt.datetime | None = None,
    write: bool = True,
) -> RepriceReport:
    """Recompute the computed costs of rows started in ``[since, until)``; with ``write``,
    store the changed ones. The report lists exactly the rows whose cost or source changed."""
    examined = 0
    changes: list[Change] = []
    for page in _pages(engine, since, until):
        examined += len(page)
        page_changes: list[Change] = []
        for row in page:
            cost = reprice_row(row, prices)
            if cost is None:
                continue
            new_usd = _quantised(cost.usd)
            old_usd = _quantised(row["cost_usd"])
            if (new_usd, cost.source) == (old_usd, row["cost_source"]):
                continue
            page_changes.append(
                Change(
                    id=row["id"],
                    event_id=row["event_id"],
                    started_at=row["started_at"],
                    provider=row["provider"],
                    model=row["model"],
                    old_usd=old_usd,
                    old_source=row["cost_source"],
                    new_usd=new_usd,
                    new_source=cost.source,
                )
            )
        if write and page_changes:
            with engine.begin() as conn:
                for c in page_changes:
                    # The WHERE repeats the old figure: a row reconciled (or repriced)
                    # since it was read is not overwritten.
                    same_source = (
                        _t.cost_source.is_(None)
                        if c.old_source is None
                        else _t.cost_source == c.old_source
                    )
                    conn.execute(
                        update(token_usage)
                        .where(_t.id == c.id, same_source, _candidates())
                        .values(cost_usd=c.new_usd, cost_source=c.new_source)
                    )
        changes.extend(page_changes)
    return RepriceReport(examined, tuple(changes), write)
