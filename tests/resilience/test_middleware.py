"""The middleware under a real uvicorn server on loopback, with real HTTP requests."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from ledger.errors import TooManyRequests
from ledger.resilience.identity import ClientIdentity
from ledger.resilience.limiter import SlidingWindowLimiter
from ledger.resilience.middleware import HTTPResponse, ResilienceMiddleware, error_response
from tests.resilience.servers import LoopbackServer


class AllProvidersFailed(Exception):
    """Stands in for the cascade's exception: it satisfies ``HTTPRetryable``."""

    def __init__(self, retry_after: float | None) -> None:
        super().__init__("every provider failed")
        self.retry_after = retry_after

    def http_response(self) -> HTTPResponse:
        message = "The assistant is busy; please retry shortly."
        return error_response(503, "providers_unavailable", message, self.retry_after)


class Agent:
    """A bare ASGI app: counts the work it does; some paths fail on purpose."""

    def __init__(self) -> None:
        self.runs = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.runs += 1
        path = scope["path"]
        if path == "/all-failed":
            raise AllProvidersFailed(retry_after=12.2)
        if path == "/inner-limit":
            raise TooManyRequests("tenant quota", retry_after=3)
        if path == "/bug":
            raise KeyError("not retryable")
        body = json.dumps({"ok": True}).encode()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})


def serve(limit: int, identity: ClientIdentity | None = None) -> tuple[Agent, LoopbackServer]:
    agent = Agent()
    limiter = SlidingWindowLimiter(limit, 60.0)
    app = ResilienceMiddleware(
        agent, limiter=limiter, identity=identity, exempt_paths=frozenset({"/healthz"})
    )
    return agent, LoopbackServer(app)


@pytest.fixture
def limited() -> Iterator[tuple[Agent, httpx.Client]]:
    agent, server = serve(limit=3)
    with server, httpx.Client(base_url=server.url, timeout=5) as client:
        yield agent, client


def test_a_burst_gets_429_with_retry_after_and_the_agent_never_runs(
    limited: tuple[Agent, httpx.Client],
) -> None:
    agent, client = limited
    statuses = [client.get("/ask").status_code for _ in range(5)]
    assert statuses == [200, 200, 200, 429, 429]
    assert agent.runs == 3
    rejected = client.get("/ask")
    assert rejected.headers["content-type"] == "application/json"
    assert 59 <= int(rejected.headers["retry-after"]) <= 60
    assert rejected.json() == {
        "error": "rate_limited",
        "message": "Too many requests; retry later.",
        "retry_after": int(rejected.headers["retry-after"]),
    }


def test_exempt_paths_are_not_limited(limited: tuple[Agent, httpx.Client]) -> None:
    _, client = limited
    assert [client.get("/healthz").status_code for _ in range(6)] == [200] * 6


def test_all_providers_failed_becomes_503_with_retry_after() -> None:
    _, server = serve(limit=100)
    with server, httpx.Client(base_url=server.url) as client:
        response = client.get("/all-failed")
    assert response.status_code == 503
    assert response.headers["retry-after"] == "13"  # 12.2 s rounded up
    assert response.json()["error"] == "providers_unavailable"


def test_a_rate_limit_raised_inside_the_app_takes_the_same_path() -> None:
    _, server = serve(limit=100)
    with server, httpx.Client(base_url=server.url) as client:
        response = client.get("/inner-limit")
    assert response.status_code == 429 and response.headers["retry-after"] == "3"


def test_other_exceptions_are_left_to_the_server() -> None:
    _, server = serve(limit=100)
    with server, httpx.Client(base_url=server.url) as client:
        response = client.get("/bug")
    assert response.status_code == 500 and "retry-after" not in response.headers


def test_a_direct_client_cannot_dodge_the_limit_with_x_forwarded_for() -> None:
    # Loopback is not a trusted proxy here, so the header is the client's own claim.
    _, server = serve(limit=2, identity=ClientIdentity.from_spec("10.0.0.0/8"))
    with server, httpx.Client(base_url=server.url) as client:
        statuses = [
            client.get("/ask", headers={"X-Forwarded-For": f"203.0.113.{i}"}).status_code
            for i in range(4)
        ]
    assert statuses == [200, 200, 429, 429]


def test_behind_a_trusted_proxy_each_forwarded_client_has_its_own_limit() -> None:
    _, server = serve(limit=1, identity=ClientIdentity.from_spec("127.0.0.1/32"))
    with server, httpx.Client(base_url=server.url) as client:

        def ask(ip: str) -> int:
            return client.get("/ask", headers={"X-Forwarded-For": ip}).status_code

        assert [ask("203.0.113.1"), ask("203.0.113.2"), ask("203.0.113.1")] == [200, 200, 429]


def test_a_refusal_renderer_answers_429s_in_the_apps_own_error_format() -> None:
    def openai_style(scope: Any, exc: TooManyRequests) -> HTTPResponse:
        body = json.dumps({"error": {"message": str(exc), "path": scope["path"]}}).encode()
        return 429, [(b"retry-after", b"7")], body

    app = ResilienceMiddleware(Agent(), limiter=SlidingWindowLimiter(1, 60.0), refusal=openai_style)
    with LoopbackServer(app) as server, httpx.Client(base_url=server.url) as client:
        assert client.get("/ask").status_code == 200
        refused, raised = client.get("/ask"), client.get("/inner-limit")
    assert refused.status_code == 429 and refused.headers["retry-after"] == "7"
    assert refused.json()["error"]["path"] == "/ask"
    assert "1 requests per 60 s" in refused.json()["error"]["message"]
    assert raised.status_code == 429  # refused by the limiter before the app raised its own
