"""Chat Completions on the wire: OpenAI ``/v1/chat/completions`` and OpenRouter's
``/api/v1/chat/completions``.

Shapes follow real captures: OpenRouter responses carry a top-level
``provider`` (the upstream), a ``gen-<unix>-<id>`` id, ``usage.cost`` with
``cost_details``, ``prompt_tokens_details.cached_tokens``/``cache_write_tokens``
and ``completion_tokens_details.reasoning_tokens``; its streams open with
``: OPENROUTER PROCESSING`` comments, send usage in a separate chunk with
``choices: []`` after the finish chunk, and report errors in-band (a chunk
with a top-level ``error`` and ``finish_reason: "error"``). OpenAI streams
send ``"usage": null`` on every chunk and a final usage chunk only when
``stream_options.include_usage`` is true.

Tools and ``response_format`` are answered by :mod:`ledger.simulator.structured`'s
policy: a tool call is ``message.tool_calls`` (``function.arguments`` a JSON string,
``content`` null, ``finish_reason: "tool_calls"``), streamed as ``delta.tool_calls``
fragments (the first naming the call's id and function); JSON is the content.

Router metadata (OpenRouterTeam/docs ``guides/features/router-metadata.mdx``): a
request with ``X-OpenRouter-Metadata: enabled`` (or the legacy
``X-OpenRouter-Experimental-Metadata``; the value matched case-insensitively) gets
``openrouter_metadata`` on a successful body, or on a stream's final chunk before
``[DONE]``; a stream that breaks is no success and gets none.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from ledger.simulator.cachettl import requested_ttl_s
from ledger.simulator.catalog import Service
from ledger.simulator.core import ChatRequest, Completion, Failure, Usage
from ledger.simulator.faults import FaultKind
from ledger.simulator.routing import ProviderPrefs
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
    sse_data,
    stream_schedule,
)

MAX_SESSION_ID: Final = 256
#: The request headers that opt in to router metadata (lower case, as ``handle`` gets them).
_METADATA_HEADERS: Final = ("x-openrouter-metadata", "x-openrouter-experimental-metadata")
_PROCESSING: Final = b": OPENROUTER PROCESSING\n\n"
_DONE: Final = b"data: [DONE]\n\n"
#: OpenRouter sends a keep-alive comment about this often while the upstream thinks.
_COMMENT_EVERY_S: Final = 1.0


def _strings(value: Any, name: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise BadRequest(f"provider.{name} must be an array of strings")
    return tuple(value)


def parse_provider(value: Any) -> ProviderPrefs:
    """The top-level ``provider`` object of an OpenRouter request."""
    if value is None:
        return ProviderPrefs()
    if not isinstance(value, dict):
        raise BadRequest("'provider' must be an object")
    sort = value.get("sort")
    if isinstance(sort, dict):
        sort = sort.get("by")
    if sort is not None and sort not in ("price", "throughput", "latency"):
        raise BadRequest(f"provider.sort must be price, throughput or latency, not {sort!r}")
    return ProviderPrefs(
        order=_strings(value.get("order"), "order"),
        only=_strings(value.get("only"), "only"),
        ignore=_strings(value.get("ignore"), "ignore"),
        sort=sort,
        allow_fallbacks=value.get("allow_fallbacks", True) is not False,
    )


def session_key(body: Mapping[str, Any], headers: Mapping[str, str]) -> str | None:
    """OpenRouter's sticky key: body ``session_id``, else ``x-session-id``, else
    ``prompt_cache_key`` (None: the router derives one from the opening messages)."""
    for value in (
        body.get("session_id"),
        headers.get("x-session-id"),
        body.get("prompt_cache_key"),
    ):
        if value is None or value == "":
            continue
        if not isinstance(value, str) or len(value) > MAX_SESSION_ID:
            raise BadRequest(f"session_id must be a string of at most {MAX_SESSION_ID} characters")
        return value
    return None


def parse(service: Service, headers: Mapping[str, str], raw: bytes) -> tuple[ChatRequest, bool]:
    """A chat-completions request, and whether the caller asked for stream usage."""
    account = account_of(headers)
    body = load_json(raw)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("'model' is required")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
        raise BadRequest("max_tokens must be a positive integer")
    prompt = digest_messages(
        body.get("messages"),
        tools=body.get("tools"),
        top_cache_control="cache_control" in body,
    )
    stream = body.get("stream") is True
    options = body.get("stream_options")
    include_usage = isinstance(options, dict) and options.get("include_usage") is True
    router = service == "openrouter"
    request = ChatRequest(
        service=service,
        model=model,
        prompt=prompt,
        stream=stream,
        max_tokens=max_tokens,
        session_key=session_key(body, headers) if router else None,
        provider=parse_provider(body.get("provider")) if router else ProviderPrefs(),
        account=account,
        router_metadata=router and wants_router_metadata(headers),
        wanted=wanted(body),
        cache_ttl_s=requested_ttl_s(body),
    )
    # OpenRouter always reports usage (``usage.include`` is deprecated and ignored).
    return request, include_usage or router


def wanted(body: Mapping[str, Any]) -> Wanted:
    """What the answer must be: ``tools``/``tool_choice`` and ``response_format``."""
    tools: list[Tool] = []
    for entry in body.get("tools") or ():
        function = entry.get("function") if isinstance(entry, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise BadRequest("each tool must be {'type': 'function', 'function': {'name': …}}")
        tools.append(Tool(function["name"], function.get("parameters") or {}))
    choice = body.get("tool_choice", "auto")
    if isinstance(choice, dict):
        function = choice.get("function")
        choice = function.get("name") if isinstance(function, dict) else None
    if not isinstance(choice, str):
        raise BadRequest("tool_choice must be none, auto, required or a named function")
    schema, json_mode = _response_format(body.get("response_format"))
    messages = body.get("messages")
    history = messages if isinstance(messages, list) else []
    last = history[-1] if history else None
    return Wanted(
        tools=tuple(tools),
        tool_choice=choice,
        json_schema=schema,
        json_mode=json_mode,
        after_tool_result=isinstance(last, dict) and last.get("role") in ("tool", "function"),
        user_text=last_user_text(history),
    )


def _response_format(value: Any) -> tuple[dict[str, Any] | None, bool]:
    """(the json_schema's schema, json_object) of ``response_format``."""
    if not isinstance(value, dict) or value.get("type") in (None, "text"):
        return None, False
    if value["type"] == "json_object":
        return None, True
    spec = value.get("json_schema")
    if value["type"] != "json_schema" or not isinstance(spec, dict):
        raise BadRequest("response_format must be text, json_object or json_schema")
    schema = spec.get("schema")
    return (schema if isinstance(schema, dict) else {"type": "object"}), False


def wants_router_metadata(headers: Mapping[str, str]) -> bool:
    """Whether the request opted in (any other value, or none, is "disabled")."""
    return any(headers.get(name, "").strip().lower() == "enabled" for name in _METADATA_HEADERS)


def router_metadata(done: Completion, request: ChatRequest) -> dict[str, Any]:
    """``openrouter_metadata`` for a served completion, in the docs' shape: the candidate
    endpoints (the serving one ``selected``), every attempt with its status, the attempt
    that served, and ``generation_time`` (ms from dispatch to the end of the body, as the
    SDK's ``OpenRouterMetadata`` documents it)."""
    served = done.tried[-1] if done.tried else None
    dispatched = done.total_s - (done.ttft_s - served.latency_s) if served else done.total_s
    return {
        "requested": request.model,
        "strategy": "direct",
        "region": None,
        "summary": f"available={len(done.endpoints)}, selected={done.upstream}",
        "attempt": len(done.tried),
        "is_byok": False,
        "endpoints": {
            "total": len(done.endpoints),
            "available": [
                {"provider": name, "model": request.model, "selected": name == done.upstream}
                for name in done.endpoints
            ],
        },
        "attempts": [
            {"provider": t.upstream, "model": request.model, "status": t.status} for t in done.tried
        ],
        "generation_time": round(dispatched * 1000),
    }


def _money(value: Any) -> float:
    return float(value)


def usage_json(usage: Usage, *, openrouter: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
    }
    if openrouter:
        body["cost"] = _money(usage.cost)
        body["is_byok"] = False
        body["prompt_tokens_details"] = {
            "cached_tokens": usage.cached_tokens,
            "cache_write_tokens": usage.cache_write_tokens,
            "audio_tokens": 0,
            "video_tokens": 0,
        }
        body["cost_details"] = {
            "upstream_inference_cost": _money(usage.cost),
            "upstream_inference_prompt_cost": _money(usage.prompt_cost),
            "upstream_inference_completions_cost": _money(usage.completion_cost),
        }
        body["completion_tokens_details"] = {
            "reasoning_tokens": usage.reasoning_tokens,
            "image_tokens": 0,
            "audio_tokens": 0,
        }
        return body
    body["prompt_tokens_details"] = {"cached_tokens": usage.cached_tokens, "audio_tokens": 0}
    if usage.cache_write_tokens:
        body["prompt_tokens_details"]["cache_write_tokens"] = usage.cache_write_tokens
    body["completion_tokens_details"] = {
        "reasoning_tokens": usage.reasoning_tokens,
        "audio_tokens": 0,
        "accepted_prediction_tokens": 0,
        "rejected_prediction_tokens": 0,
    }
    return body


def completion_id(done: Completion, openrouter: bool) -> str:
    if openrouter:
        return f"gen-{done.created}-{done.ident[:20]}"
    return f"chatcmpl-{done.ident}"


def _finish(done: Completion, request: ChatRequest) -> str:
    capped = request.max_tokens is not None and done.usage.completion_tokens >= request.max_tokens
    if capped:
        return "length"
    return "tool_calls" if done.tool is not None else "stop"


def _call_id(done: Completion) -> str:
    return "call_" + done.ident


def _tool_calls(done: Completion, arguments: str) -> list[dict[str, Any]]:
    function = {"name": done.tool, "arguments": arguments}
    return [{"id": _call_id(done), "type": "function", "function": function}]


def _delta(done: Completion, index: int, piece: str) -> dict[str, Any]:
    """One streamed piece: text, or a fragment of the tool call's arguments (the first
    chunk names the call, as OpenAI's do; later ones carry only ``index`` and text)."""
    if done.tool is None:
        return {"role": "assistant", "content": piece}
    if index == 0:
        call = {"index": 0, **_tool_calls(done, piece)[0]}
        return {"role": "assistant", "content": None, "tool_calls": [call]}
    return {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}


def _headers(gen_id: str, openrouter: bool, content_type: tuple[str, str]) -> list[tuple[str, str]]:
    if openrouter:
        return [content_type, ("x-generation-id", gen_id)]
    return [content_type, ("x-request-id", "req_" + gen_id[-24:])]


def render_completion(done: Completion, request: ChatRequest, include_usage: bool) -> Reply:
    openrouter = request.service == "openrouter"
    gen_id = completion_id(done, openrouter)
    if request.stream:
        return _render_stream(done, request, include_usage, gen_id)
    finish = _finish(done, request)
    text = "".join(done.pieces)
    message: dict[str, Any] = {
        "role": "assistant",
        "content": text if done.tool is None else None,
        "refusal": None,
    }
    if done.tool is not None:
        message["tool_calls"] = _tool_calls(done, text)
    choice: dict[str, Any] = {
        "index": 0,
        "message": message,
        "logprobs": None,
        "finish_reason": finish,
    }
    body: dict[str, Any] = {"id": gen_id}
    if openrouter:
        body["provider"] = done.upstream
        message["reasoning"] = None
        choice["native_finish_reason"] = finish
    else:
        message["annotations"] = []
    body |= {"object": "chat.completion", "created": done.created, "model": done.model}
    body["choices"] = [choice]
    body["usage"] = usage_json(done.usage, openrouter=openrouter)
    body["system_fingerprint"] = None
    if not openrouter:
        body["service_tier"] = "default"
    if request.router_metadata:
        body["openrouter_metadata"] = router_metadata(done, request)
    raw = dumps(body)
    if done.fault is not None and done.fault.kind is FaultKind.MALFORMED_BODY:
        raw = raw[: len(raw) // 2]
    return Reply(
        200, _headers(gen_id, openrouter, JSON_TYPE), [(0.0, raw)], head_delay_s=done.total_s
    )


def _render_stream(
    done: Completion, request: ChatRequest, include_usage: bool, gen_id: str
) -> Reply:
    openrouter = request.service == "openrouter"
    head: dict[str, Any] = {"id": gen_id}
    if openrouter:
        head["provider"] = done.upstream
    head |= {"object": "chat.completion.chunk", "created": done.created, "model": done.model}
    extra: dict[str, Any] = {"usage": None} if include_usage and not openrouter else {}

    def chunk(delta: dict[str, Any], finish: str | None) -> bytes:
        choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
        if openrouter:
            choice["native_finish_reason"] = finish
        else:
            choice["logprobs"] = None
        return sse_data({**head, "choices": [choice], **extra})

    first_delay, gap = stream_schedule(done.ttft_s, done.total_s, len(done.pieces))
    chunks: list[tuple[float, bytes]] = []
    if openrouter:
        comments = max(1, min(int(first_delay / _COMMENT_EVERY_S), 30))
        chunks += [(first_delay / (comments + 1), _PROCESSING)] * comments
        first_delay /= comments + 1
    fault = done.fault
    stop_after = fault.after_chunks if fault is not None else len(done.pieces)
    for i, piece in enumerate(done.pieces):
        if i >= stop_after:
            return Reply(
                200,
                _headers(gen_id, openrouter, SSE_TYPE),
                chunks + _broken(fault, head, openrouter),
                streamed=True,
            )
        chunks.append((first_delay if i == 0 else gap, chunk(_delta(done, i, piece), None)))
    if fault is not None and stop_after >= len(done.pieces):
        chunks += _broken(fault, head, openrouter)
        return Reply(200, _headers(gen_id, openrouter, SSE_TYPE), chunks, streamed=True)
    chunks.append(
        (
            0.0,
            chunk(
                {"role": "assistant", "content": ""} if openrouter else {}, _finish(done, request)
            ),
        )
    )
    if include_usage:  # always, on OpenRouter
        usage = {**head, "choices": [], "usage": usage_json(done.usage, openrouter=openrouter)}
        if request.router_metadata:
            # "delivered on the final chunk before data: [DONE]": the usage chunk.
            usage["openrouter_metadata"] = router_metadata(done, request)
        chunks.append((0.0, sse_data(usage)))
    chunks.append((0.0, _DONE))
    return Reply(200, _headers(gen_id, openrouter, SSE_TYPE), chunks, streamed=True)


def _broken(fault: Any, head: dict[str, Any], openrouter: bool) -> list[tuple[float, bytes]]:
    """The end of a stream that breaks: malformed data, or an in-band error."""
    if fault.kind is FaultKind.MALFORMED_BODY:
        return [(0.0, sse_data(head)[:40] + b"\n\n")]
    if openrouter:
        error = {
            "code": 502,
            "message": "Provider disconnected unexpectedly",
            "metadata": {"error_type": "provider_unavailable"},
        }
        choices = [{"index": 0, "delta": {"content": ""}, "finish_reason": "error"}]
        return [(0.0, sse_data({**head, "error": error, "choices": choices})), (0.0, _DONE)]
    error = {
        "message": "The server had an error while processing your request. Sorry about that!",
        "type": "server_error",
        "param": None,
        "code": None,
    }
    return [(0.0, sse_data({"error": error}))]


_OPENAI_ERROR_TYPES: Final = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("requests", "rate_limit_exceeded"),
}


def render_failure(failure: Failure, service: Service) -> Reply:
    if failure.status == 0:
        return Reply(0, [], head_delay_s=failure.latency_s, reset=True)
    headers = [JSON_TYPE, *retry_after_header(failure.retry_after_s)]
    if service == "openrouter":
        error: dict[str, Any] = {"code": failure.status, "message": failure.message}
        if failure.upstream is not None:
            metadata: dict[str, Any] = {"provider_name": failure.upstream, "raw": failure.kind}
            if failure.previous:
                metadata["previous_errors"] = [
                    {"provider": slug, "status": status} for slug, status in failure.previous
                ]
            error["metadata"] = metadata
        elif failure.status == 429:
            error["metadata"] = {
                "error_type": "rate_limit_exceeded",
                "provider_code": "rate_limited",
            }
        body = dumps({"error": error})
    else:
        kind, code = _OPENAI_ERROR_TYPES.get(failure.status, ("server_error", None))
        message = failure.message
        if failure.status == 429:
            message = (
                f"Rate limit reached for requests. Please try again in {failure.retry_after_s}s."
            )
        body = dumps({"error": {"message": message, "type": kind, "param": None, "code": code}})
    return Reply(failure.status, headers, [(0.0, body)], head_delay_s=failure.latency_s)


def render_bad_request(error: BadRequest, service: Service) -> Reply:
    return render_failure(Failure("invalid_request", error.status, str(error), 0.0), service)
