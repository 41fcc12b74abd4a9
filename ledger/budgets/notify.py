"""Send each budget crossing to a webhook once: claim in the ledger database, post, confirm.

The state is the ``budget_alerts`` table (:data:`ledger.schema.budget_alerts`),
on SQLite or PostgreSQL, so cron runs, a ``watch`` loop and several hosts share
it. Per crossing:

1. *claim*: insert its row (``sent_at`` NULL). The unique key (budget, metric,
   subject, period, threshold) refuses a second row: the alert was sent, or
   another run is sending it. A claim left by a run that died (older than
   :data:`CLAIM_TTL`) is taken over.
2. *post* the message, retrying a 5xx, a 429 or a transport error with
   exponential backoff; other 4xx fail at once (retrying will not fix them).
3. on success set ``sent_at``; on failure delete the claim, so the next run
   tries again. Delivery never raises: the caller reports the
   :class:`Delivery` and its exit code keeps its own meaning.

The webhook URL is a credential (Slack's carry a token): it is never logged;
:func:`webhook_host` is what reports show.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
import urllib.parse
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

import httpx
from sqlalchemy import Connection, Engine, and_, delete, insert, select, update
from sqlalchemy.exc import IntegrityError

from ledger.budgets.alerts import Crossing, message
from ledger.schema import budget_alerts

log = logging.getLogger(__name__)

CLAIM_TTL: Final = dt.timedelta(minutes=10)
DEFAULT_RETRIES: Final = 3
DEFAULT_BACKOFF_S: Final = 1.0
DEFAULT_TIMEOUT_S: Final = 10.0


@dataclass(frozen=True, slots=True)
class Delivery:
    """What became of one crossing."""

    crossing: Crossing
    outcome: str  # "sent", "already sent", "failed"
    attempts: int = 0
    error: str | None = None

    @property
    def failed(self) -> bool:
        return self.outcome == "failed"


def webhook_host(url: str) -> str:
    """The part of a webhook URL that is safe to print: scheme and host."""
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.hostname or '?'}"


def _where(c: Crossing) -> Any:
    budget, metric, subject, period, threshold = c.key
    t = budget_alerts.c
    return and_(
        t.budget == budget,
        t.metric == metric,
        t.subject == subject,
        t.period == period,
        t.threshold == threshold,
    )


def claim(engine: Engine, c: Crossing, now: dt.datetime) -> bool:
    """Take the right to send ``c``; False when it was sent or is being sent elsewhere."""
    budget, metric, subject, period, threshold = c.key
    row = {
        "budget": budget,
        "metric": metric,
        "subject": subject,
        "period": period,
        "threshold": threshold,
        "spent_usd": c.spent_usd,
        "limit_usd": c.limit_usd,
        "claimed_at": now,
    }
    try:
        with engine.begin() as conn:
            conn.execute(insert(budget_alerts), row)
        return True
    except IntegrityError:
        pass
    with engine.begin() as conn:
        return _take_over_stale(conn, c, now)


def _take_over_stale(conn: Connection, c: Crossing, now: dt.datetime) -> bool:
    t = budget_alerts.c
    taken = conn.execute(
        update(budget_alerts)
        .where(_where(c), t.sent_at.is_(None), t.claimed_at < now - CLAIM_TTL)
        .values(claimed_at=now, spent_usd=c.spent_usd)
    )
    return taken.rowcount == 1


def confirm(engine: Engine, c: Crossing, now: dt.datetime) -> None:
    with engine.begin() as conn:
        conn.execute(update(budget_alerts).where(_where(c)).values(sent_at=now))


def release(engine: Engine, c: Crossing) -> None:
    with engine.begin() as conn:
        conn.execute(delete(budget_alerts).where(_where(c), budget_alerts.c.sent_at.is_(None)))


def sent_alerts(engine: Engine) -> list[dict[str, Any]]:
    """Every alert sent so far, oldest first (for reports and tests)."""
    t = budget_alerts
    with engine.connect() as conn:
        rows = conn.execute(select(t).where(t.c.sent_at.is_not(None)).order_by(t.c.id))
        return [dict(r) for r in rows.mappings()]


def _retryable(status: int | None) -> bool:
    return status is None or status == 429 or status >= 500


def post(
    client: httpx.Client,
    url: str,
    body: dict[str, Any],
    *,
    retries: int = DEFAULT_RETRIES,
    backoff_s: float = DEFAULT_BACKOFF_S,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[bool, int, str | None]:
    """POST ``body`` as JSON; (delivered, attempts, last error). Never raises."""
    error: str | None = None
    for attempt in range(1, retries + 2):
        status: int | None = None
        try:
            response = client.post(url, json=body)
            status = response.status_code
            if 200 <= status < 300:
                return True, attempt, None
            error = f"HTTP {status}"
        except httpx.HTTPError as exc:
            # Some transport errors quote the URL, and the URL is a credential.
            error = f"{type(exc).__name__}: {exc}".replace(url, webhook_host(url))
        if not _retryable(status) or attempt > retries:
            return False, attempt, error
        sleep(backoff_s * 2 ** (attempt - 1))
    return False, retries + 1, error


def notify(
    engine: Engine,
    found: Iterable[Crossing],
    url: str,
    *,
    retries: int = DEFAULT_RETRIES,
    backoff_s: float = DEFAULT_BACKOFF_S,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
) -> list[Delivery]:
    """Send every crossing not sent before (module doc); what became of each."""
    deliveries = []
    with httpx.Client(timeout=timeout_s) as client:
        for c in found:
            if not claim(engine, c, now()):
                deliveries.append(Delivery(c, "already sent"))
                continue
            delivered, attempts, error = post(
                client, url, message(c), retries=retries, backoff_s=backoff_s
            )
            if delivered:
                confirm(engine, c, now())
                deliveries.append(Delivery(c, "sent", attempts))
            else:
                release(engine, c)
                log.warning(
                    "budget alert for %r not delivered to %s after %d attempt(s): %s",
                    c.budget,
                    webhook_host(url),
                    attempts,
                    error,
                )
                deliveries.append(Delivery(c, "failed", attempts, error))
    return deliveries
