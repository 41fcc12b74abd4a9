"""The metering transport at its edges: cancellation, content codings, the HTTP library
it builds, and OpenRouter errors filed against the upstream that failed."""

from __future__ import annotations

import asyncio
import gzip
import socket
import zlib
from collections.abc import Iterator

import httpx2
import openai
import pytest

import ledger
from ledger.instrument import sdk_library
from tests.instrument.conftest import Rows
from tests.llm_loopback import PAYLOADS, LoopbackLLM, Reply
from tests.providers.test_provider_payloads import EXPECTED

USER = [{"role": "user", "content": "Hi"}]


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A real socket that accepts connections and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


async def test_a_cancelled_sdk_call_is_not_recorded_as_a_provider_error(
    silent_server: str, rows: Rows
) -> None:
    http = ledger.async_httpx_client(ledger=rows, providers={silent_server + "/v1": "openai"})
    client = openai.AsyncOpenAI(
        api_key="sk-x", base_url=silent_server + "/v1", http_client=http, max_retries=0
    )
    task = asyncio.create_task(client.chat.completions.create(model="m", messages=USER))
    await asyncio.sleep(0.2)  # the request is out, waiting for an answer that never comes
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # The client records nothing for a cancelled call; neither does the transport.
    assert rows.events == []
    await client.close()


def test_httpx_client_builds_the_library_the_installed_sdk_requires(rows: Rows) -> None:
    assert sdk_library() == "httpx2"  # openai 3.x requires httpx2, not httpx
    http = ledger.httpx_client(ledger=rows)
    assert isinstance(http, httpx2.Client)
    openai.OpenAI(api_key="sk-x", http_client=http).close()  # the SDK accepts it


def test_metered_requests_offer_only_codings_the_meter_decodes(
    loopback: LoopbackLLM, rows: Rows
) -> None:
    name = "openai_chat_cached_real.json"
    plain = (PAYLOADS / name).read_bytes()
    # Codings applied in order: deflate, then gzip (undone in reverse).
    body = gzip.compress(zlib.compress(plain))
    headers = {"content-type": "application/json", "content-encoding": "deflate, gzip"}
    loopback.queue(Reply(body, headers=headers))
    http = ledger.httpx_client(ledger=rows, providers={loopback.url + "/v1": "openai"})
    with openai.OpenAI(
        api_key="sk-x", base_url=loopback.url + "/v1", http_client=http, max_retries=0
    ) as client:
        raw = client.chat.completions.with_raw_response.create(
            model="m", messages=USER, extra_headers={"accept-encoding": "br, zstd, gzip"}
        )
        assert raw.http_response.content == plain  # the SDK still gets the server's body
    assert loopback.requests[0].headers["accept-encoding"] == "gzip, deflate"
    assert rows.only.cache_read_tokens == EXPECTED[name]["cache_read_tokens"]


def test_an_openrouter_error_through_the_sdk_is_filed_against_its_upstream(
    loopback: LoopbackLLM, rows: Rows
) -> None:
    loopback.queue(
        Reply.payload("openrouter_error_429_upstream_real.json", status=429),
        Reply.payload("openrouter_error_429_free_limit_real.json", status=429),
    )
    http = ledger.httpx_client(ledger=rows)
    with openai.OpenAI(
        api_key="sk-x", base_url=loopback.url + "/api/v1", http_client=http, max_retries=0
    ) as client:
        for _ in range(2):
            with pytest.raises(openai.RateLimitError):
                client.chat.completions.create(
                    model="google/gemini-2.0-flash-exp:free", messages=USER
                )
    assert [(e.provider, e.upstream, e.error_type) for e in rows.events] == [
        ("openrouter", "Google", "rate_limited"),
        ("openrouter", None, "rate_limited"),
    ]
