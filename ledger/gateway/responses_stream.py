"""A chat-completions stream re-told as the Responses API's semantic events.

Events in OpenAI's order (tests/fixtures/payloads/openai_responses_stream_*.sse):
``response.created`` and ``response.in_progress`` at the first chunk; for text,
``response.output_item.added`` (a message item), ``response.content_part.added``,
``response.output_text.delta``…, then ``response.output_text.done``,
``response.content_part.done``, ``response.output_item.done``; for each tool call,
``response.output_item.added`` (a function_call item),
``response.function_call_arguments.delta``…, ``response.function_call_arguments.done``,
``response.output_item.done``; last ``response.completed`` (``response.incomplete``
when the output was cut at max_output_tokens) with the usage, which the chat stream
sends after its finish chunk, so the end waits for ``[DONE]`` or the end of the bytes.
Each event carries its ``sequence_number``. An in-band chat error becomes an
``error`` event followed by ``response.failed``, as OpenAI ends a failed stream.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ledger.gateway import responses as r
from ledger.providers.sse import SSEDecoder


class ChatToResponses:
    """Feed OpenAI chat-completion SSE bytes, get Responses API SSE bytes."""

    def __init__(self, request: Mapping[str, Any]) -> None:
        self._request = request
        self._sse = SSEDecoder()
        self._seq = 0
        self._response: dict[str, Any] | None = None
        self._output: list[dict[str, Any]] = []
        self._text: dict[str, Any] | None = None  # the open message item
        self._calls: dict[int, dict[str, Any]] = {}  # chat tool_calls index -> open item
        self._finish: Any = None
        self._usage: Any = None
        self._done = False

    def feed(self, data: bytes) -> bytes:
        return b"".join(self._event(text) for _, text in self._sse.feed_pairs(data))

    def close(self) -> bytes:
        out = [self._event(text) for _, text in self._sse.close_pairs()]
        if not self._done and self._response is not None:
            out.append(self._end())
        return b"".join(out)

    def _emit(self, kind: str, **fields: Any) -> bytes:
        payload = {"type": kind, **fields, "sequence_number": self._seq}
        self._seq += 1
        return f"event: {kind}\ndata: ".encode() + r.dumps(payload) + b"\n\n"

    def _event(self, text: str) -> bytes:
        if self._done:
            return b""
        if text.strip() == "[DONE]":
            return self._end() if self._response is not None else b""
        try:
            chunk = json.loads(text)
        except ValueError:
            return b""
        if not isinstance(chunk, dict):
            return b""
        if chunk.get("error") is not None:
            return self._failed(chunk["error"])
        out = [self._start(chunk)] if self._response is None else []
        if isinstance(chunk.get("usage"), dict):
            self._usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            if isinstance(choice, dict):
                out.append(self._choice(choice))
        return b"".join(out)

    def _start(self, chunk: Mapping[str, Any]) -> bytes:
        created = chunk.get("created")
        self._response = r.envelope(
            self._request,
            r.response_id(),
            str(chunk.get("model") or self._request.get("model")),
            created if isinstance(created, int) else 0,
            "in_progress",
        )
        return self._emit("response.created", response=self._response) + self._emit(
            "response.in_progress", response=self._response
        )

    def _choice(self, choice: Mapping[str, Any]) -> bytes:
        delta = choice.get("delta") or {}
        out: list[bytes] = []
        content = delta.get("content")
        if isinstance(content, str) and content:
            out.append(self._text_delta(content))
        for call in delta.get("tool_calls") or ():
            if isinstance(call, dict):
                out.append(self._call_delta(call))
        if choice.get("finish_reason") is not None:
            self._finish = choice["finish_reason"]
        return b"".join(out)

    def _text_delta(self, piece: str) -> bytes:
        out = b""
        if self._text is None:
            self._text = r.message_item(r.item_id("msg"), "", status="in_progress")
            self._text["text"] = ""
            self._text["index"] = len(self._output)
            self._output.append(self._text)
            item = {k: v for k, v in self._text.items() if k not in ("text", "index")}
            part = {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}
            out += self._emit(
                "response.output_item.added", output_index=self._text["index"], item=item
            )
            out += self._emit(
                "response.content_part.added",
                item_id=self._text["id"],
                output_index=self._text["index"],
                content_index=0,
                part=part,
            )
        self._text["text"] += piece
        return out + self._emit(
            "response.output_text.delta",
            item_id=self._text["id"],
            output_index=self._text["index"],
            content_index=0,
            delta=piece,
            logprobs=[],
        )

    def _call_delta(self, call: Mapping[str, Any]) -> bytes:
        index = call.get("index", 0)
        function = call.get("function") or {}
        out = b""
        item = self._calls.get(index)
        if item is None:
            item = r.call_item(
                r.item_id("fc"),
                str(call.get("id")),
                str(function.get("name")),
                "",
                "in_progress",
            )
            item["index"] = len(self._output)
            self._calls[index] = item
            self._output.append(item)
            shown = {k: v for k, v in item.items() if k != "index"}
            out += self._emit("response.output_item.added", output_index=item["index"], item=shown)
        piece = function.get("arguments")
        if isinstance(piece, str) and piece:
            item["arguments"] += piece
            out += self._emit(
                "response.function_call_arguments.delta",
                item_id=item["id"],
                output_index=item["index"],
                delta=piece,
            )
        return out

    def _close_items(self) -> tuple[bytes, list[dict[str, Any]]]:
        out = b""
        final: list[dict[str, Any]] = []
        for item in self._output:
            index = item["index"]
            if item["type"] == "message":
                done = r.message_item(item["id"], item["text"])
                part = done["content"][0]
                common = {"item_id": item["id"], "output_index": index, "content_index": 0}
                out += self._emit(
                    "response.output_text.done", **common, text=item["text"], logprobs=[]
                )
                out += self._emit("response.content_part.done", **common, part=part)
            else:
                done = {k: v for k, v in item.items() if k != "index"} | {"status": "completed"}
                out += self._emit(
                    "response.function_call_arguments.done",
                    item_id=item["id"],
                    output_index=index,
                    name=item["name"],
                    arguments=item["arguments"],
                )
            out += self._emit("response.output_item.done", output_index=index, item=done)
            final.append(done)
        return out, final

    def _end(self) -> bytes:
        assert self._response is not None
        self._done = True
        out, final = self._close_items()
        response = {**self._response, "output": final, "usage": r.usage(self._usage)}
        r.finish(response, self._finish)
        kind = "response.completed" if response["status"] == "completed" else "response.incomplete"
        return out + self._emit(kind, response=response)

    def _failed(self, error: Any) -> bytes:
        self._done = True
        error = error if isinstance(error, dict) else {"message": str(error)}
        code = error.get("code") or error.get("type") or "server_error"
        message = str(error.get("message") or "the upstream failed mid-stream")
        out = self._emit("error", code=str(code), message=message, param=None)
        if self._response is not None:
            failed = {**self._response, "status": "failed"}
            failed["error"] = {"code": "server_error", "message": message}
            out += self._emit("response.failed", response=failed)
        return out
