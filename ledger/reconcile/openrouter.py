"""``ledger reconcile openrouter``: store what OpenRouter billed each generation.

For OpenRouter rows with a ``generation_id`` and no billed figure yet, fetch
``GET {base}/generation?id=…`` with bounded concurrency and store
``total_cost`` in ``billed_cost_usd`` (``cost_usd`` keeps the call-time
estimate), the other figures in ``billing``, ``provider_name`` as the
row's ``upstream`` when the row had none (a stream that failed before naming it),
and ``provider_responses`` (the upstreams OpenRouter's router tried inside the call)
as its ``router_attempts`` when the row had none (a call made without router
metadata): what the response said at call time is never overwritten.

* Resumable and idempotent: the state is the row itself (``billed_at`` null =
  not yet). A rerun fetches only what is still missing; the UPDATE requires
  ``billed_at IS NULL``, so a row reconciled twice keeps one billed figure.
  ``refetch`` is the one way to replace a stored bill: rows already billed are
  fetched again and their figures overwritten.
* A bill is stored only when it is this row's and plausible: a response naming
  another generation (:class:`WrongGeneration`) counts as failed; a bill orders
  of magnitude off the row's estimate (:class:`Plausibility`) is held back,
  named in the report, and the row left for a later run.
* Bounded: each request (a trickled body included) ends at its timeout, each
  body at :data:`MAX_GENERATION_BYTES`, and the run at its deadline; rows the
  deadline left are counted as unfinished, never failed.
* OpenRouter lags: a 404 means "not found yet"; the row is left for a later run,
  never marked failed. Its stats lag by seconds, not hours: a row started more
  than :data:`NOT_FOUND_AFTER` before the run and still 404 is counted as
  ``unknown`` (made through another account, base URL or simulator run, it will
  never be billed there), not as pending.
* 429 and 5xx/timeouts are retried with exponential backoff (``Retry-After``
  honoured); a 401/403 stops the run (:class:`ReconcileAuthError`).
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Final, cast

import httpx
from sqlalchemy import JSON, bindparam, func, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.sql.dml import Update

from ledger.errors import ReconcileAuthError, ReconcileError, WrongGeneration
from ledger.providers.router_metadata import as_column
from ledger.reconcile.bounds import MIB, Deadline, aread_capped
from ledger.reconcile.generation import BadGeneration, Generation, parse_generation, shown
from ledger.reconcile.retry import DEFAULT_RETRY, Retry, retry_after
from ledger.schema import token_usage

DEFAULT_BASE_URL: Final = "https://openrouter.ai/api/v1"
#: A generation's stats are about 1.5 KB of JSON: a body above this is not one.
MAX_GENERATION_BYTES: Final = MIB
DEFAULT_TIMEOUT_S: Final = 30.0
NO_DEADLINE: Final = Deadline(None)
#: A generation still 404 this long after its row started is not lagging: it is unknown.
NOT_FOUND_AFTER: Final = dt.timedelta(hours=1)
_t = token_usage.c


@dataclass(frozen=True, slots=True)
class Plausibility:
    """When a bill is too far from its row's estimate to be stored unseen.

    A bill above ``max_ratio`` times the estimate, or below 1/``max_ratio`` of it, is
    implausible when the estimate is known and above zero and the larger of the two is
    at least ``floor_usd``: a fraction of a cent off on one call is rounding or a free
    variant, whatever the ratio. Prices move by percents and discounts by halves, not
    by a hundredfold; a 100x gap is another call's bill or a wrong price. ``max_ratio``
    None stores every bill.
    """

    max_ratio: Decimal | None = Decimal(100)
    floor_usd: Decimal = Decimal("0.01")

    def implausible(self, estimate: Decimal | None, billed: Decimal) -> bool:
        if self.max_ratio is None or estimate is None or estimate <= 0:
            return False
        if max(estimate, billed) < self.floor_usd:
            return False
        return billed > estimate * self.max_ratio or billed * self.max_ratio < estimate


DEFAULT_PLAUSIBILITY: Final = Plausibility()


class GenerationClient:
    """Fetches generations from OpenRouter (or the simulator) over one pooled client."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        *,
        api_key: str,
        base_url: str = DEFAULT_BASE_URL,
        retry: Retry = DEFAULT_RETRY,
        timeout: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self._http = http
        self._url = base_url.rstrip("/") + "/generation"
        self._headers = {"authorization": f"Bearer {api_key}"}
        self.retry = retry
        self.timeout = timeout  # one request, connect to last byte

    async def _get(self, generation_id: str) -> tuple[httpx.Response, bytes]:
        """The response and, for a 200, its body (read within :data:`MAX_GENERATION_BYTES`)."""
        async with self._http.stream(
            "GET", self._url, params={"id": generation_id}, headers=self._headers
        ) as response:
            if response.status_code != 200:
                return response, b""
            body = await aread_capped(
                response.aiter_bytes(),
                response.headers.get("content-length"),
                cap=MAX_GENERATION_BYTES,
                what=f"generation {generation_id}",
            )
            return response, body

    async def fetch(self, generation_id: str) -> Generation | None:
        """The generation, or None when OpenRouter does not have it yet (404).

        :class:`WrongGeneration` when the answer is another generation's stats.
        """
        problem = ""
        for attempt in range(self.retry.attempts):
            try:
                # httpx bounds each read, not the request: a byte every few seconds
                # would hold it forever without this.
                async with asyncio.timeout(self.timeout):
                    response, body = await self._get(generation_id)
            except httpx.TransportError as exc:  # httpx's own timeouts included
                problem = f"{type(exc).__name__}"
                await asyncio.sleep(self.retry.delay(attempt, None))
                continue
            except TimeoutError:
                problem = f"no whole answer within --timeout {self.timeout:g} s"
                await asyncio.sleep(self.retry.delay(attempt, None))
                continue
            status = response.status_code
            if status == 200:
                return _this_generation(generation_id, body)
            if status == 404:
                return None
            if status in (401, 403):
                raise ReconcileAuthError(
                    f"OpenRouter refused the key (HTTP {status}): check OPENROUTER_API_KEY"
                )
            if status == 429 or status >= 500:
                problem = f"HTTP {status}"
                await asyncio.sleep(self.retry.delay(attempt, retry_after(response)))
                continue
            raise ReconcileError(f"generation {generation_id}: unexpected HTTP {status}")
        raise ReconcileError(
            f"generation {generation_id}: still failing after {self.retry.attempts} tries "
            f"({problem})"
        )


def _this_generation(generation_id: str, body: bytes) -> Generation:
    """The generation in ``body``, if it is the one asked for."""
    try:
        generation = parse_generation(body)
    except BadGeneration as exc:
        raise ReconcileError(f"generation {generation_id}: {exc}") from None
    if generation.id != generation_id:
        named = shown(generation.id) if generation.id else "no generation id"
        raise WrongGeneration(
            f"generation {generation_id}: the answer is for {named}; its bill not stored"
        )
    return generation


#: How many failures and held-back bills a report names (the counts are whole).
NAMED: Final = 20


@dataclass(slots=True)
class ReconcileReport:
    examined: int = 0
    billed: int = 0
    pending: int = 0
    unknown: int = 0  # 404 long after the call: never billed by this endpoint
    failed: int = 0
    held_back: int = 0  # implausible bills, not stored
    unfinished: int = 0  # rows read but not fetched before the deadline
    estimated_usd: Decimal = Decimal(0)
    billed_usd: Decimal = Decimal(0)
    errors: list[str] = field(default_factory=list)
    implausible: list[dict[str, str]] = field(default_factory=list)

    @property
    def drift_usd(self) -> Decimal:
        return self.billed_usd - self.estimated_usd

    @property
    def complete(self) -> bool:
        """Every row examined was billed, is pending at OpenRouter or is unknown there
        (said once per run, with the count): nothing a rerun could change."""
        return not (self.failed or self.held_back or self.unfinished)

    def fail(self, message: str) -> None:
        self.failed += 1
        if len(self.errors) < NAMED:
            self.errors.append(message)

    def hold_back(self, generation_id: str, estimate: Decimal, billed: Decimal) -> None:
        self.held_back += 1
        if len(self.implausible) < NAMED:
            self.implausible.append(
                {
                    "generation_id": generation_id,
                    "estimated_usd": str(estimate),
                    "billed_usd": str(billed),
                }
            )

    def as_dict(self) -> dict[str, Any]:
        return {
            "examined": self.examined,
            "billed": self.billed,
            "pending": self.pending,
            "unknown": self.unknown,
            "failed": self.failed,
            "held_back": self.held_back,
            "unfinished": self.unfinished,
            "complete": self.complete,
            "estimated_usd": str(self.estimated_usd),
            "billed_usd": str(self.billed_usd),
            "drift_usd": str(self.drift_usd),
            "errors": self.errors[:NAMED],
            "implausible": self.implausible[:NAMED],
        }


def _page(
    engine: Engine, after: int, since: dt.datetime | None, size: int, refetch: bool
) -> Sequence[Any]:
    query = select(
        _t.id, _t.generation_id, _t.cost_usd, _t.upstream, _t.billing, _t.started_at
    ).where(
        _t.provider == "openrouter",
        _t.generation_id.is_not(None),
        _t.id > after,
    )
    if not refetch:
        query = query.where(_t.billed_at.is_(None))
    if since is not None:
        query = query.where(_t.started_at >= since)
    with engine.connect() as conn:
        return conn.execute(query.order_by(_t.id).limit(size)).all()


#: The router's attempts as bound: None must be SQL NULL (the column type's default
#: would store JSON ``null``, which is no longer NULL to ``coalesce`` or ``IS NULL``).
_ATTEMPTS = bindparam("attempts_json", type_=JSON(none_as_null=True))
_STORE = (
    update(token_usage)
    .where(_t.id == bindparam("row_id"), _t.billed_at.is_(None))
    .values(
        billed_cost_usd=bindparam("billed"),
        billed_at=bindparam("at"),
        billing=bindparam("billing_json", type_=token_usage.c.billing.type),
        upstream=func.coalesce(_t.upstream, bindparam("provider_name")),
        router_attempts=func.coalesce(_t.router_attempts, _ATTEMPTS, type_=JSON),
    )
)
#: --refetch: the stored bill is replaced, and so is an upstream that came from it.
_RESTORE = (
    update(token_usage)
    .where(_t.id == bindparam("row_id"))
    .values(
        billed_cost_usd=bindparam("billed"),
        billed_at=bindparam("at"),
        billing=bindparam("billing_json", type_=token_usage.c.billing.type),
        upstream=bindparam("upstream"),
        router_attempts=func.coalesce(_t.router_attempts, _ATTEMPTS, type_=JSON),
    )
)


def _refetched_upstream(row: Any, provider_name: str | None) -> str | None:
    """A refetched row's upstream: the new bill's provider when the row's upstream was
    the old bill's (filled by an earlier reconcile, maybe from a wrong bill) or none."""
    old = row.billing.get("provider_name") if isinstance(row.billing, dict) else None
    if provider_name and (row.upstream is None or row.upstream == old):
        return provider_name
    return cast(str | None, row.upstream)


@dataclass(slots=True)
class _Pipeline:
    """One run's moving parts: rows flow page → queue → fetchers → batch → store.

    Fetching never waits for the database: the next page is read while the last
    rows of this one are in flight, and a full batch is stored (one writer, in a
    thread) while the fetchers carry on. Memory is bounded by the queue (two
    pages) plus one batch, whatever the number of rows.
    """

    engine: Engine
    client: GenerationClient
    since: dt.datetime | None
    page_size: int
    batch_size: int
    refetch: bool
    plausibility: Plausibility
    deadline: Deadline
    #: a row started before this and not found is unknown, not pending
    unknown_before: dt.datetime = field(
        default_factory=lambda: dt.datetime.now(dt.UTC) - NOT_FOUND_AFTER
    )
    report: ReconcileReport = field(default_factory=ReconcileReport)
    batch: list[dict[str, Any]] = field(default_factory=list)
    stored: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def produce(self, queue: asyncio.Queue[Any], workers: int) -> None:
        after = 0
        while not self.deadline.passed and (
            rows := await asyncio.to_thread(
                _page, self.engine, after, self.since, self.page_size, self.refetch
            )
        ):
            after = rows[-1].id
            self.report.examined += len(rows)
            for row in rows:
                await queue.put(row)
        for _ in range(workers):
            await queue.put(None)  # one stop per fetcher

    async def fetch(self, queue: asyncio.Queue[Any]) -> None:
        while (row := await queue.get()) is not None:
            if self.deadline.passed:
                self.report.unfinished += 1  # the rest of the queue drains at once
                continue
            try:
                # The request's own timeout and retries cannot outlive the run's deadline.
                async with asyncio.timeout(self.deadline.remaining()):
                    result = await self.client.fetch(row.generation_id)
            except TimeoutError:
                self.report.unfinished += 1
                continue
            except ReconcileAuthError:
                raise
            except ReconcileError as exc:
                self.report.fail(str(exc))
                continue
            if result is None:
                if row.started_at < self.unknown_before:  # UTCDateTime: always aware
                    self.report.unknown += 1
                else:
                    self.report.pending += 1
                continue
            if self.plausibility.implausible(row.cost_usd, result.total_cost):
                self.report.hold_back(row.generation_id, row.cost_usd, result.total_cost)
                continue
            values = {
                "row_id": row.id,
                "billed": result.total_cost,
                "at": dt.datetime.now(dt.UTC),
                "billing_json": result.billing,
                "attempts_json": as_column(result.router_attempts),
            }
            if self.refetch:
                values["upstream"] = _refetched_upstream(row, result.provider_name)
            else:
                values["provider_name"] = result.provider_name
            self.batch.append(values)
            self.report.estimated_usd += row.cost_usd or 0
            self.report.billed_usd += result.total_cost
            if len(self.batch) >= self.batch_size:
                await self.flush()

    async def flush(self) -> None:
        batch, self.batch = self.batch, []
        if batch:
            statement = _RESTORE if self.refetch else _STORE
            async with self.stored:  # one writer at a time
                self.report.billed += await asyncio.to_thread(_store, self.engine, statement, batch)


async def reconcile_openrouter(
    engine: Engine,
    client: GenerationClient,
    *,
    since: dt.datetime | None,
    concurrency: int = 16,
    page_size: int = 1000,
    batch_size: int = 500,
    refetch: bool = False,
    plausibility: Plausibility = DEFAULT_PLAUSIBILITY,
    deadline: Deadline = NO_DEADLINE,
) -> ReconcileReport:
    """Fetch and store the billed cost of every unreconciled OpenRouter row since ``since``
    (``refetch``: of every OpenRouter row since then, replacing bills already stored).

    ``concurrency`` generations are in flight at once; rows are read ``page_size`` at a
    time and stored ``batch_size`` at a time. A refused key (:class:`ReconcileAuthError`)
    stops the run; what was stored before it stays stored (a rerun resumes). When
    ``deadline`` passes, fetches in flight are abandoned and the rows not fetched are
    counted as unfinished; what was fetched is still stored.
    """
    run = _Pipeline(engine, client, since, page_size, batch_size, refetch, plausibility, deadline)
    queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=2 * page_size)
    try:
        async with asyncio.TaskGroup() as group:
            group.create_task(run.produce(queue, concurrency))
            for _ in range(concurrency):
                group.create_task(run.fetch(queue))
    except BaseExceptionGroup as group_error:
        # The run's own error, not the group: a refused key first, else the first failure
        # (a database error from the page reader or the store).
        first = (group_error.subgroup(ReconcileAuthError) or group_error).exceptions[0]
        raise first from None
    await run.flush()
    return run.report


def _store(engine: Engine, statement: Update, updates: list[dict[str, Any]]) -> int:
    with engine.begin() as conn:
        result = conn.execute(statement, updates)
    if engine.dialect.supports_sane_multi_rowcount:
        return max(result.rowcount, 0)
    return len(updates)
