"""Fetching the admin reports from a loopback server replaying the reference examples:
pages followed, 429/5xx/resets retried, a refused key stops with the fix."""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterator
from decimal import Decimal
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from ledger.errors import ReconcileAuthError, ReconcileDeadline, ReconcileError, ResponseTooLarge
from ledger.reconcile.admin import (
    ANTHROPIC,
    DEFAULT_LIMITS,
    MAX_PAGE_BYTES,
    OPENAI,
    Limits,
    fetch_bill,
)
from ledger.reconcile.bounds import Deadline
from ledger.reconcile.retry import Retry
from tests.llm_loopback import PAYLOADS, LoopbackLLM, Reply

FAST = Retry(attempts=3, base_s=0.01, max_s=0.05)
START = dt.datetime(2025, 8, 1, tzinfo=dt.UTC)
END = dt.datetime(2025, 8, 3, tzinfo=dt.UTC)


def _last_page(name: str) -> Reply:
    """The reference example as the last page (has_more false: the example says true)."""
    body = json.loads((PAYLOADS / "billing" / name).read_text())
    body.update(has_more=False, next_page=None)
    return Reply(json.dumps(body).encode(), headers={"content-type": "application/json"})


@pytest.fixture
def loopback() -> Iterator[LoopbackLLM]:
    with LoopbackLLM() as server:
        yield server


def _query(path: str) -> dict[str, list[str]]:
    return parse_qs(urlsplit(path).query)


def test_anthropic_pages_are_followed_after_a_429(loopback: LoopbackLLM) -> None:
    loopback.queue(
        Reply(b'{"error":{"type":"rate_limit_error"}}', status=429, headers={"retry-after": "0"}),
        Reply.payload("billing/anthropic_cost_report_doc.json"),  # has_more, a cursor
        _last_page("anthropic_cost_report_doc.json"),
        _last_page("anthropic_usage_report_messages_doc.json"),
    )
    with httpx.Client() as http:
        bill = fetch_bill(
            http,
            ANTHROPIC,
            key="sk-ant-admin-x",
            base_url=loopback.url + "/v1",
            start=START,
            end=END,
            retry=FAST,
        )
    assert [c.cost_usd for c in bill.costs] == [Decimal("1.2378912")] * 2
    assert [t.input_tokens for t in bill.tokens] == [3200]
    paths = [r.path for r in loopback.requests]
    assert [urlsplit(p).path for p in paths] == [
        "/v1/organizations/cost_report",
        "/v1/organizations/cost_report",
        "/v1/organizations/cost_report",
        "/v1/organizations/usage_report/messages",
    ]
    first, second = _query(paths[1]), _query(paths[2])
    assert "page" not in first and second["page"] == ["page_MjAyNS0wNS0xNFQwMDowMDowMFo="]
    assert first["group_by[]"] == ["description", "workspace_id"]
    assert first["starting_at"] == ["2025-08-01T00:00:00Z"]
    assert loopback.requests[0].headers["x-api-key"] == "sk-ant-admin-x"
    assert all("sk-ant-admin-x" not in p for p in paths)  # the key never rides in a URL


def test_openai_queries_daily_buckets_grouped_by_model_and_project(
    loopback: LoopbackLLM,
) -> None:
    loopback.queue(
        Reply.payload("billing/openai_organization_costs_doc.json"),
        Reply(b"", reset=True),  # a dropped connection is retried
        _last_page("openai_organization_usage_completions_doc.json"),
    )
    with httpx.Client() as http:
        bill = fetch_bill(
            http,
            OPENAI,
            key="sk-admin-x",
            base_url=loopback.url + "/v1",
            start=START,
            end=END,
            retry=FAST,
        )
    assert [c.cost_usd for c in bill.costs] == [Decimal("0.06")]
    assert [t.requests for t in bill.tokens] == [5]
    costs, usage = _query(loopback.requests[0].path), _query(loopback.requests[-1].path)
    assert costs["group_by"] == ["line_item", "project_id"] and costs["bucket_width"] == ["1d"]
    assert costs["start_time"] == [str(int(START.timestamp()))]
    assert usage["group_by"] == ["model", "project_id"]
    assert loopback.requests[0].headers["authorization"] == "Bearer sk-admin-x"


def test_a_refused_key_stops_at_once_and_says_what_to_set(loopback: LoopbackLLM) -> None:
    loopback.default = Reply(b'{"error":{"message":"Invalid admin key"}}', status=401)
    with httpx.Client() as http, pytest.raises(ReconcileAuthError) as caught:
        fetch_bill(
            http,
            OPENAI,
            key="sk-proj-secret",
            base_url=loopback.url,
            start=START,
            end=END,
            retry=FAST,
        )
    message = str(caught.value)
    assert "HTTP 401" in message and "OPENAI_ADMIN_KEY" in message and "admin key" in message
    assert "sk-proj-secret" not in message
    assert len(loopback.requests) == 1


@pytest.mark.parametrize("status", [500, 503, 429])
def test_a_failing_endpoint_gives_up_after_its_tries(loopback: LoopbackLLM, status: int) -> None:
    loopback.default = Reply(b"{}", status=status, headers={"retry-after": "0"})
    with httpx.Client() as http, pytest.raises(ReconcileError, match=f"3 tries \\(HTTP {status}"):
        fetch_bill(
            http, ANTHROPIC, key="k", base_url=loopback.url, start=START, end=END, retry=FAST
        )
    assert len(loopback.requests) == 3


def test_a_repeating_cursor_is_stopped(loopback: LoopbackLLM) -> None:
    loopback.default = Reply.payload("billing/anthropic_cost_report_doc.json")
    with httpx.Client() as http, pytest.raises(ReconcileError, match="cursor repeats"):
        fetch_bill(
            http, ANTHROPIC, key="k", base_url=loopback.url, start=START, end=END, retry=FAST
        )
    assert len(loopback.requests) == 2


def test_a_body_that_is_not_a_report_is_an_error(loopback: LoopbackLLM) -> None:
    loopback.default = Reply(b"<html>maintenance</html>")
    with httpx.Client() as http, pytest.raises(ReconcileError, match="not JSON"):
        fetch_bill(http, OPENAI, key="k", base_url=loopback.url, start=START, end=END, retry=FAST)


def _fetch(loopback: LoopbackLLM, limits: Limits = DEFAULT_LIMITS) -> None:
    with httpx.Client() as http:
        fetch_bill(
            http,
            OPENAI,
            key="k",
            base_url=loopback.url,
            start=START,
            end=END,
            retry=FAST,
            limits=limits,
        )


def _trickled(name: str) -> Reply:
    reply = _last_page(name)
    reply.chunk_size, reply.delay_s = 1, 0.1  # a byte per 0.1 s: no read ever times out
    return reply


def test_a_trickled_page_ends_at_the_request_timeout(loopback: LoopbackLLM) -> None:
    loopback.default = _trickled("openai_organization_costs_doc.json")
    started = time.monotonic()
    with pytest.raises(ReconcileError, match=r"3 tries \(no whole answer within --timeout 0.5 s"):
        _fetch(loopback, Limits(timeout=0.5))
    assert time.monotonic() - started < 5 and len(loopback.requests) == 3


def test_the_deadline_bounds_every_page_and_retry(loopback: LoopbackLLM) -> None:
    loopback.default = _trickled("openai_organization_costs_doc.json")
    started = time.monotonic()
    with pytest.raises(ReconcileDeadline, match=r"the run's --deadline \(1 s\) passed"):
        _fetch(loopback, Limits(timeout=60, deadline=Deadline.after(1)))
    assert time.monotonic() - started < 3


def test_deeply_nested_json_is_an_error_not_a_recursion_error(loopback: LoopbackLLM) -> None:
    loopback.default = Reply(b'{"data": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    with pytest.raises(ReconcileError, match="nested too deeply to be a report"):
        _fetch(loopback)


@pytest.mark.parametrize("chunked", [False, True])
def test_a_page_above_its_cap_is_refused_before_it_is_parsed(
    loopback: LoopbackLLM, chunked: bool
) -> None:
    bucket = {"start_time": 1754006400, "results": []}
    count = MAX_PAGE_BYTES // len(json.dumps(bucket)) + 1
    body = json.dumps({"data": [bucket] * count, "has_more": False}).encode()
    loopback.default = Reply(body, chunk_size=1 << 16 if chunked else None)
    with pytest.raises(ResponseTooLarge, match="larger than 16,384 KiB; not read"):
        _fetch(loopback)
