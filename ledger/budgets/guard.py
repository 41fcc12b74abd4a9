"""The in-process guard: refuse, before anything is sent, a call that could cross a budget.

::

    guard = BudgetGuard.from_ledger(load_config())     # today's spend, read once
    client = Client(guard=guard)
    client.chat(messages, model="gpt-4o-mini", actor_id="planner", max_tokens=500)
    # -> BudgetExceeded when planner's spend today + this call's worst case > its limit

Checked budgets: ``agent_day`` and ``model_day`` (per UTC day of the call's
start, each agent or model separately) and ``turn`` budgets with a
``max_usd`` (the attempts of one call together; mean and p95 are corpus
figures, for ``ledger budget check``).

The hot path reads only memory: running totals per budget, subject and day,
seeded once from the ledger (:meth:`BudgetGuard.from_ledger`) and updated by
the client with every row it records (:meth:`BudgetGuard.observe`). A call's
*worst case* is its input-token estimate (the request body's bytes /
``bytes_per_token``: a deliberate over-estimate for text) plus ``max_tokens``
(else ``default_max_tokens``) output tokens, at the model's genai-prices price,
input priced as cache writes when those cost more. The worst case is reserved
while the call is in flight, so concurrent calls cannot all pass on the same
total; the reservation gives way to the real cost when the row is recorded.

A model without a known price has no worst case: the call is checked on the
spend so far only (``unknown_price="refuse"`` refuses it instead). A refusal
is logged once per budget, subject and day.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

from ledger.budgets.config import Budget, BudgetConfig
from ledger.errors import BudgetExceeded
from ledger.pricing import computed_cost
from ledger.providers.base import Usage

if TYPE_CHECKING:
    from ledger.attempt import Prepared
    from ledger.events import UsageEvent

log = logging.getLogger(__name__)

DEFAULT_MAX_TOKENS: Final = 4096
#: English text runs ~4 bytes per token; 3 over-estimates, as a worst case should.
DEFAULT_BYTES_PER_TOKEN: Final = 3.0
#: An in-flight reservation whose row never came (a stream never opened) lapses after this.
RESERVATION_TTL_S: Final = 600.0
#: Calls whose running turn total is remembered (a turn's attempts come close together).
TURNS_REMEMBERED: Final = 10_000
_ZERO: Final = Decimal(0)
_CENT: Final = Decimal("0.0001")

#: (budget name, subject, window): window is the UTC day, or the call id for a turn.
_Key = tuple[str, str, str]


def _usd(amount: Decimal) -> str:
    return f"${amount.quantize(_CENT):,}"


@dataclasses.dataclass(slots=True)
class _Reservation:
    keys: list[_Key]
    amount: Decimal
    expires: float


class BudgetGuard:
    """Running totals in memory, checked by the client before each attempt; see the module doc."""

    def __init__(
        self,
        budgets: BudgetConfig | Iterable[Budget],
        *,
        default_max_tokens: int = DEFAULT_MAX_TOKENS,
        bytes_per_token: float = DEFAULT_BYTES_PER_TOKEN,
        unknown_price: Literal["allow", "refuse"] = "allow",
        reservation_ttl_s: float = RESERVATION_TTL_S,
    ) -> None:
        items = budgets.budgets if isinstance(budgets, BudgetConfig) else tuple(budgets)
        self.budgets = tuple(b for b in items if b.per_day or "max_usd" in b.limits)
        self.default_max_tokens = default_max_tokens
        self.bytes_per_token = bytes_per_token
        self.unknown_price = unknown_price
        self.reservation_ttl_s = reservation_ttl_s
        self.unknown_cost_rows = 0
        self._spent: dict[_Key, Decimal] = {}
        self._reserved: dict[_Key, Decimal] = {}
        # Turn totals (window ""), oldest first: bounded, a turn's attempts come close together.
        self._turn_spent: OrderedDict[_Key, Decimal] = OrderedDict()
        self._flights: dict[tuple[str, int], _Reservation] = {}
        self._logged: set[_Key] = set()
        self._day: str | None = None
        self._lock = threading.Lock()

    # -- seeding ---------------------------------------------------------------

    @classmethod
    def from_ledger(
        cls,
        budgets: BudgetConfig | Iterable[Budget],
        url: str | None = None,
        *,
        at: dt.datetime | None = None,
        analytics_path: Path | None = None,
        **options: Any,
    ) -> BudgetGuard:
        """A guard whose day totals start from the ledger's spend so far today (UTC).

        One analytics sync and query, here, at start. Rows still in the journal
        (not yet in the database) are not seen.
        """
        from ledger.analytics import Analytics
        from ledger.analytics.read.spend import SpendScope, spend_by_subject
        from ledger.budgets.evaluation import start_of_day

        guard = cls(budgets, **options)
        midnight = start_of_day(at or dt.datetime.now(dt.UTC))
        with Analytics(url, path=analytics_path, allow_memory=True) as analytics:
            for b in guard.budgets:
                if not b.per_day:
                    continue
                scope = SpendScope(start=midnight, actor=b.agent, model=b.model, tags=b.tags)
                by = b.by
                frame = spend_by_subject(analytics, scope, by=by)
                for subject, cost in zip(frame["subject"], frame["cost_usd"], strict=True):
                    guard.seed(b.name, subject or "", midnight.date(), cost)
        return guard

    def seed(self, budget: str, subject: str, day: dt.date, spent_usd: Decimal) -> None:
        """Add spend recorded elsewhere to a day total (``from_ledger`` uses it)."""
        with self._lock:
            key = (budget, subject, day.isoformat())
            self._spent[key] = self._spent.get(key, _ZERO) + spent_usd

    def day_totals(self) -> dict[_Key, Decimal]:
        """The recorded spend per (budget, subject, day), reservations excluded."""
        with self._lock:
            return dict(self._spent)

    # -- the hot path ----------------------------------------------------------

    def spent(self, budget: str, subject: str, window: str) -> Decimal:
        """Recorded plus in-flight spend of one budget, subject and window."""
        key = (budget, subject, window)
        with self._lock:
            return self._recorded(key) + self._reserved.get(key, _ZERO)

    def worst_case(self, prep: Prepared) -> Decimal | None:
        """The most this attempt can cost at its model's price; None when unpriced."""
        input_tokens = math.ceil(len(prep.content) / self.bytes_per_token)
        output_tokens = prep.call.max_tokens or self.default_max_tokens
        provider = prep.target.provider
        costs = [
            computed_cost(
                Usage(input_tokens=input_tokens, output_tokens=output_tokens, cache_write_tokens=w),
                prep.target.model,
                provider=provider.name,
                provider_id=provider.prices_provider_id,
                api_url=provider.base_url,
                at=prep.started_at,
            )
            for w in (0, input_tokens)
        ]
        known = [c for c in costs if c is not None]
        return max(known) if known else None

    def keys(
        self,
        actor_id: str | None,
        model: str,
        tags: Mapping[str, Any] | None,
        call_id: str,
        day: str,
    ) -> list[tuple[Budget, _Key]]:
        """The budgets a call applies to, each with its (budget, subject, window) key."""
        return [
            (
                b,
                (b.name, b.subject_of(actor_id, model), day)
                if b.per_day
                else (b.name, call_id, ""),
            )
            for b in self.budgets
            if b.applies_to(actor_id, model, tags)
        ]

    def before_send(self, prep: Prepared, now: dt.datetime) -> None:
        """Reserve this attempt's worst case, or raise :class:`BudgetExceeded` (nothing sent)."""
        call, target = prep.call, prep.target
        day = now.astimezone(dt.UTC).date().isoformat()
        keys = self.keys(call.actor_id, target.requested_model, call.tags, target.call_id, day)
        if not keys:
            return
        estimate = self.worst_case(prep)
        with self._lock:
            self._roll(day)
            self._expire()
            for budget, key in keys:
                self._check(budget, key, estimate, day)
            amount = estimate or _ZERO
            for _, key in keys:
                self._reserved[key] = self._reserved.get(key, _ZERO) + amount
            expires = time.monotonic() + self.reservation_ttl_s
            flight = (target.call_id, target.attempt)
            self._flights[flight] = _Reservation([k for _, k in keys], amount, expires)

    async def abefore_send(self, prep: Prepared, now: dt.datetime) -> None:
        """:meth:`before_send` for async callers (the gateway), as the shared guard has it."""
        self.before_send(prep, now)

    def _check(self, budget: Budget, key: _Key, estimate: Decimal | None, day: str) -> None:
        spent = self._recorded(key) + self._reserved.get(key, _ZERO)
        if self.allows(budget, spent, estimate):
            return
        raise self.refusal(budget, key, spent, estimate, day)

    def allows(self, budget: Budget, spent: Decimal, estimate: Decimal | None) -> bool:
        """Whether ``estimate`` more on ``spent`` (recorded + in flight) stays in ``budget``."""
        limit = budget.limits["limit_usd" if budget.per_day else "max_usd"]
        unpriced = estimate is None and self.unknown_price == "refuse"
        return not unpriced and spent + (estimate or _ZERO) <= limit

    def refusal(
        self, budget: Budget, key: _Key, spent: Decimal, estimate: Decimal | None, day: str
    ) -> BudgetExceeded:
        """The error refusing a call on ``key`` (logged once per budget, subject and day)."""
        limit = budget.limits["limit_usd" if budget.per_day else "max_usd"]
        name, subject, _ = key
        if budget.per_day:
            who = f"{'agent' if budget.kind == 'agent_day' else 'model'} {subject or '(none)'}"
            where, window = f"{who} on {day}", day
        else:
            where, window = f"call {subject}", subject
        cost = "an unknown price" if estimate is None else f"up to {_usd(estimate)}"
        exc = BudgetExceeded(
            f"budget {name!r} ({budget.kind}) refused a call for {where}: {_usd(spent)} spent "
            f"so far + {cost} for this call would exceed {_usd(limit)}; nothing was sent",
            budget=name,
            subject=subject,
            window=window,
            spent_usd=spent,
            estimate_usd=estimate if estimate is not None else _ZERO,
            limit_usd=limit,
        )
        # Once per budget, subject and day: a runaway loop must not flood the log.
        logged = (name, subject if budget.per_day else "", day)
        if logged not in self._logged:
            self._logged.add(logged)
            log.warning("%s", exc)
        return exc

    def observe(self, event: UsageEvent) -> None:
        """Count a recorded row: release its reservation, add its cost to the totals."""
        day = event.started_at.astimezone(dt.UTC).date().isoformat()
        keys = self.keys(event.actor_id, event.requested_model, event.tags, event.call_id, day)
        with self._lock:
            self._roll(day)
            self._release(self._flights.pop((event.call_id, event.attempt), None))
            if event.cost_usd is None:
                self.unknown_cost_rows += 1
                return
            for _, key in keys:
                if key[2]:
                    self._spent[key] = self._spent.get(key, _ZERO) + event.cost_usd
                else:
                    self._add_turn(key, event.cost_usd)

    # -- bookkeeping (under the lock) ------------------------------------------

    def _release(self, flight: _Reservation | None) -> None:
        if flight is None:
            return
        for key in flight.keys:
            left = self._reserved.get(key, _ZERO) - flight.amount
            if left > 0:
                self._reserved[key] = left
            else:
                self._reserved.pop(key, None)

    def _expire(self) -> None:
        now = time.monotonic()
        for flight in [f for f, r in self._flights.items() if r.expires < now]:
            self._release(self._flights.pop(flight))

    def _recorded(self, key: _Key) -> Decimal:
        table = self._spent if key[2] else self._turn_spent
        return table.get(key, _ZERO)

    def _add_turn(self, key: _Key, cost: Decimal) -> None:
        self._turn_spent[key] = self._turn_spent.get(key, _ZERO) + cost
        self._turn_spent.move_to_end(key)
        while len(self._turn_spent) > TURNS_REMEMBERED:
            self._turn_spent.popitem(last=False)

    def _roll(self, day: str) -> None:
        """On a new UTC day, forget the totals and log marks of the days before."""
        if self._day is not None and day <= self._day:
            return
        self._day = day
        for table in (self._spent, self._reserved):
            for key in [k for k in table if k[2] and k[2] < day]:
                del table[key]
        self._logged = {k for k in self._logged if k[2] >= day}
