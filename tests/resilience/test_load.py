"""The ADR's burst, on loopback: 1,000 requests from 50 concurrent clients asking
10 distinct prompts cost exactly 10 provider calls; everyone is answered or told
when to retry; nothing hangs."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from ledger.resilience.cache import ResponseCache
from ledger.resilience.identity import ClientIdentity
from ledger.resilience.limiter import SlidingWindowLimiter
from ledger.resilience.middleware import ResilienceMiddleware
from ledger.resilience.recording import AsyncCachedCall, Turn
from ledger.schema import token_usage
from ledger.store.engine import make_engine
from ledger.store.ledger import Ledger
from tests.resilience.servers import LoopbackServer

CLIENTS, REQUESTS_EACH, PROMPTS, LIMIT = 50, 20, 10, 15


async def read_body(receive: Any) -> bytes:
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


async def reply(send: Any, payload: dict[str, Any]) -> None:
    body = json.dumps(payload).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": body})


class FakeProvider:
    """The upstream LLM: slow enough that identical requests overlap; counts calls."""

    def __init__(self) -> None:
        self.calls = 0
        self._lock = threading.Lock()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        prompt = json.loads(await read_body(receive))["text"]
        with self._lock:
            self.calls += 1
        await asyncio.sleep(0.2)
        await reply(
            send, {"content": f"answer to {prompt}", "provider": "openai", "model": "gpt-4o-mini"}
        )


def service(upstream_url: str, ledger: Ledger) -> ResilienceMiddleware:
    async def ask_provider(turn: Turn) -> dict[str, Any]:
        async with httpx.AsyncClient(base_url=upstream_url, timeout=10) as client:
            response = await client.post("/v1/chat", json={"text": turn.text})
            response.raise_for_status()
            result: dict[str, Any] = response.json()
            return result

    cached = AsyncCachedCall(ask_provider, ResponseCache(ttl_s=300), ledger)

    async def agent(scope: Any, receive: Any, send: Any) -> None:
        request = json.loads(await read_body(receive))
        turn = Turn(
            text=request["text"],
            locale=request["locale"],
            model="gpt-4o-mini",
            requested_provider="openai",
            session_id=request["session"],
        )
        await reply(send, await cached(turn))

    return ResilienceMiddleware(
        agent,
        limiter=SlidingWindowLimiter(LIMIT, 60.0),
        identity=ClientIdentity.from_spec("127.0.0.1/32"),  # we play the proxy
    )


async def visitor(url: str, n: int) -> list[httpx.Response]:
    responses = []
    async with httpx.AsyncClient(base_url=url, timeout=10) as client:
        for j in range(REQUESTS_EACH):
            prompt = (n + j) % PROMPTS
            body = {
                "text": f"  Example question {prompt}\n",  # normalised away
                "locale": "en" if j % 2 else "EN",
                "session": f"visitor-{n}",
            }
            headers = {"X-Forwarded-For": f"203.0.113.{n}"}
            responses.append(await client.post("/ask", json=body, headers=headers))
    return responses


@pytest.mark.timeout(120)
async def test_a_thousand_requests_cost_ten_provider_calls(sqlite_url: str) -> None:
    provider = FakeProvider()
    with Ledger(sqlite_url) as ledger, LoopbackServer(provider) as upstream:
        with LoopbackServer(service(upstream.url, ledger)) as app:
            started = time.monotonic()
            batches = await asyncio.wait_for(
                asyncio.gather(*(visitor(app.url, n) for n in range(CLIENTS))), timeout=90
            )
            elapsed = time.monotonic() - started
        assert ledger.flush(10)
    responses = [r for batch in batches for r in batch]
    assert len(responses) == CLIENTS * REQUESTS_EACH
    assert provider.calls == PROMPTS
    answered = [r for r in responses if r.status_code == 200]
    told_to_retry = [r for r in responses if r.status_code == 429]
    assert len(answered) == CLIENTS * LIMIT and len(told_to_retry) == CLIENTS * (
        REQUESTS_EACH - LIMIT
    )
    assert all(int(r.headers["retry-after"]) >= 1 for r in told_to_retry)
    for r in answered:  # each visitor got the answer to its own question
        asked = json.loads(r.request.content)["text"].split()[-1]
        assert r.json()["content"].split()[-1] == asked
    assert elapsed < 60
    engine = make_engine(sqlite_url)
    with engine.connect() as conn:
        hits = conn.execute(select(func.count()).where(token_usage.c.response_cache_hit)).scalar()
    engine.dispose()
    assert hits == len(answered) - PROMPTS
