"""Anthropic Messages on the wire: ``POST /v1/messages``.

Shapes follow the API reference and real captures: ``usage.input_tokens``
counts only the uncached prompt (cache reads and writes are reported apart in
``cache_read_input_tokens``/``cache_creation_input_tokens``); streams are
``message_start`` (usage so far, ``output_tokens`` 1), ``content_block_start``,
``ping``, ``content_block_delta``..., ``content_block_stop``,
``message_delta`` (cumulative usage), ``message_stop``; a failing stream sends
``event: error``. Error bodies are ``{"type": "error", "error": {...},
"request_id": ...}``. Caching needs ``cache_control`` (top level or on a block).

Tools and ``output_config.format`` are answered by :mod:`ledger.simulator.structured`'s
policy: a tool call is a ``tool_use`` block (``stop_reason: "tool_use"``), streamed as a
``content_block_start`` with empty ``input`` then ``input_json_delta`` fragments; JSON
output is the text block.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from ledger.simulator.cachettl import requested_ttl_s
from ledger.simulator.core import ChatRequest, Completion, Failure, Usage
from ledger.simulator.faults import FaultKind
from ledger.simulator.structured import Tool, Wanted, last_user_text
from ledger.simulator.wire.common import (
    JSON_TYPE,
    SSE_TYPE,
    BadRequest,
    Reply,
    account_of,
    digest_messages,
    dumps,
    load_json,
    retry_after_header,
    sse_event,
    stream_schedule,
)

_ERROR_TYPES: Final = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


def parse(headers: Mapping[str, str], raw: bytes) -> ChatRequest:
    account = account_of(headers)
    body = load_json(raw)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("model: Field required")
    max_tokens = body.get("max_tokens")
    if not isinstance(max_tokens, int) or max_tokens < 1:
        raise BadRequest("max_tokens: Field required")
    prompt = digest_messages(
        body.get("messages"),
        system=body.get("system"),
        tools=body.get("tools"),
        top_cache_control="cache_control" in body,
    )
    return ChatRequest(
        service="anthropic",
        model=model,
        prompt=prompt,
        stream=body.get("stream") is True,
        max_tokens=max_tokens,
        account=account,
        wanted=wanted(body),
        cache_ttl_s=requested_ttl_s(body),
    )


def wanted(body: Mapping[str, Any]) -> Wanted:
    """What the answer must be: ``tools``/``tool_choice``, and ``output_config.format``
    (or the beta's ``output_format``) for JSON."""
    tools: list[Tool] = []
    for entry in body.get("tools") or ():
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise BadRequest("tools: each tool needs a name")
        tools.append(Tool(entry["name"], entry.get("input_schema") or {}))
    choice = body.get("tool_choice") or {"type": "auto"}
    if not isinstance(choice, dict) or choice.get("type") not in ("auto", "any", "tool", "none"):
        raise BadRequest("tool_choice: type must be auto, any, tool or none")
    named = {"any": "required", "tool": choice.get("name")}.get(choice["type"], choice["type"])
    if not isinstance(named, str):
        raise BadRequest("tool_choice: a tool choice of type tool needs a name")
    config = body.get("output_config")
    output = (config.get("format") if isinstance(config, dict) else None) or body.get(
        "output_format"
    )
    schema = output.get("schema") if isinstance(output, dict) else None
    history = body.get("messages")
    history = history if isinstance(history, list) else []
    return Wanted(
        tools=tuple(tools),
        tool_choice=named,
        json_schema=schema if isinstance(schema, dict) else None,
        after_tool_result=bool(history) and _carries_tool_result(history[-1]),
        user_text=last_user_text(history),
    )


def _carries_tool_result(message: Any) -> bool:
    content = message.get("content") if isinstance(message, dict) else None
    return isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in content
    )


def _message_id(done: Completion) -> str:
    return "msg_01" + done.ident[:22]


def _usage(usage: Usage, output_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": usage.uncached_tokens,
        "cache_creation_input_tokens": usage.cache_write_tokens,
        "cache_read_input_tokens": usage.cached_tokens,
        "cache_creation": {
            "ephemeral_5m_input_tokens": usage.cache_write_tokens - usage.cache_write_1h_tokens,
            "ephemeral_1h_input_tokens": usage.cache_write_1h_tokens,
        },
        "output_tokens": output_tokens,
        "service_tier": "standard",
    }


def _stop_reason(done: Completion, request: ChatRequest) -> str:
    capped = request.max_tokens is not None and done.usage.completion_tokens >= request.max_tokens
    if capped:
        return "max_tokens"
    return "tool_use" if done.tool is not None else "end_turn"


def _block(done: Completion, text: str) -> dict[str, Any]:
    """The answer's content block: text, or a ``tool_use`` with ``input`` parsed from
    ``text`` (a call cut short by max_tokens keeps an empty input)."""
    if done.tool is None:
        return {"type": "text", "text": text}
    try:
        arguments = json.loads(text) if text else {}
    except ValueError:
        arguments = {}
    return {
        "type": "tool_use",
        "id": "toolu_01" + done.ident[:22],
        "name": done.tool,
        "input": arguments,
    }


def _headers(done: Completion, content_type: tuple[str, str]) -> list[tuple[str, str]]:
    return [content_type, ("request-id", "req_011" + done.ident[:21])]


def render_completion(done: Completion, request: ChatRequest) -> Reply:
    if request.stream:
        return _render_stream(done, request)
    body = {
        "id": _message_id(done),
        "type": "message",
        "role": "assistant",
        "model": done.model,
        "content": [_block(done, "".join(done.pieces))],
        "stop_reason": _stop_reason(done, request),
        "stop_sequence": None,
        "usage": _usage(done.usage, done.usage.completion_tokens),
    }
    raw = dumps(body)
    if done.fault is not None and done.fault.kind is FaultKind.MALFORMED_BODY:
        raw = raw[: len(raw) // 2]
    return Reply(200, _headers(done, JSON_TYPE), [(0.0, raw)], head_delay_s=done.total_s)


def _render_stream(done: Completion, request: ChatRequest) -> Reply:
    start = {
        "type": "message_start",
        "message": {
            "id": _message_id(done),
            "type": "message",
            "role": "assistant",
            "model": done.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": _usage(done.usage, 1),
        },
    }
    first_delay, gap = stream_schedule(done.ttft_s, done.total_s, len(done.pieces))
    block = {
        "type": "content_block_start",
        "index": 0,
        "content_block": _block(done, ""),
    }
    chunks: list[tuple[float, bytes]] = [
        (0.0, sse_event("message_start", start)),
        (0.0, sse_event("content_block_start", block)),
        (0.0, sse_event("ping", {"type": "ping"})),
    ]
    fault = done.fault
    stop_after = fault.after_chunks if fault is not None else len(done.pieces)
    for i, piece in enumerate(done.pieces[:stop_after]):
        delta = {
            "type": "content_block_delta",
            "index": 0,
            "delta": (
                {"type": "text_delta", "text": piece}
                if done.tool is None
                else {"type": "input_json_delta", "partial_json": piece}
            ),
        }
        chunks.append((first_delay if i == 0 else gap, sse_event("content_block_delta", delta)))
    if fault is not None:
        if fault.kind is FaultKind.MALFORMED_BODY:
            chunks.append((0.0, b'event: content_block_delta\ndata: {"type":"content_bl\n\n'))
        else:
            error = {
                "type": "error",
                "error": {"type": "overloaded_error", "message": "Overloaded"},
            }
            chunks.append((0.0, sse_event("error", error)))
        return Reply(200, _headers(done, SSE_TYPE), chunks, streamed=True)
    usage = done.usage
    final_usage = {
        "input_tokens": usage.uncached_tokens,
        "cache_creation_input_tokens": usage.cache_write_tokens,
        "cache_read_input_tokens": usage.cached_tokens,
        "output_tokens": usage.completion_tokens,
    }
    delta_msg = {
        "type": "message_delta",
        "delta": {"stop_reason": _stop_reason(done, request), "stop_sequence": None},
        "usage": final_usage,
    }
    chunks += [
        (0.0, sse_event("content_block_stop", {"type": "content_block_stop", "index": 0})),
        (0.0, sse_event("message_delta", delta_msg)),
        (0.0, sse_event("message_stop", {"type": "message_stop"})),
    ]
    return Reply(200, _headers(done, SSE_TYPE), chunks, streamed=True)


def render_failure(failure: Failure) -> Reply:
    if failure.status == 0:
        return Reply(0, [], head_delay_s=failure.latency_s, reset=True)
    kind = _ERROR_TYPES.get(failure.status, "api_error")
    message = failure.message
    if failure.status == 429:
        message = (
            "This request would exceed your organization's rate limit. Please try again later."
        )
    elif failure.status == 500:
        message = "Internal server error"
    body = {
        "type": "error",
        "error": {"type": kind, "message": message},
        "request_id": "req_011" + format(abs(hash((failure.status, failure.latency_s))), "x")[:21],
    }
    headers = [JSON_TYPE, *retry_after_header(failure.retry_after_s)]
    return Reply(failure.status, headers, [(0.0, dumps(body))], head_delay_s=failure.latency_s)


def render_bad_request(error: BadRequest) -> Reply:
    return render_failure(Failure("invalid_request", error.status, str(error), 0.0))
