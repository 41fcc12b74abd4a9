"""Metering gaps the frameworks exposed (issue 21): the wrapper follows the client's type,
an already-read response still yields a row, a streamed request's error row says
streamed."""

from __future__ import annotations

import httpx
import httpx2
import openai
import pytest

import ledger
from ledger.simulator import Fault, FaultKind, Simulator
from tests.instrument.conftest import Rows
from tests.llm_loopback import PAYLOADS

Server = tuple[Simulator, str]
BODY = (PAYLOADS / "openai_chat_cached_real.json").read_bytes()
URL = "https://api.openai.com/v1/chat/completions"
CHAT = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Hi"}]}


def _answer(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, content=BODY, headers={"content-type": "application/json"})


def test_a_sync_client_whose_transport_is_also_async_gets_the_sync_wrapper(rows: Rows) -> None:
    # httpx.MockTransport implements handle_request and handle_async_request.
    client = ledger.instrument(httpx.Client(transport=httpx.MockTransport(_answer)), ledger=rows)
    with client:
        assert client.post(URL, json=CHAT).status_code == 200
    assert rows.only.provider == "openai" and rows.only.input_tokens > 0


async def test_an_already_read_response_still_yields_a_row(rows: Rows) -> None:
    # MockTransport hands back a response whose body is already read: the client never
    # reads or closes the metered stream.
    transport = httpx2.MockTransport(
        lambda r: httpx2.Response(200, content=BODY, headers={"content-type": "application/json"})
    )
    http = ledger.instrument(httpx2.AsyncClient(transport=transport), ledger=rows)
    async with openai.AsyncOpenAI(api_key="sk", http_client=http, max_retries=0) as client:
        reply = await client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "Hi"}]
        )
    row = rows.only
    assert reply.usage is not None and row.input_tokens == reply.usage.prompt_tokens
    assert (row.status, row.streamed, row.generation_id) == ("ok", False, reply.id)


def test_the_429_row_of_a_streamed_request_says_streamed(sim_server: Server, rows: Rows) -> None:
    sim, url = sim_server
    sim.faults.add(Fault(FaultKind.RATE_LIMIT, "openai", count=1))
    http = ledger.httpx_client(ledger=rows, providers={url + "/v1": "openai"})
    c = openai.OpenAI(api_key="sk", base_url=url + "/v1", http_client=http, max_retries=0)
    with c, pytest.raises(openai.RateLimitError):
        c.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "x"}], stream=True
        )
    row = rows.only
    assert (row.status, row.error_type, row.http_status, row.streamed) == (
        "error",
        "rate_limited",
        429,
        True,
    )
