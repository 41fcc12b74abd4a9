"""Anthropic's message stream re-told as OpenAI chat-completion chunks, event by event, so
an OpenAI-wire client whose call fell back to Anthropic reads a stream it understands.

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

from ledger.gateway.translate import FINISH_REASONS, openai_usage
from ledger.providers import wire as jsonwire
from ledger.providers.sse import SSEDecoder


def _data(chunk: dict[str, Any]) -> bytes:
    return (
        b"data: " + json.dumps(chunk, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"
    )


class MessagesToChat:
    """Feed Anthropic SSE bytes, get OpenAI SSE bytes."""

    def __init__(self, *, include_usage: bool) -> None:
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
