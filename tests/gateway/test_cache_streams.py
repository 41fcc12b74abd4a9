"""The response cache keeps completed SSE streams and replays them (ADR-0016: compute it
once), byte for byte, to raw HTTP clients and to the OpenAI SDK."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import httpx
import openai
import pytest

from ledger.simulator import Simulator
from tests.gateway.conftest import KEY, OTHER_KEY, Served, config_table, sim_table
from tests.llm_loopback import LoopbackLLM, Reply, Rows


def _stream(
    served: Served, body: dict[str, object], key: str = KEY, **headers: str
) -> httpx.Response:
    with httpx.stream(
        "POST",
        f"{served.url}/v1/chat/completions",
        json=body,
        headers={"authorization": f"Bearer {key}", **headers},
        timeout=30,
    ) as response:
        response.read()
    return response


def test_a_completed_stream_is_replayed_to_the_next_identical_request(
    sim: tuple[Simulator, str], serve_gateway: Callable[..., Served], rows: Rows
) -> None:
    served = serve_gateway(sim_table(sim[1], response_cache=True))
    question = f"Tell me about rivers {uuid.uuid4()}"
    body = {
        "model": "gpt-4o-mini",
        "stream": True,
        "messages": [{"role": "user", "content": question}],
    }
    first = _stream(served, body)
    second = _stream(served, body, OTHER_KEY)
    assert [r.headers["x-ledger-cache"] for r in (first, second)] == ["miss", "hit"]
    assert second.headers["content-type"].startswith("text/event-stream")
    assert second.content == first.content  # the same SSE bytes
    assert first.content.rstrip().endswith(b"data: [DONE]")
    computed, hit = rows.wait(2)
    assert computed.streamed and not computed.response_cache_hit
    assert (hit.attempt, hit.response_cache_hit, hit.cost_usd, hit.streamed) == (
        0,
        True,
        None,
        True,
    )
    assert (hit.provider, hit.model, hit.tags) == (
        computed.provider,
        computed.model,
        {"team": "ops"},
    )
    # The SDK reads the replay as it reads a live stream.
    client = openai.OpenAI(api_key=KEY, base_url=served.url + "/v1", max_retries=0)
    with client:
        chunks = list(
            client.chat.completions.create(
                model="gpt-4o-mini",
                stream=True,
                messages=[{"role": "user", "content": question}],
            )
        )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text and len(rows.wait(3)) == 3 and rows.events[2].response_cache_hit


def test_paused_streams_and_other_options_are_never_served_from_the_cache(
    sim: tuple[Simulator, str], serve_gateway: Callable[..., Served], rows: Rows
) -> None:
    served = serve_gateway(sim_table(sim[1], response_cache=True))
    question = f"Tell me about lakes {uuid.uuid4()}"
    body = {
        "model": "gpt-4o-mini",
        "stream": True,
        "messages": [{"role": "user", "content": question}],
    }
    paused = [_stream(served, body, **{"x-ledger-paused": "true"}) for _ in range(2)]
    assert [r.headers.get("x-ledger-cache") for r in paused] == [None, None]
    plain = {**body, "stream": False}
    usage = {**body, "stream_options": {"include_usage": True}}
    streamed = _stream(served, body)
    assert streamed.headers["x-ledger-cache"] == "miss"
    assert _stream(served, plain).headers["x-ledger-cache"] == "miss"  # another answer's shape
    assert _stream(served, usage).headers["x-ledger-cache"] == "miss"  # other bytes
    assert not any(e.response_cache_hit for e in rows.wait(5))


def test_a_stream_the_upstream_broke_off_is_not_stored(
    loopback: LoopbackLLM, serve_gateway: Callable[..., Served], rows: Rows
) -> None:
    url = loopback.url
    served = serve_gateway(
        config_table(url + "/v1", url, url + "/api/v1", response_cache=True, passthrough=["openai"])
    )
    sse = "openai_stream_include_usage_real.sse"
    loopback.queue(Reply.payload(sse, drop_after=3))  # the connection closes mid-stream
    loopback.queue(Reply.payload(sse))
    loopback.queue(Reply.payload(sse))
    body = {
        "model": "openai/gpt-4o-mini",
        "stream": True,
        "messages": [{"role": "user", "content": f"Tell me about seas {uuid.uuid4()}"}],
    }
    with pytest.raises(httpx.RemoteProtocolError):  # the client sees the break too
        _stream(served, body)
    whole, replayed = (_stream(served, body) for _ in range(2))
    assert [r.headers["x-ledger-cache"] for r in (whole, replayed)] == ["miss", "hit"]
    assert replayed.content == whole.content
    assert [e.response_cache_hit for e in rows.wait(3)] == [False, False, True]
