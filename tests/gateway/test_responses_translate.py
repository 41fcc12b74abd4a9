"""The Responses API translation on its own: a real OpenAI chat stream re-told as the
Responses events the openai SDK's own types accept (cut anywhere), and an in-band error
ending the stream as OpenAI ends a failed response."""

from __future__ import annotations

import json

import pytest
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

from ledger.gateway.responses import Untranslatable, to_chat
from ledger.gateway.responses_stream import ChatToResponses
from tests.llm_loopback import PAYLOADS

ADAPTER: TypeAdapter[ResponseStreamEvent] = TypeAdapter(ResponseStreamEvent)


def _events(out: bytes) -> list[ResponseStreamEvent]:
    blocks = [b for b in out.decode().split("\n\n") if b]
    return [ADAPTER.validate_python(json.loads(b.split("\ndata: ", 1)[1])) for b in blocks]


@pytest.mark.parametrize("piece", [1, 17, 65536])
def test_a_real_chat_stream_becomes_events_the_sdk_reads(piece: int) -> None:
    raw = (PAYLOADS / "openai_stream_include_usage_real.sse").read_bytes()
    translator = ChatToResponses({"model": "gpt-4o-mini", "input": "hi"})
    out = b"".join(translator.feed(raw[i : i + piece]) for i in range(0, len(raw), piece))
    events = _events(out + translator.close())
    kinds = [e.type for e in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    final = events[-1].response  # type: ignore[union-attr]
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert final.output_text == deltas and deltas.startswith("The capital")
    assert final.model == "gpt-4o-mini-2024-07-18" and final.usage is not None
    assert final.usage.total_tokens == final.usage.input_tokens + final.usage.output_tokens > 0


def test_an_in_band_error_fails_the_response() -> None:
    translator = ChatToResponses({"model": "m", "input": "hi"})
    first = {
        "id": "c",
        "model": "m",
        "created": 1,
        "choices": [{"index": 0, "delta": {"content": "a"}}],
    }
    raw = f"data: {json.dumps(first)}\n\ndata: {json.dumps({'error': {'message': 'boom'}})}\n\n"
    events = _events(translator.feed(raw.encode()) + translator.close())
    assert [e.type for e in events][-2:] == ["error", "response.failed"]
    assert events[-1].response.error is not None  # type: ignore[union-attr]


def test_history_items_become_chat_messages() -> None:
    chat = to_chat(
        {
            "model": "m",
            "instructions": "Be brief.",
            "input": [
                {"role": "user", "content": [{"type": "input_text", "text": "read a"}]},
                {"type": "reasoning", "id": "rs_1", "summary": []},
                {"type": "function_call", "call_id": "c1", "name": "read", "arguments": "{}"},
                {"type": "function_call", "call_id": "c2", "name": "read", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "x"},
                {"type": "function_call_output", "call_id": "c2", "output": "y"},
            ],
            "max_output_tokens": 9,
            "text": {"format": {"type": "json_object"}},
        }
    )
    roles = [m["role"] for m in chat["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "tool"]
    assert [c["id"] for c in chat["messages"][2]["tool_calls"]] == ["c1", "c2"]
    assert chat["max_completion_tokens"] == 9
    assert chat["response_format"] == {"type": "json_object"}


def test_input_files_are_refused_saying_what_is_served() -> None:
    body = {
        "model": "m",
        "input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}],
    }
    with pytest.raises(Untranslatable, match="text and image URLs are"):
        to_chat(body)
