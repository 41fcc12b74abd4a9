"""Reading a provider's organisation cost and usage reports with an admin key.

:data:`OPENAI` and :data:`ANTHROPIC` say, per provider, where the two reports
live, how a request is authenticated and parameterised (daily buckets, grouped
so a line names its model and project/workspace) and which parser reads a page.
:func:`fetch_report` follows the pages (``page`` = the previous ``next_page``)
until ``has_more`` is false, backing off on 429/5xx/timeouts (``Retry-After``
honoured). A 401/403 stops at once (:class:`ReconcileAuthError`, naming the
environment variable to fix); nothing is written to the ledger by this module.
Each request ends at its timeout (a trickled body included), each page's body
at :data:`MAX_PAGE_BYTES` (:class:`ResponseTooLarge`), and the whole run at its
deadline (:class:`ReconcileDeadline`).
The key travels in a header only: it is never in a URL, a message or a log.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal

import httpx

from ledger.errors import ReconcileAuthError, ReconcileError
from ledger.reconcile.bounds import MIB, Deadline, RequestTimedOut, read_capped
from ledger.reconcile.reports import (
    BadReport,
    BilledCost,
    BilledTokens,
    Line,
    Page,
    parse_anthropic_costs,
    parse_anthropic_usage,
    parse_openai_costs,
    parse_openai_usage,
)
from ledger.reconcile.retry import DEFAULT_RETRY, Retry, retry_after

Params = list[tuple[str, str]]
#: A cursor loop (a server that keeps answering the same next_page) stops here.
MAX_PAGES: Final = 10_000
#: A page's body is refused above this: parsed, a page takes about five times its size
#: (400k buckets, 91 MB, peaked at 740 MB), so this bounds a page near 100 MB. A real
#: page of 31 (usage) or 180 (costs) daily buckets is far below it.
MAX_PAGE_BYTES: Final = 16 * MIB
DEFAULT_TIMEOUT_S: Final = 60.0
NO_DEADLINE: Final = Deadline(None)


@dataclass(frozen=True, slots=True)
class ReportSource:
    """One provider's two reports: paths, auth, query parameters and parsers."""

    provider: Literal["openai", "anthropic"]
    label: str
    key_env: tuple[str, ...]  # the first one set is used
    base_env: str
    default_base: str
    costs_path: str
    usage_path: str
    parse_costs: Callable[[bytes], Page[BilledCost]]
    parse_usage: Callable[[bytes], Page[BilledTokens]]
    key_help: str

    def headers(self, key: str) -> dict[str, str]:
        if self.provider == "anthropic":
            return {"x-api-key": key, "anthropic-version": "2023-06-01"}
        return {"authorization": f"Bearer {key}"}

    def params(
        self, report: Literal["costs", "usage"], start: dt.datetime, end: dt.datetime
    ) -> Params:
        """Daily buckets over ``[start, end)``, grouped so each line names its model and scope."""
        if self.provider == "openai":
            groups = ("line_item", "project_id") if report == "costs" else ("model", "project_id")
            window = [
                ("start_time", str(int(start.timestamp()))),
                ("end_time", str(int(end.timestamp()))),
            ]
            # costs takes up to 180 daily buckets a page, usage up to 31
            limit = "180" if report == "costs" else "31"
            return [*window, ("bucket_width", "1d"), ("limit", limit)] + [
                ("group_by", g) for g in groups
            ]
        groups = ("description", "workspace_id") if report == "costs" else ("model", "workspace_id")
        window = [("starting_at", _rfc3339(start)), ("ending_at", _rfc3339(end))]
        return [*window, ("bucket_width", "1d"), ("limit", "31")] + [
            ("group_by[]", g) for g in groups
        ]


def _rfc3339(when: dt.datetime) -> str:
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


OPENAI: Final = ReportSource(
    provider="openai",
    label="OpenAI",
    key_env=("OPENAI_ADMIN_KEY",),
    base_env="OPENAI_ADMIN_BASE_URL",
    default_base="https://api.openai.com/v1",
    costs_path="/organization/costs",
    usage_path="/organization/usage/completions",
    parse_costs=parse_openai_costs,
    parse_usage=parse_openai_usage,
    key_help=(
        "set OPENAI_ADMIN_KEY to an organisation admin key (sk-admin-…, created by an "
        "organisation owner under platform.openai.com → Settings → Admin keys); "
        "a project key cannot read the organisation's costs"
    ),
)
ANTHROPIC: Final = ReportSource(
    provider="anthropic",
    label="Anthropic",
    key_env=("ANTHROPIC_ADMIN_KEY", "ANTHROPIC_ADMIN_API_KEY"),
    base_env="ANTHROPIC_ADMIN_BASE_URL",
    default_base="https://api.anthropic.com/v1",
    costs_path="/organizations/cost_report",
    usage_path="/organizations/usage_report/messages",
    parse_costs=parse_anthropic_costs,
    parse_usage=parse_anthropic_usage,
    key_help=(
        "set ANTHROPIC_ADMIN_KEY to an Admin API key (sk-ant-admin…, provisioned by an "
        "organisation admin in the Console → Settings → Admin keys); "
        "a regular API key cannot read the usage and cost reports"
    ),
)
SOURCES: Final = {source.provider: source for source in (OPENAI, ANTHROPIC)}


@dataclass(frozen=True, slots=True)
class Limits:
    """How long one request may take, and the whole run."""

    timeout: float = DEFAULT_TIMEOUT_S
    deadline: Deadline = NO_DEADLINE


DEFAULT_LIMITS: Final = Limits()


def _attempt(
    http: httpx.Client, url: str, params: Params, headers: dict[str, str], budget: float
) -> tuple[httpx.Response, bytes]:
    """One GET: the response and, for a 200, its body, read within ``budget`` seconds and
    :data:`MAX_PAGE_BYTES` (:class:`RequestTimedOut`, :class:`ResponseTooLarge`)."""
    budget = max(budget, 0.001)  # never 0: a socket timeout of 0 is a non-blocking read
    ends_at = time.monotonic() + budget
    with http.stream("GET", url, params=tuple(params), headers=headers, timeout=budget) as response:
        if response.status_code != 200:
            return response, b""
        body = read_capped(
            response.iter_bytes(),
            response.headers.get("content-length"),
            cap=MAX_PAGE_BYTES,
            ends_at=ends_at,
            what=url,
        )
        return response, body


def _get(
    http: httpx.Client,
    url: str,
    params: Params,
    headers: dict[str, str],
    retry: Retry,
    label: str,
    limits: Limits = DEFAULT_LIMITS,
) -> bytes:
    problem = ""
    deadline = limits.deadline
    for attempt in range(retry.attempts):
        if deadline.passed:
            raise deadline.error(f"{label} {url}")
        try:
            response, body = _attempt(http, url, params, headers, deadline.budget(limits.timeout))
        except httpx.UnsupportedProtocol as exc:  # a bad base URL: retrying cannot help
            raise ReconcileError(f"{label} {url}: {exc}") from None
        except httpx.TransportError as exc:  # httpx's own timeouts included
            problem = type(exc).__name__
            _sleep(retry.delay(attempt, None), deadline)
            continue
        except RequestTimedOut:
            problem = f"no whole answer within --timeout {limits.timeout:g} s"
            _sleep(retry.delay(attempt, None), deadline)
            continue
        status = response.status_code
        if status == 200:
            return body
        if status in (401, 403):
            raise ReconcileAuthError(f"{label} refused the admin key (HTTP {status})")
        if status == 429 or status >= 500:
            problem = f"HTTP {status}"
            _sleep(retry.delay(attempt, retry_after(response)), deadline)
            continue
        raise ReconcileError(f"{label} {url}: unexpected HTTP {status}")
    if deadline.passed:
        raise deadline.error(f"{label} {url}")
    raise ReconcileError(f"{label} {url}: still failing after {retry.attempts} tries ({problem})")


def _sleep(seconds: float, deadline: Deadline) -> None:
    """A backoff, cut short by the deadline (the next attempt then stops the run)."""
    left = deadline.remaining()
    time.sleep(seconds if left is None else min(seconds, left))


def fetch_report(
    http: httpx.Client,
    url: str,
    params: Params,
    headers: dict[str, str],
    parse: Callable[[bytes], Page[Line]],
    *,
    label: str,
    retry: Retry = DEFAULT_RETRY,
    limits: Limits = DEFAULT_LIMITS,
) -> list[Line]:
    """Every line of a paginated report (all pages, in order)."""
    lines: list[Line] = []
    cursor: str | None = None
    seen: set[str] = set()
    for _ in range(MAX_PAGES):
        query = [*params, ("page", cursor)] if cursor is not None else list(params)
        body = _get(http, url, query, headers, retry, label, limits)
        try:
            page = parse(body)
        except BadReport as exc:
            raise ReconcileError(f"{label} {url}: {exc}") from None
        lines.extend(page.lines)
        if page.next_page is None:
            return lines
        if page.next_page in seen:
            raise ReconcileError(f"{label} {url}: the next_page cursor repeats; stopped")
        seen.add(page.next_page)
        cursor = page.next_page
    raise ReconcileError(f"{label} {url}: more than {MAX_PAGES} pages; stopped")


@dataclass(frozen=True, slots=True)
class Bill:
    """What one provider's reports say for a window."""

    costs: list[BilledCost]
    tokens: list[BilledTokens]


def fetch_bill(
    http: httpx.Client,
    source: ReportSource,
    *,
    key: str,
    base_url: str,
    start: dt.datetime,
    end: dt.datetime,
    retry: Retry = DEFAULT_RETRY,
    limits: Limits = DEFAULT_LIMITS,
) -> Bill:
    """Both reports of ``source`` over ``[start, end)``, within ``limits``."""
    base = base_url.rstrip("/")
    headers = source.headers(key)
    try:
        costs = fetch_report(
            http,
            base + source.costs_path,
            source.params("costs", start, end),
            headers,
            source.parse_costs,
            label=source.label,
            retry=retry,
            limits=limits,
        )
        tokens = fetch_report(
            http,
            base + source.usage_path,
            source.params("usage", start, end),
            headers,
            source.parse_usage,
            label=source.label,
            retry=retry,
            limits=limits,
        )
    except ReconcileAuthError as exc:
        raise ReconcileAuthError(f"{exc}: {source.key_help}") from None
    return Bill(costs, tokens)
