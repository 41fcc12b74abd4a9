"""Crossing wire formats with what frameworks send every day: OpenAI structured output to an
Anthropic route (a forced tool, its input read back as the message's JSON content), and an
Anthropic ``tool_result`` with ``is_error`` to an OpenAI route (a tool message saying so).
The real SDKs against the gateway in front of a scripted loopback server."""

from __future__ import annotations

import json
from collections.abc import Callable

import anthropic
import openai
import pydantic
import pytest

from tests.gateway.conftest import KEY, Rows, Served, config_table
from tests.llm_loopback import LoopbackLLM, Reply

JSON = {"content-type": "application/json"}
SSE = {"content-type": "text/event-stream"}
QUESTION = [{"role": "user", "content": "Which city is the capital of the UK?"}]
USAGE = {"input_tokens": 412, "output_tokens": 21}


class Capital(pydantic.BaseModel):
    city: str
    country: str


def _tool_answer(name: str, answer: dict[str, str]) -> Reply:
    """Anthropic's answer to a forced tool call (its shape in Anthropic's docs)."""
    message = {
        "id": "msg_01Structured",
        "type": "message",
        "role": "assistant",
        "model": "claude-haiku-4-5-20251001",
        "content": [{"type": "tool_use", "id": "toolu_01A", "name": name, "input": answer}],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": USAGE,
    }
    return Reply(json.dumps(message).encode(), headers=JSON)


def _tool_stream(name: str, pieces: list[str]) -> Reply:
    def event(kind: str, data: object) -> str:
        return f"event: {kind}\ndata: {json.dumps(data)}\n\n"

    start = {
        "id": "msg_01Streamed",
        "type": "message",
        "role": "assistant",
        "model": "claude-haiku-4-5-20251001",
        "content": [],
        "stop_reason": None,
        "usage": {"input_tokens": 412, "output_tokens": 1},
    }
    block = {"type": "tool_use", "id": "toolu_01B", "name": name, "input": {}}
    events = [
        event("message_start", {"type": "message_start", "message": start}),
        event(
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": block},
        ),
        *(
            event(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "input_json_delta", "partial_json": piece},
                },
            )
            for piece in pieces
        ),
        event("content_block_stop", {"type": "content_block_stop", "index": 0}),
        event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use"},
                "usage": {"output_tokens": 21},
            },
        ),
        event("message_stop", {"type": "message_stop"}),
    ]
    return Reply("".join(events).encode(), headers=SSE, chunk_size=64)


@pytest.fixture
def via_loopback(loopback: LoopbackLLM, serve_gateway: Callable[..., Served]) -> Served:
    url = loopback.url
    return serve_gateway(config_table(url + "/v1", url, url + "/api/v1"))


def oai(served: Served) -> openai.OpenAI:
    return openai.OpenAI(api_key=KEY, base_url=served.url + "/v1", max_retries=0)


def test_openai_sdk_parse_gets_its_pydantic_object_from_an_anthropic_route(
    loopback: LoopbackLLM, via_loopback: Served, rows: Rows
) -> None:
    loopback.queue(_tool_answer("Capital", {"city": "London", "country": "UK"}))
    with oai(via_loopback) as client:
        answer = client.chat.completions.parse(
            model="claude-haiku",
            messages=QUESTION,  # type: ignore[arg-type]
            response_format=Capital,
        )
    choice = answer.choices[0]
    assert choice.message.parsed == Capital(city="London", country="UK")
    assert choice.message.tool_calls is None and choice.finish_reason == "stop"
    (sent,) = loopback.requests
    (tool,) = sent.body["tools"]
    assert tool["name"] == "Capital" and tool["input_schema"]["required"] == ["city", "country"]
    assert sent.body["tool_choice"] == {"type": "tool", "name": "Capital"}
    assert "response_format" not in sent.body
    (row,) = rows.wait(1)
    assert (row.provider, row.output_tokens) == ("anthropic", 21)


def test_streamed_json_mode_from_an_anthropic_route_arrives_as_content(
    loopback: LoopbackLLM, via_loopback: Served, rows: Rows
) -> None:
    loopback.queue(_tool_stream("json_output", ['{"city": "Lon', 'don", "country"', ': "UK"}']))
    with oai(via_loopback) as client:
        chunks = list(
            client.chat.completions.create(
                model="claude-haiku",
                messages=QUESTION,  # type: ignore[arg-type]
                response_format={"type": "json_object"},
                stream=True,
            )
        )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert json.loads(text) == {"city": "London", "country": "UK"}
    assert not any(c.choices and c.choices[0].delta.tool_calls for c in chunks)
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert loopback.requests[0].body["tool_choice"] == {"type": "tool", "name": "json_output"}
    assert rows.wait(1)[0].output_tokens == 21


def test_structured_output_with_tools_to_an_anthropic_route_is_refused_saying_what_to_change(
    via_loopback: Served, loopback: LoopbackLLM
) -> None:
    tool = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
    with oai(via_loopback) as client, pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="claude-haiku",
            messages=QUESTION,  # type: ignore[arg-type]
            response_format={"type": "json_object"},
            tools=[tool],  # type: ignore[list-item]
        )
    assert "response_format together with tools" in caught.value.message
    assert loopback.requests == []


def test_a_failed_tool_result_reaches_an_openai_route_as_a_tool_message_saying_so(
    loopback: LoopbackLLM, via_loopback: Served, rows: Rows
) -> None:
    loopback.queue(Reply.payload("openai_chat_cached_real.json"))
    messages = [
        {"role": "user", "content": "What is 1/0?"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_9", "name": "divide", "input": {"a": 1}}],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_9",
                    "content": "ZeroDivisionError: division by zero",
                    "is_error": True,
                }
            ],
        },
    ]
    with anthropic.Anthropic(api_key=KEY, base_url=via_loopback.url, max_retries=0) as client:
        answer = client.messages.create(
            model="openai/gpt-4o-mini",
            max_tokens=50,
            messages=messages,  # type: ignore[arg-type]
        )
    assert answer.content and answer.content[0].type == "text"
    (sent,) = loopback.requests
    tool_message = sent.body["messages"][2]
    assert tool_message == {
        "role": "tool",
        "tool_call_id": "toolu_9",
        "content": "Error: ZeroDivisionError: division by zero",
    }
    assert rows.wait(1)[0].status == "ok"
