"""OpenAI chat <-> Anthropic messages: requests, whole answers and streams, checked against
the official SDKs' own types; anything that cannot be expressed is refused by name."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from ledger.gateway.translate import Untranslatable, chat_to_messages, message_to_chat
from ledger.gateway.translate_stream import MessagesToChat
from tests.llm_loopback import PAYLOADS


def test_system_tools_tool_calls_and_results_translate() -> None:
    body: dict[str, Any] = {
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "developer", "content": [{"type": "text", "text": "Use tools."}]},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Weather?"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "weather", "arguments": '{"city": "Lisbon"}'},
                    },
                    {
                        "id": "c2",
                        "type": "function",
                        "function": {"name": "weather", "arguments": '{"city": "Porto"}'},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
            {"role": "tool", "tool_call_id": "c2", "content": "rain"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "weather",
                    "description": "Weather now",
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
                },
            }
        ],
        "tool_choice": "required",
        "parallel_tool_calls": False,
        "max_completion_tokens": 300,
        "temperature": 0.2,
        "stop": "END",
        "stream": True,
        "stream_options": {"include_usage": True},
        "user": "u-1",
    }
    out = chat_to_messages(body, "claude-haiku-4-5-20251001")
    assert out["model"] == "claude-haiku-4-5-20251001" and out["max_tokens"] == 300
    assert out["system"] == "Be brief.Use tools."
    user, assistant, results = out["messages"]
    assert user["content"][1] == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"},
    }
    assert [b["input"] for b in assistant["content"]] == [{"city": "Lisbon"}, {"city": "Porto"}]
    assert results["role"] == "user"  # both results in one turn, as Anthropic requires
    assert [b["tool_use_id"] for b in results["content"]] == ["c1", "c2"]
    assert out["tools"][0]["input_schema"]["properties"]["city"] == {"type": "string"}
    assert out["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}
    assert out["stop_sequences"] == ["END"] and out["stream"] is True
    assert out["metadata"] == {"user_id": "u-1"}


@pytest.mark.parametrize(
    ("change", "feature"),
    [
        ({"logprobs": True}, "logprobs"),
        ({"n": 2}, "n"),
        ({"response_format": {"type": "json_schema", "json_schema": {"schema": {}}}}, "root"),
        ({"response_format": {"type": "json_object"}, "tool_choice": "required"}, "with tools"),
        ({"seed": 1}, "seed"),
        ({"messages": [{"role": "user", "content": [{"type": "input_audio"}]}]}, "input_audio"),
        ({"messages": [{"role": "function", "content": "x"}]}, "role 'function'"),
    ],
)
def test_what_anthropic_cannot_express_is_refused_by_name(
    change: dict[str, Any], feature: str
) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **change}
    with pytest.raises(Untranslatable) as caught:
        chat_to_messages(body, "claude")
    assert feature in str(caught.value)


def test_defaults_the_sdks_send_are_not_features() -> None:
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "n": 1,
        "presence_penalty": 0,
        "logprobs": False,
        "tool_choice": None,
    }
    assert chat_to_messages(body, "claude")["max_tokens"] == 4096


def test_a_whole_anthropic_answer_is_a_valid_openai_completion() -> None:
    data = json.loads((PAYLOADS / "anthropic_messages_cache_read_write_real.json").read_bytes())
    data["content"].append({"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}})
    data["stop_reason"] = "tool_use"
    completion = ChatCompletion.model_validate(message_to_chat(data))
    usage = data["usage"]
    assert completion.usage is not None
    assert completion.usage.prompt_tokens == (
        usage["input_tokens"]
        + usage["cache_read_input_tokens"]
        + usage["cache_creation_input_tokens"]
    )
    assert completion.usage.prompt_tokens_details is not None
    assert completion.usage.prompt_tokens_details.cached_tokens == usage["cache_read_input_tokens"]
    assert completion.choices[0].finish_reason == "tool_calls"
    calls = completion.choices[0].message.tool_calls
    assert calls is not None and json.loads(calls[0].function.arguments) == {"a": 1}  # type: ignore[union-attr]


def _chunks(sse: bytes) -> list[dict[str, Any]]:
    events = [e for e in sse.decode().split("\n\n") if e.startswith("data: ")]
    assert events[-1] == "data: [DONE]"
    return [json.loads(e[6:]) for e in events[:-1]]


@pytest.mark.parametrize("piece", [1, 7, 4096])
def test_an_anthropic_stream_becomes_valid_openai_chunks_in_any_chunking(piece: int) -> None:
    raw = (PAYLOADS / "anthropic_stream_sdk_fixture.sse").read_bytes()
    translator = MessagesToChat(include_usage=True)
    out = b"".join(translator.feed(raw[i : i + piece]) for i in range(0, len(raw), piece))
    chunks = [ChatCompletionChunk.model_validate(c) for c in _chunks(out + translator.close())]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    expected = "".join(
        json.loads(line[6:])["delta"].get("text", "")
        for line in raw.decode().splitlines()
        if line.startswith("data: ") and '"content_block_delta"' in line
    )
    assert text == expected
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-2].choices[0].finish_reason in ("stop", "length")


def test_streamed_tool_use_and_an_error_event_translate() -> None:
    events = [
        {
            "type": "message_start",
            "message": {"id": "m1", "model": "claude", "usage": {"input_tokens": 5}},
        },
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "tool_use", "id": "t1", "name": "f"},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": '{"a":'},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": "1}"},
        },
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
    ]
    raw = b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)
    translator = MessagesToChat(include_usage=False)
    out = (translator.feed(raw) + translator.close()).decode()
    chunks = [json.loads(e[6:]) for e in out.split("\n\n") if e.startswith("data: {")]
    call = chunks[1]["choices"][0]["delta"]["tool_calls"][0]
    assert (call["id"], call["function"]["name"]) == ("t1", "f")
    args = "".join(
        c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"] for c in chunks[1:4]
    )
    assert json.loads(args) == {"a": 1}
    assert chunks[-1] == {
        "error": {"message": "Overloaded", "type": "overloaded_error", "code": None}
    }
    assert "[DONE]" not in out  # a stream that failed does not claim to be complete


def test_an_anthropic_request_translates_to_openai_chat() -> None:
    from ledger.gateway.translate import messages_to_chat

    body: dict[str, Any] = {
        "model": "claude",
        "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": "Weather in Lisbon?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Checking."},
                    {
                        "type": "tool_use",
                        "id": "t1",
                        "name": "weather",
                        "input": {"city": "Lisbon"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "sunny"},
                    {"type": "text", "text": "And now?"},
                ],
            },
        ],
        "tools": [{"name": "weather", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
        "max_tokens": 64,
        "stop_sequences": ["END"],
        "metadata": {"user_id": "u-1"},
    }
    out = messages_to_chat(body, "gpt-4o-mini", "max_completion_tokens")
    assert out["messages"][0] == {"role": "system", "content": "Be brief."}
    assistant = out["messages"][2]
    assert assistant["content"] == "Checking."
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == {"city": "Lisbon"}
    assert out["messages"][3] == {"role": "tool", "tool_call_id": "t1", "content": "sunny"}
    assert out["messages"][4]["content"] == [{"type": "text", "text": "And now?"}]
    assert out["max_completion_tokens"] == 64 and out["stop"] == ["END"] and out["user"] == "u-1"
    assert out["tool_choice"] == "required" and out["parallel_tool_calls"] is False
    for refused in ({"top_k": 5}, {"thinking": {"type": "enabled", "budget_tokens": 1024}}):
        with pytest.raises(Untranslatable):
            messages_to_chat({**body, **refused}, "gpt-4o-mini")


@pytest.mark.parametrize("piece", [1, 13, 8192])
def test_an_openai_stream_becomes_anthropic_events_the_sdk_accumulates(piece: int) -> None:
    from anthropic.types import RawMessageStreamEvent
    from pydantic import TypeAdapter

    from ledger.gateway.translate_stream import ChatToMessages

    raw = (PAYLOADS / "openai_stream_include_usage_real.sse").read_bytes()
    translator = ChatToMessages()
    out = b"".join(translator.feed(raw[i : i + piece]) for i in range(0, len(raw), piece))
    out += translator.close()
    adapter = TypeAdapter(RawMessageStreamEvent)
    events = [
        adapter.validate_python(json.loads(block.split("\ndata: ", 1)[1]))
        for block in out.decode().split("\n\n")
        if block
    ]
    assert [e.type for e in events[:2]] == ["message_start", "content_block_start"]
    assert [e.type for e in events[-3:]] == ["content_block_stop", "message_delta", "message_stop"]
    text = "".join(e.delta.text for e in events if e.type == "content_block_delta")  # type: ignore[union-attr]
    assert text == "The capital of the UK is London."
    final = events[-2]
    assert final.type == "message_delta" and final.usage.output_tokens > 0
    assert final.delta.stop_reason == "end_turn"


def test_earlier_thinking_is_dropped_on_the_way_to_openai() -> None:
    from ledger.gateway.translate import messages_to_chat

    body = {
        "model": "claude-haiku",
        "max_tokens": 64,
        "messages": [
            {"role": "user", "content": "Plan it."},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                    {"type": "redacted_thinking", "data": "xyz"},
                    {"type": "text", "text": "Planned."},
                ],
            },
            {"role": "user", "content": "Go on."},
        ],
    }
    out = messages_to_chat(body, "gpt-4o-mini")
    assert out["messages"][1] == {"role": "assistant", "content": "Planned."}


def test_a_strict_function_tool_is_strict_tool_use_on_anthropic() -> None:
    tool = {"name": "read", "parameters": {"type": "object", "properties": {}}, "strict": True}
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": "function", "function": tool}],
    }
    (out,) = chat_to_messages(body, "claude-haiku-4-5-20251001")["tools"]
    assert out == {"name": "read", "input_schema": tool["parameters"], "strict": True}
