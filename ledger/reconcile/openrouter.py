"""``ledger reconcile openrouter``: store what OpenRouter billed each generation.

For OpenRouter rows with a ``generation_id`` and no billed figure yet, fetch
``GET {base}/generation?id=…`` with bounded concurrency and store
``total_cost`` in ``billed_cost_usd`` (``cost_usd`` keeps the call-time
estimate), the other figures in ``billing``, and ``provider_name`` as the
row's ``upstream`` when the row had none (a stream that failed before naming it).

* Resumable and idempotent: the state is the row itself (``billed_at`` null =
  not yet). A rerun fetches only what is still missing; the UPDATE requires
  ``billed_at IS NULL``, so a row reconciled twice keeps one billed figure.
* OpenRouter lags: a 404 means "not found yet"; the row is left for a later run,
  never marked failed.
* 429 and 5xx/timeouts are retried with exponential backoff (``Retry-After``
  honoured); a 401/403 stops the run (:class:`ReconcileAuthError`).
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Final

import httpx
from sqlalchemy import bindparam, func, select, update
from sqlalchemy.engine import Engine

from ledger.errors import ReconcileAuthError, ReconcileError
from ledger.reconcile.generation import BadGeneration, Generation, parse_generation
from ledger.reconcile.retry import DEFAULT_RETRY, Retry, retry_after
from ledger.schema import token_usage

DEFAULT_BASE_URL: Final = "https://openrouter.ai/api/v1"
_t = token_usage.c


class GenerationClient:
    """Fetches generations from OpenRouter (or the simulator) over one pooled client."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        *,
        api_key: str,
        base_url: str = DEFAULT_BASE_URL,
        retry: Retry = DEFAULT_RETRY,
    ) -> None:
        self._http = http
        self._url = base_url.rstrip("/") + "/generation"
        self._headers = {"authorization": f"Bearer {api_key}"}
        self.retry = retry

    async def fetch(self, generation_id: str) -> Generation | None:
        """The generation, or None when OpenRouter does not have it yet (404)."""
        problem = ""
        for attempt in range(self.retry.attempts):
            try:
                response = await self._http.get(
                    self._url, params={"id": generation_id}, headers=self._headers
                )
            except httpx.TransportError as exc:  # timeouts included
                problem = f"{type(exc).__name__}"
                await asyncio.sleep(self.retry.delay(attempt, None))
                continue
            status = response.status_code
            if status == 200:
                try:
                    return parse_generation(response.content)
                except BadGeneration as exc:
                    raise ReconcileError(f"generation {generation_id}: {exc}") from None
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


@dataclass(slots=True)
class ReconcileReport:
    examined: int = 0
    billed: int = 0
    pending: int = 0
    failed: int = 0
    estimated_usd: Decimal = Decimal(0)
    billed_usd: Decimal = Decimal(0)
    errors: list[str] = field(default_factory=list)

    @property
    def drift_usd(self) -> Decimal:
        return self.billed_usd - self.estimated_usd

    def as_dict(self) -> dict[str, Any]:
        return {
            "examined": self.examined,
            "billed": self.billed,
            "pending": self.pending,
            "failed": self.failed,
            "estimated_usd": str(self.estimated_usd),
            "billed_usd": str(self.billed_usd),
            "drift_usd": str(self.drift_usd),
            "errors": self.errors[:20],
        }


def _page(engine: Engine, after: int, since: dt.datetime | None, size: int) -> Sequence[Any]:
    query = select(_t.id, _t.generation_id, _t.cost_usd).where(
        _t.provider == "openrouter",
        _t.generation_id.is_not(None),
        _t.billed_at.is_(None),
        _t.id > after,
    )
    if since is not None:
        query = query.where(_t.started_at >= since)
    with engine.connect() as conn:
        return conn.execute(query.order_by(_t.id).limit(size)).all()


_STORE = (
    update(token_usage)
    .where(_t.id == bindparam("row_id"), _t.billed_at.is_(None))
    .values(
        billed_cost_usd=bindparam("billed"),
        billed_at=bindparam("at"),
        billing=bindparam("billing_json", type_=token_usage.c.billing.type),
        upstream=func.coalesce(_t.upstream, bindparam("provider_name")),
    )
)


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
    report: ReconcileReport = field(default_factory=ReconcileReport)
    batch: list[dict[str, Any]] = field(default_factory=list)
    stored: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def produce(self, queue: asyncio.Queue[Any], workers: int) -> None:
        after = 0
        while rows := await asyncio.to_thread(
            _page, self.engine, after, self.since, self.page_size
        ):
            after = rows[-1].id
            self.report.examined += len(rows)
            for row in rows:
                await queue.put(row)
        for _ in range(workers):
            await queue.put(None)  # one stop per fetcher

    async def fetch(self, queue: asyncio.Queue[Any]) -> None:
        while (row := await queue.get()) is not None:
            try:
                result = await self.client.fetch(row.generation_id)
            except ReconcileAuthError:
                raise
            except ReconcileError as exc:
                self.report.failed += 1
                self.report.errors.append(str(exc))
                continue
            if result is None:
                self.report.pending += 1
                continue
            self.batch.append(
                {
                    "row_id": row.id,
                    "billed": result.total_cost,
                    "at": dt.datetime.now(dt.UTC),
                    "billing_json": result.billing,
                    "provider_name": result.provider_name,
                }
            )
            self.report.estimated_usd += row.cost_usd or 0
            self.report.billed_usd += result.total_cost
            if len(self.batch) >= self.batch_size:
                await self.flush()

    async def flush(self) -> None:
        batch, self.batch = self.batch, []
        if batch:
            async with self.stored:  # one writer at a time
                self.report.billed += await asyncio.to_thread(_store, self.engine, batch)


async def reconcile_openrouter(
    engine: Engine,
    client: GenerationClient,
    *,
    since: dt.datetime | None,
    concurrency: int = 16,
    page_size: int = 1000,
    batch_size: int = 500,
) -> ReconcileReport:
    """Fetch and store the billed cost of every unreconciled OpenRouter row since ``since``.

    ``concurrency`` generations are in flight at once; rows are read ``page_size`` at a
    time and stored ``batch_size`` at a time. A refused key (:class:`ReconcileAuthError`)
    stops the run; what was stored before it stays stored (a rerun resumes).
    """
    run = _Pipeline(engine, client, since, page_size, batch_size)
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


def _store(engine: Engine, updates: list[dict[str, Any]]) -> int:
    with engine.begin() as conn:
        result = conn.execute(_STORE, updates)
    if engine.dialect.supports_sane_multi_rowcount:
        return max(result.rowcount, 0)
    return len(updates)
