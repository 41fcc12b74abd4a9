"""When every route fails, the gateway answers as the provider would, so the official SDKs
raise the same exception classes and, with their DEFAULT retries (2), give up within
seconds: 429 when every route was rate-limited (the shortest upstream ``Retry-After``),
the routes' own 5xx when they agree (Anthropic's 529 on its wire), else 503; a short
default wait when no upstream named one."""

from __future__ import annotations

import time
from collections.abc import Callable

import anthropic
import openai
import pytest

from tests.gateway.conftest import KEY, Rows, Served, config_table
from tests.llm_loopback import LoopbackLLM, Reply

MESSAGES = [{"role": "user", "content": "What is the capital of the UK?"}]
JSON = {"content-type": "application/json"}
OPENAI_429 = b'{"error": {"message": "Rate limit reached", "type": "requests"}}'
ANTHROPIC_429 = b'{"type": "error", "error": {"type": "rate_limit_error", "message": "slow"}}'
OPENAI_500 = b'{"error": {"message": "The server had an error", "type": "server_error"}}'
ANTHROPIC_529 = b'{"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}'
#: An SDK with default retries sends the request three times; against the provider these
#: calls end in about 2 s (0.5-1 s and 1-2 s of backoff, or two short Retry-After waits).
WITHIN_S = 8.0


@pytest.fixture
def via_loopback(loopback: LoopbackLLM, serve_gateway: Callable[..., Served]) -> Served:
    url = loopback.url
    return serve_gateway(config_table(url + "/v1", url, url + "/api/v1"))


def test_every_route_rate_limited_raises_openais_rate_limit_error_after_the_shortest_wait(
    loopback: LoopbackLLM, via_loopback: Served, rows: Rows
) -> None:
    for _ in range(3):  # the SDK's first try and its two retries, two routes each
        loopback.queue(Reply(OPENAI_429, status=429, headers={**JSON, "retry-after": "5"}))
        loopback.queue(Reply(ANTHROPIC_429, status=429, headers={**JSON, "retry-after": "1"}))
    client = openai.OpenAI(api_key=KEY, base_url=via_loopback.url + "/v1")  # default retries
    started = time.monotonic()
    with client, pytest.raises(openai.RateLimitError) as caught:
        client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)  # type: ignore[arg-type]
    elapsed = time.monotonic() - started
    assert caught.value.status_code == 429
    assert caught.value.response.headers["retry-after"] == "1"  # Anthropic's, the shorter
    assert len(loopback.requests) == 6  # the SDK retried, as it does on a provider's 429
    assert elapsed < WITHIN_S
    assert {r.error_type for r in rows.wait(6)} == {"rate_limited"}


def test_every_route_rate_limited_raises_anthropics_rate_limit_error(
    loopback: LoopbackLLM, via_loopback: Served
) -> None:
    loopback.default = Reply(ANTHROPIC_429, status=429, headers={**JSON, "retry-after": "1"})
    client = anthropic.Anthropic(api_key=KEY, base_url=via_loopback.url)
    started = time.monotonic()
    with client, pytest.raises(anthropic.RateLimitError) as caught:
        client.messages.create(model="claude-haiku", max_tokens=20, messages=MESSAGES)  # type: ignore[arg-type]
    assert caught.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
    assert len(loopback.requests) == 3
    assert time.monotonic() - started < WITHIN_S


def test_one_upstream_500_raises_internal_server_error_within_seconds_not_a_minute(
    loopback: LoopbackLLM, via_loopback: Served
) -> None:
    loopback.default = Reply(OPENAI_500, status=500, headers=JSON)  # no Retry-After
    client = openai.OpenAI(api_key=KEY, base_url=via_loopback.url + "/v1")  # default retries
    started = time.monotonic()
    with client, pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(model="openai/gpt-4o-mini", messages=MESSAGES)  # type: ignore[arg-type]
    elapsed = time.monotonic() - started
    assert caught.value.status_code == 500  # the provider's own status, not an invented 503
    assert caught.value.response.headers["retry-after"] == "1"
    assert len(loopback.requests) == 3
    assert elapsed < WITHIN_S


def test_anthropic_overloaded_everywhere_raises_the_anthropic_sdks_overloaded_error(
    loopback: LoopbackLLM, via_loopback: Served
) -> None:
    loopback.default = Reply(ANTHROPIC_529, status=529, headers=JSON)
    client = anthropic.Anthropic(api_key=KEY, base_url=via_loopback.url)
    started = time.monotonic()
    with client, pytest.raises(anthropic.OverloadedError) as caught:
        client.messages.create(model="claude-haiku", max_tokens=20, messages=MESSAGES)  # type: ignore[arg-type]
    assert caught.value.status_code == 529
    assert caught.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]
    assert time.monotonic() - started < WITHIN_S


def test_routes_failing_in_different_ways_are_a_503_the_sdks_retry_briefly(
    loopback: LoopbackLLM, via_loopback: Served
) -> None:
    for _ in range(3):
        loopback.queue(Reply(OPENAI_429, status=429, headers=JSON))
        loopback.queue(Reply(ANTHROPIC_529, status=529, headers=JSON))
    client = openai.OpenAI(api_key=KEY, base_url=via_loopback.url + "/v1")
    started = time.monotonic()
    with client, pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)  # type: ignore[arg-type]
    assert caught.value.status_code == 503
    assert caught.value.response.headers["retry-after"] == "1"
    assert time.monotonic() - started < WITHIN_S
