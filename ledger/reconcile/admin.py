"""Reading a provider's organisation cost and usage reports with an admin key.

:data:`OPENAI` and :data:`ANTHROPIC` say, per provider, where the two reports
live, how a request is authenticated and parameterised (daily buckets, grouped
so a line names its model and project/workspace) and which parser reads a page.
:func:`fetch_report` follows the pages (``page`` = the previous ``next_page``)
until ``has_more`` is false, backing off on 429/5xx/timeouts (``Retry-After``
honoured). A 401/403 stops at once (:class:`ReconcileAuthError`, naming the
environment variable to fix); nothing is written to the ledger by this module.
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


def _get(
    http: httpx.Client, url: str, params: Params, headers: dict[str, str], retry: Retry, label: str
) -> bytes:
    problem = ""
    for attempt in range(retry.attempts):
        try:
            response = http.get(url, params=tuple(params), headers=headers)
        except httpx.UnsupportedProtocol as exc:  # a bad base URL: retrying cannot help
            raise ReconcileError(f"{label} {url}: {exc}") from None
        except httpx.TransportError as exc:  # timeouts included
            problem = type(exc).__name__
            time.sleep(retry.delay(attempt, None))
            continue
        status = response.status_code
        if status == 200:
            return response.content
        if status in (401, 403):
            raise ReconcileAuthError(f"{label} refused the admin key (HTTP {status})")
        if status == 429 or status >= 500:
            problem = f"HTTP {status}"
            time.sleep(retry.delay(attempt, retry_after(response)))
            continue
        raise ReconcileError(f"{label} {url}: unexpected HTTP {status}")
    raise ReconcileError(f"{label} {url}: still failing after {retry.attempts} tries ({problem})")


def fetch_report(
    http: httpx.Client,
    url: str,
    params: Params,
    headers: dict[str, str],
    parse: Callable[[bytes], Page[Line]],
    *,
    label: str,
    retry: Retry = DEFAULT_RETRY,
) -> list[Line]:
    """Every line of a paginated report (all pages, in order)."""
    lines: list[Line] = []
    cursor: str | None = None
    seen: set[str] = set()
    for _ in range(MAX_PAGES):
        query = [*params, ("page", cursor)] if cursor is not None else list(params)
        body = _get(http, url, query, headers, retry, label)
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
) -> Bill:
    """Both reports of ``source`` over ``[start, end)``."""
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
        )
        tokens = fetch_report(
            http,
            base + source.usage_path,
            source.params("usage", start, end),
            headers,
            source.parse_usage,
            label=source.label,
            retry=retry,
        )
    except ReconcileAuthError as exc:
        raise ReconcileAuthError(f"{exc}: {source.key_help}") from None
    return Bill(costs, tokens)
