"""Shared by the wire formats: the rendered reply, SSE framing, request digestion."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from ledger.simulator.promptcache import Prompt, build_prompt

_COMPACT: Final = (",", ":")
JSON_TYPE: Final = ("content-type", "application/json")
SSE_TYPE: Final = ("content-type", "text/event-stream; charset=utf-8")


class BadRequest(Exception):
    """The request cannot be served as sent (the service answers 4xx)."""

    def __init__(self, message: str, *, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(slots=True)
class Reply:
    """A response ready for the wire.

    ``head_delay_s`` passes before the status line; each chunk is
    ``(delay before it, bytes)``. ``reset`` drops the connection instead of
    (or, with chunks, after) sending anything more.
    """

    status: int
    headers: list[tuple[str, str]]
    chunks: list[tuple[float, bytes]] = field(default_factory=list)
    head_delay_s: float = 0.0
    reset: bool = False
    streamed: bool = False

    @property
    def body(self) -> bytes:
        return b"".join(chunk for _, chunk in self.chunks)


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=_COMPACT, ensure_ascii=False).encode()


def sse_data(obj: Any) -> bytes:
    return b"data: " + dumps(obj) + b"\n\n"


def sse_event(name: str, obj: Any) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + dumps(obj) + b"\n\n"


def retry_after_header(seconds: float | None) -> list[tuple[str, str]]:
    """``Retry-After`` in whole seconds (RFC 9110 delay-seconds), rounded up."""
    if seconds is None:
        return []
    return [("retry-after", str(max(0, math.ceil(seconds))))]


def load_json(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise BadRequest("request body must be a JSON object")
    return data


def account_of(headers: Mapping[str, str]) -> str:
    """A non-reversible account id from the API key (keys are never kept)."""
    auth = headers.get("authorization", "") or headers.get("x-api-key", "")
    token = auth.removeprefix("Bearer ").strip()
    if not token:
        raise BadRequest("No API key provided", status=401)
    return hashlib.blake2b(token.encode(), digest_size=8).hexdigest()


def content_text(content: Any) -> tuple[str, bool]:
    """Canonical text of a message/system content, and whether it carries cache_control."""
    if isinstance(content, str):
        return content, False
    if isinstance(content, list):
        texts: list[str] = []
        marked = False
        for part in content:
            if isinstance(part, dict):
                marked = marked or "cache_control" in part
                text = part.get("text")
                texts.append(text if isinstance(text, str) else json.dumps(part, sort_keys=True))
            else:
                texts.append(str(part))
        return "\n".join(texts), marked
    if content is None:
        return "", False
    return json.dumps(content, sort_keys=True), False


def digest_messages(
    messages: Any, *, system: Any = None, tools: Any = None, top_cache_control: bool = False
) -> Prompt:
    """Reduce tools, system and messages to the prompt the caches and router see."""
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty array")
    segments: list[str] = []
    marked = top_cache_control
    if tools:
        segments.append("tools\x1f" + json.dumps(tools, sort_keys=True, separators=_COMPACT))
    first_system: str | None = None
    first_other: str | None = None
    if system is not None:
        first_system, sys_marked = content_text(system)
        marked = marked or sys_marked
        segments.append("system\x1f" + first_system)
    for message in messages:
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise BadRequest("each message must be an object with a string 'role'")
        role = message["role"]
        text, msg_marked = content_text(message.get("content"))
        marked = marked or msg_marked
        if role in ("system", "developer"):
            first_system = text if first_system is None else first_system
        elif first_other is None:
            first_other = text
        segments.append(role + "\x1f" + text)
    return build_prompt(
        segments, first_system=first_system, first_other=first_other, cache_control=marked
    )


def stream_schedule(ttft_s: float, total_s: float, pieces: int) -> tuple[float, float]:
    """(delay before the first token, delay between later chunks)."""
    gap = (total_s - ttft_s) / pieces if pieces > 1 else 0.0
    return ttft_s, max(gap, 0.0)
