"""Streams re-told in the other wire format, event by event: Anthropic's message stream
as OpenAI chat-completion chunks (:class:`MessagesToChat`, for an OpenAI-wire client
whose call fell back to Anthropic) and the reverse (:class:`ChatToMessages`).

Each Anthropic event becomes at most one chunk, written as soon as it is decoded
(no buffering beyond one incomplete SSE line). The usage chunk (``choices: []``)
is written only when the client asked for it with ``stream_options.include_usage``,
as OpenAI does. An ``error`` event becomes an in-band ``{"error": …}`` chunk, which
the OpenAI SDKs raise as an ``APIError``.
"""

from __future__ import annotations

import json
import time
from typing import Any

from ledger.gateway.translate import FINISH_REASONS, STOP_REASONS, anthropic_usage, openai_usage
from ledger.providers import wire as jsonwire
from ledger.providers.sse import SSEDecoder


def _data(chunk: dict[str, Any]) -> bytes:
    return (
        b"data: " + json.dumps(chunk, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"
    )


class MessagesToChat:
    """Feed Anthropic SSE bytes, get OpenAI SSE bytes."""

    def __init__(self, *, include_usage: bool, structured: str | None = None) -> None:
        #: The forced tool carrying structured output: its input is streamed as content.
        self._structured = structured
        self._answer_blocks: set[int] = set()
        self._sse = SSEDecoder()
        self._include_usage = include_usage
        self._id = "chatcmpl-gateway"
        self._model: str | None = None
        self._created = int(time.time())
        self._usage: dict[str, Any] = {}
        self._tools: dict[int, int] = {}  # Anthropic block index -> OpenAI tool_calls index
        self._finish: str | None = None
        self._done = False

    def feed(self, data: bytes) -> bytes:
        out = [self._event(name, text) for name, text in self._sse.feed_pairs(data)]
        return b"".join(out)

    def close(self) -> bytes:
        out = [self._event(name, text) for name, text in self._sse.close_pairs()]
        if not self._done:
            out.append(self._end())
        return b"".join(out)

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> bytes:
        return _data(
            {
                "id": self._id,
                "object": "chat.completion.chunk",
                "created": self._created,
                "model": self._model,
                "choices": [
                    {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
                ],
            }
        )

    def _event(self, name: str, text: str) -> bytes:
        event = jsonwire.obj(jsonwire.loads_text(text))
        kind = event.get("type") or name
        if kind == "message_start":
            message = jsonwire.obj(event.get("message"))
            self._id = jsonwire.text(message.get("id")) or self._id
            self._model = jsonwire.text(message.get("model"))
            self._usage.update(jsonwire.obj(message.get("usage")))
            return self._chunk({"role": "assistant", "content": ""})
        if kind == "content_block_start":
            return self._block_start(event)
        if kind == "content_block_delta":
            return self._block_delta(event)
        if kind == "message_delta":
            for key, value in jsonwire.obj(event.get("usage")).items():
                if value is not None:
                    self._usage[key] = value
            stop = jsonwire.obj(event.get("delta")).get("stop_reason")
            self._finish = FINISH_REASONS.get(str(stop), "stop")
            if self._finish == "tool_calls" and self._answer_blocks and not self._tools:
                self._finish = "stop"  # the forced tool was the answer, not a call
            return b""
        if kind == "message_stop":
            return self._end()
        if kind == "error":
            error = jsonwire.obj(event.get("error"))
            self._done = True
            body = {
                "error": {
                    "message": error.get("message") or "upstream error",
                    "type": error.get("type") or "api_error",
                    "code": None,
                }
            }
            return _data(body)
        return b""  # ping and whatever Anthropic adds later

    def _block_start(self, event: dict[str, Any]) -> bytes:
        block = jsonwire.obj(event.get("content_block"))
        if block.get("type") != "tool_use":
            return b""
        if self._structured and block.get("name") == self._structured:
            self._answer_blocks.add(jsonwire.count(event.get("index")) or 0)
            return b""
        index = len(self._tools)
        self._tools[jsonwire.count(event.get("index")) or 0] = index
        call = {
            "index": index,
            "id": block.get("id"),
            "type": "function",
            "function": {"name": block.get("name"), "arguments": ""},
        }
        return self._chunk({"tool_calls": [call]})

    def _block_delta(self, event: dict[str, Any]) -> bytes:
        delta = jsonwire.obj(event.get("delta"))
        if delta.get("type") == "text_delta":
            return self._chunk({"content": delta.get("text", "")})
        if delta.get("type") == "input_json_delta" and (
            (jsonwire.count(event.get("index")) or 0) in self._answer_blocks
        ):
            return self._chunk({"content": delta.get("partial_json", "")})
        if delta.get("type") == "input_json_delta":
            index = self._tools.get(jsonwire.count(event.get("index")) or 0, 0)
            call = {"index": index, "function": {"arguments": delta.get("partial_json", "")}}
            return self._chunk({"tool_calls": [call]})
        return b""

    def _end(self) -> bytes:
        if self._done:
            return b""
        self._done = True
        out = [self._chunk({}, self._finish or "stop")]
        if self._include_usage:
            out.append(
                _data(
                    {
                        "id": self._id,
                        "object": "chat.completion.chunk",
                        "created": self._created,
                        "model": self._model,
                        "choices": [],
                        "usage": openai_usage(self._usage),
                    }
                )
            )
        out.append(b"data: [DONE]\n\n")
        return b"".join(out)


def _event(kind: str, data: dict[str, Any]) -> bytes:
    payload = json.dumps({"type": kind, **data}, ensure_ascii=False, separators=(",", ":"))
    return f"event: {kind}\ndata: {payload}\n\n".encode()


class ChatToMessages:
    """Feed OpenAI chat-completion SSE bytes, get Anthropic message-stream SSE bytes.

    Text deltas open a text block, each tool call its own ``tool_use`` block; the
    closing ``message_delta`` (stop reason, usage) waits for the usage chunk that
    follows the finish chunk, so it is written at ``[DONE]`` or at the end.
    """

    def __init__(self) -> None:
        self._sse = SSEDecoder()
        self._started = False
        self._block: int | None = None  # the open content block's index
        self._blocks = 0
        self._tools: dict[int, int] = {}  # OpenAI tool_calls index -> block index
        self._finish: str | None = None
        self._usage: dict[str, Any] = {}
        self._done = False

    def feed(self, data: bytes) -> bytes:
        return b"".join(self._chunk(text) for _, text in self._sse.feed_pairs(data))

    def close(self) -> bytes:
        out = [self._chunk(text) for _, text in self._sse.close_pairs()]
        out.append(self._end())
        return b"".join(out)

    def _chunk(self, text: str) -> bytes:
        if self._done:
            return b""
        if text.strip() == "[DONE]":
            return self._end()
        chunk = jsonwire.obj(jsonwire.loads_text(text))
        if "error" in chunk:
            error = jsonwire.obj(chunk.get("error"))
            self._done = True
            message = error.get("message") or "upstream error"
            return _event("error", {"error": {"type": "api_error", "message": message}})
        out = [] if self._started else [self._start(chunk)]
        self._started = True
        if isinstance(chunk.get("usage"), dict):
            self._usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            delta = jsonwire.obj(jsonwire.obj(choice).get("delta"))
            if isinstance(delta.get("content"), str) and delta["content"]:
                out.append(self._text(delta["content"]))
            for call in delta.get("tool_calls") or []:
                out.append(self._tool(jsonwire.obj(call)))
            if choice.get("finish_reason"):
                self._finish = choice["finish_reason"]
        return b"".join(out)

    def _start(self, chunk: dict[str, Any]) -> bytes:
        message: dict[str, Any] = {
            "id": chunk.get("id"),
            "type": "message",
            "role": "assistant",
            "model": chunk.get("model"),
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }
        return _event("message_start", {"message": message})

    def _open(self, block: dict[str, Any]) -> bytes:
        out = self._close_block()
        self._block = self._blocks
        self._blocks += 1
        return out + _event("content_block_start", {"index": self._block, "content_block": block})

    def _close_block(self) -> bytes:
        if self._block is None:
            return b""
        index, self._block = self._block, None
        return _event("content_block_stop", {"index": index})

    def _text(self, text: str) -> bytes:
        out = b""
        if self._block is None or self._block in self._tools.values():
            out = self._open({"type": "text", "text": ""})
        delta = {"type": "text_delta", "text": text}
        return out + _event("content_block_delta", {"index": self._block, "delta": delta})

    def _tool(self, call: dict[str, Any]) -> bytes:
        index = jsonwire.count(call.get("index")) or 0
        function = jsonwire.obj(call.get("function"))
        out = b""
        if index not in self._tools:
            block: dict[str, Any] = {
                "type": "tool_use",
                "id": call.get("id"),
                "name": function.get("name"),
                "input": {},
            }
            out = self._open(block)
            assert self._block is not None
            self._tools[index] = self._block
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            delta = {"type": "input_json_delta", "partial_json": arguments}
            out += _event("content_block_delta", {"index": self._tools[index], "delta": delta})
        return out

    def _end(self) -> bytes:
        if self._done or not self._started:
            return b""
        self._done = True
        stop = STOP_REASONS.get(str(self._finish), "end_turn")
        delta = {
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": anthropic_usage(self._usage),
        }
        return self._close_block() + _event("message_delta", delta) + _event("message_stop", {})
