"""Day budgets held across processes: the guard's totals in Redis, for gateway workers.

An in-process :class:`~ledger.budgets.guard.BudgetGuard` keeps running totals per
process: behind ``uvicorn --workers N`` each worker would admit up to the whole
limit. :class:`SharedBudgetGuard` wraps one and moves the *day* budgets
(``agent_day``, ``model_day``) to Redis:

* ``{prefix}{day}`` is a hash of recorded spend per budget and subject, in
  nano-dollars (integers: exact, and atomic with ``HINCRBY``); each row a worker
  records adds its cost there.
* ``{prefix}{day}:r:{budget}\\x1f{subject}`` holds the in-flight reservations, one
  field per worker. Each check is one Lua script that adds every live worker's
  reservation to the spend, compares with each limit and, only when all pass,
  reserves this call's worst case: two workers cannot both pass on the same total.
* A worker refreshes ``{prefix}w:{worker}`` (30 s TTL) with each check and row; the
  reservations of a worker whose key lapsed (it died mid-call) are dropped.

Staleness, bounded and documented: the check reads the totals as of its own
round trip; a row reaches Redis one event-loop turn after it is recorded; spend
from front doors other than the gateway (a Python ``Client``) is seen only from
the ledger at a worker's start (each worker raises Redis's totals to at least
what the ledger says, never adding, so nothing is counted twice); a dead worker's
reservations hold for at most 30 s. ``turn`` budgets (one call's attempts, all in
one worker) stay in process.

Redis unreachable: the wrapped in-process guard decides (one warning per outage,
as the limiter does), with the totals it kept meanwhile.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
import uuid
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal
from typing import TYPE_CHECKING, Any, Final

import redis.exceptions

from ledger.budgets.config import Budget
from ledger.budgets.guard import RESERVATION_TTL_S, BudgetGuard
from ledger.resilience.redis_backend import UNREACHABLE, RedisConnections, RedisHealth

if TYPE_CHECKING:
    from ledger.attempt import Prepared
    from ledger.events import UsageEvent

#: Nano-dollars: exact for any cost genai-prices gives to 9 places, and below 2**53 (Lua's
#: exact integers) up to $9 million a day.
NANO: Final = Decimal(10) ** 9
#: A worker whose heartbeat is older than this has its reservations dropped.
WORKER_TTL_S: Final = 30
#: Day hashes outlive their day by this much (a call started at 23:59 still lands).
DAY_TTL_S: Final = 2 * 86_400

# KEYS[1] the day's spend hash, KEYS[2..n+1] each budget key's reservation hash.
# ARGV[1] worker id, ARGV[2] heartbeat key prefix, ARGV[3] worker TTL s, ARGV[4] the
# estimate (nano), then per budget key: its spend field, its limit (nano).
# Returns {0} when reserved, else {i, spent, reserved}: the first budget that refuses.
CHECK_LUA: Final = """
local worker, beat, ttl, estimate = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
redis.call('SET', beat .. worker, 1, 'EX', ttl)
local n = #KEYS - 1
for i = 1, n do
  local spent = tonumber(redis.call('HGET', KEYS[1], ARGV[3 + 2 * i]) or '0')
  local reserved = 0
  local flat = redis.call('HGETALL', KEYS[1 + i])
  for j = 1, #flat, 2 do
    if redis.call('EXISTS', beat .. flat[j]) == 1 then
      reserved = reserved + tonumber(flat[j + 1])
    else
      redis.call('HDEL', KEYS[1 + i], flat[j])
    end
  end
  if spent + reserved + estimate > tonumber(ARGV[4 + 2 * i]) then
    return {i, spent, reserved}
  end
end
for i = 1, n do
  redis.call('HINCRBY', KEYS[1 + i], worker, estimate)
  redis.call('EXPIRE', KEYS[1 + i], ttl * 4)
end
return {0}
"""

# KEYS[1] the day's spend hash, KEYS[2..n+1] reservation hashes. ARGV[1] worker id,
# ARGV[2] heartbeat prefix, ARGV[3] worker TTL, ARGV[4] cost (nano), ARGV[5] reservation
# to release (nano), ARGV[6] day TTL, then the n spend fields.
RECORD_LUA: Final = """
local worker, cost, held = ARGV[1], tonumber(ARGV[4]), tonumber(ARGV[5])
redis.call('SET', ARGV[2] .. worker, 1, 'EX', tonumber(ARGV[3]))
for i = 1, #KEYS - 1 do
  if cost > 0 then redis.call('HINCRBY', KEYS[1], ARGV[6 + i], cost) end
  if held > 0 and redis.call('HINCRBY', KEYS[1 + i], worker, -held) <= 0 then
    redis.call('HDEL', KEYS[1 + i], worker)
  end
end
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[6]))
return 0
"""

# KEYS[1] the day's spend hash; ARGV[1] day TTL, then field, amount pairs: raise to at least.
SEED_LUA: Final = """
for i = 2, #ARGV, 2 do
  local now = tonumber(redis.call('HGET', KEYS[1], ARGV[i]) or '0')
  if now < tonumber(ARGV[i + 1]) then redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
end
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[1]))
return 0
"""


def to_nano(amount: Decimal) -> int:
    """Dollars as whole nano-dollars, rounded up (a limit must not be passed by rounding)."""
    return int((amount * NANO).to_integral_value(rounding=ROUND_CEILING))


@dataclass(frozen=True, slots=True)
class _Flight:
    keys: tuple[tuple[str, str, str], ...]
    amount: int
    expires: float


class SharedBudgetGuard:
    """A :class:`BudgetGuard` whose day budgets hold across processes; see the module doc."""

    def __init__(
        self,
        local: BudgetGuard,
        connections: RedisConnections,
        *,
        prefix: str = "ledger:budget:",
        health: RedisHealth | None = None,
    ) -> None:
        self.local = local
        self.connections = connections
        self.prefix = prefix
        self.health = health or RedisHealth()
        self.worker = uuid.uuid4().hex
        self._flights: dict[tuple[str, int], _Flight] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    # -- keys ------------------------------------------------------------------------------

    def _day_key(self, day: str) -> str:
        return f"{self.prefix}{day}"

    def _field(self, key: tuple[str, str, str]) -> str:
        return f"{key[0]}\x1f{key[1]}"

    def _reserve_key(self, key: tuple[str, str, str]) -> str:
        return f"{self.prefix}{key[2]}:r:{self._field(key)}"

    # -- seeding -------------------------------------------------------------------------

    def seed_from_local(self) -> None:
        """Raise Redis's day totals to at least the wrapped guard's (read from the ledger)."""
        by_day: dict[str, list[Any]] = {}
        for (budget, subject, day), spent in self.local.day_totals().items():
            by_day.setdefault(day, []).extend([f"{budget}\x1f{subject}", to_nano(spent)])
        try:
            for day, pairs in by_day.items():
                self.connections.client.eval(SEED_LUA, 1, self._day_key(day), DAY_TTL_S, *pairs)
        except UNREACHABLE as exc:
            self.health.failed(exc)

    # -- the hot path ----------------------------------------------------------------------

    async def abefore_send(self, prep: Prepared, now: dt.datetime) -> None:
        """Reserve the attempt's worst case in Redis and in process, or raise
        :class:`~ledger.errors.BudgetExceeded` (nothing sent)."""
        call, target = prep.call, prep.target
        day = now.astimezone(dt.UTC).date().isoformat()
        keyed = self.local.keys(
            call.actor_id, target.requested_model, call.tags, target.call_id, day
        )
        daily = [(b, k) for b, k in keyed if b.per_day]
        self._expire(day)
        if daily and self.health.usable():
            estimate = self.local.worst_case(prep)
            if estimate is None and self.local.unknown_price == "refuse":
                budget, key = daily[0]
                raise self.local.refusal(budget, key, Decimal(0), None, day)
            shared = await self._reserve(daily, estimate, day, prep)
            try:
                self.local.before_send(prep, now)
            except BaseException:
                if shared is not None:
                    self._settle(shared, 0, day)
                raise
            return
        self.local.before_send(prep, now)

    async def _reserve(
        self,
        daily: list[tuple[Budget, tuple[str, str, str]]],
        estimate: Decimal | None,
        day: str,
        prep: Prepared,
    ) -> _Flight | None:
        amount = to_nano(estimate) if estimate is not None else 0
        keys = [self._day_key(day), *(self._reserve_key(k) for _, k in daily)]
        args: list[Any] = [self.worker, f"{self.prefix}w:", WORKER_TTL_S, amount]
        for budget, key in daily:
            args += [self._field(key), to_nano(budget.limits["limit_usd"])]
        try:
            reply = await self.connections.async_client().eval(CHECK_LUA, len(keys), *keys, *args)
        except UNREACHABLE as exc:
            self.health.failed(exc)
            return None  # the in-process guard decides alone
        self.health.succeeded()
        refused = int(reply[0])
        if refused:
            budget, key = daily[refused - 1]
            spent = (Decimal(int(reply[1])) + Decimal(int(reply[2]))) / NANO
            raise self.local.refusal(budget, key, spent, estimate, day)
        flight = _Flight(tuple(k for _, k in daily), amount, time.monotonic() + RESERVATION_TTL_S)
        self._flights[(prep.target.call_id, prep.target.attempt)] = flight
        return flight

    def _expire(self, day: str) -> None:
        """Release the reservations of attempts whose row never came (a stream never opened)."""
        now = time.monotonic()
        for flight in [f for f, r in self._flights.items() if r.expires < now]:
            self._settle(self._flights.pop(flight), 0, day)

    def observe(self, event: UsageEvent) -> None:
        """Count a recorded row here and (one loop turn later) in Redis."""
        self.local.observe(event)
        flight = self._flights.pop((event.call_id, event.attempt), None)
        cost = to_nano(event.cost_usd) if event.cost_usd is not None else 0
        day = event.started_at.astimezone(dt.UTC).date().isoformat()
        if flight is None and cost:
            keyed = self.local.keys(
                event.actor_id, event.requested_model, event.tags, event.call_id, day
            )
            flight = _Flight(tuple(k for b, k in keyed if b.per_day), 0, 0.0)
        if flight is not None and flight.keys:
            self._settle(flight, cost, day)

    def _settle(self, flight: _Flight, cost: int, day: str) -> None:
        """Add ``cost`` to the flight's day totals and release its reservation, in Redis."""
        keys = [self._day_key(day), *(self._reserve_key(k) for k in flight.keys)]
        args: list[Any] = [self.worker, f"{self.prefix}w:", WORKER_TTL_S, cost, flight.amount]
        args += [DAY_TTL_S, *(self._field(k) for k in flight.keys)]
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._settle_now(keys, args)
            return
        task = loop.create_task(self._settle_async(keys, args))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _settle_now(self, keys: list[str], args: list[Any]) -> None:
        try:
            self.connections.client.eval(RECORD_LUA, len(keys), *keys, *args)
        except UNREACHABLE as exc:
            self.health.failed(exc)

    async def _settle_async(self, keys: list[str], args: list[Any]) -> None:
        try:
            await self.connections.async_client().eval(RECORD_LUA, len(keys), *keys, *args)
        except UNREACHABLE as exc:
            self.health.failed(exc)
        except redis.exceptions.RedisError as exc:  # ours to fix; never the caller's call
            self.health.failed(exc)

    async def drain(self) -> None:
        """Wait for the rows still on their way to Redis (at shutdown)."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
