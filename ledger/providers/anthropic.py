"""Anthropic Messages API (``POST /v1/messages``).

* auth: ``x-api-key`` plus ``anthropic-version: 2023-06-01``; ``max_tokens`` is
  required; system prompts travel in ``system``, not in ``messages``.
* usage: ``input_tokens`` EXCLUDES ``cache_read_input_tokens`` and
  ``cache_creation_input_tokens``; the contract's input is the sum of the three.
* streams: ``message_start`` carries the id, model and initial usage;
  ``message_delta`` carries cumulative usage whose fields (output, and on some
  streams input and cache counts too) supersede the earlier ones; an
  ``event: error`` (e.g. ``overloaded_error``) ends the stream.
"""

from __future__ import annotations

from typing import Any, Final

from ledger.providers import wire
from ledger.providers.base import (
    Capabilities,
    ChatRequest,
    ErrorBody,
    HttpRequest,
    InBandError,
    Parsed,
    Provider,
    Usage,
)
from ledger.providers.router_metadata import RouterAttempt, attempts_in
from ledger.providers.sse import SSEDecoder

API_VERSION: Final = "2023-06-01"
DEFAULT_MAX_TOKENS: Final = 1024

#: Anthropic's error types and the HTTP status each stands for.
ERROR_STATUS: Final[dict[str, int]] = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}


def normalise_usage(raw: dict[str, Any], problems: list[str]) -> Usage:
    uncached = wire.count(raw.get("input_tokens"))
    read = wire.count(raw.get("cache_read_input_tokens"))
    write = wire.count(raw.get("cache_creation_input_tokens"))
    # cache_creation splits the writes by TTL; 1-hour writes cost more than 5-minute ones.
    write_1h = wire.count(wire.obj(raw.get("cache_creation")).get("ephemeral_1h_input_tokens"))
    return wire.UsageBuilder(problems).build(
        input_tokens=wire.safe_add(uncached, read, write),
        output_tokens=wire.count(raw.get("output_tokens")),
        cache_read=read,
        cache_write=write,
        cache_write_1h=write_1h,
    )


def in_band_error(data: dict[str, Any]) -> InBandError | None:
    error = data.get("error")
    if data.get("type") != "error" and not isinstance(error, dict):
        return None
    error = wire.obj(error)
    kind = wire.text(error.get("type"))
    status = ERROR_STATUS.get(kind or "")
    return InBandError(
        message=wire.text(error.get("message")) or "provider reported an error",
        code=kind,
        http_status=status,
        transient=status is None or status == 429 or status >= 500,
    )


def _text_of(content: Any) -> str | None:
    if not isinstance(content, list):
        return None
    parts = [
        block["text"]
        for block in content
        if isinstance(block, dict)
        and block.get("type") == "text"
        and isinstance(block.get("text"), str)
    ]
    return "".join(parts)


def _merge_usage(into: dict[str, Any], update: Any) -> None:
    # message_delta's usage is cumulative: a field it restates wins; null means "not restated".
    for key, value in wire.obj(update).items():
        if value is not None:
            into[key] = value


def parse_message(body: bytes) -> Parsed:
    data = wire.loads(body)
    if not isinstance(data, dict):
        return Parsed(valid=False, problems=("body is not a JSON object",))
    problems: list[str] = []
    error = in_band_error(data)
    usage_raw = data.get("usage")
    usage = None
    if isinstance(usage_raw, dict):
        usage = normalise_usage(usage_raw, problems)
    elif error is None:
        problems.append("no usage in response")
    content = _text_of(data.get("content"))
    return Parsed(
        router_attempts=attempts_in(data),
        content=content,
        usage=usage,
        model=wire.text(data.get("model")),
        generation_id=wire.text(data.get("id")),
        finish_reason=wire.text(data.get("stop_reason")),
        error=error,
        valid=error is not None or content is not None,
        problems=tuple(problems),
    )


class MessageStreamParser:
    """Incremental parser of a Messages SSE stream."""

    def __init__(self) -> None:
        self._sse = SSEDecoder()
        self._usage: dict[str, Any] | None = None
        self._parts: list[str] = []
        self._problems: list[str] = []
        self._model: str | None = None
        self._id: str | None = None
        self._stop: str | None = None
        self._error: InBandError | None = None
        self._final_usage = False  # a message_delta (cumulative, final usage) arrived
        self._done = False
        #: OpenRouter's router metadata, which its Messages route puts on ``message_stop``.
        self._router_attempts: tuple[RouterAttempt, ...] | None = None

    @property
    def error(self) -> InBandError | None:
        return self._error

    @property
    def done(self) -> bool:
        return self._done

    def feed(self, data: bytes) -> list[str]:
        out: list[str] = []
        for name, text in self._sse.feed_pairs(data):
            self._event(name, text, out)
        return out

    def finish(self) -> Parsed:
        for name, text in self._sse.close_pairs():
            self._event(name, text, [])
        usage = None if self._usage is None else normalise_usage(self._usage, self._problems)
        partial = usage is not None and not self._final_usage
        if partial:
            self._problems.append("stream ended before message_delta: usage is partial")
        return Parsed(
            usage_partial=partial,
            content="".join(self._parts),
            usage=usage,
            model=self._model,
            generation_id=self._id,
            finish_reason=self._stop,
            error=self._error,
            problems=tuple(self._problems),
            router_attempts=self._router_attempts,
        )

    def _event(self, name: str, text: str, out: list[str]) -> None:
        data = wire.loads_text(text)
        if not isinstance(data, dict):
            self._problems.append("a stream event is not a JSON object")
            if name == "error":
                self._error = InBandError(message="unreadable error event")
            return
        kind = data.get("type")
        if kind == "message_start":
            message = wire.obj(data.get("message"))
            self._id = wire.text(message.get("id")) or self._id
            self._model = wire.text(message.get("model")) or self._model
            self._usage = {}
            _merge_usage(self._usage, message.get("usage"))
        elif kind == "content_block_delta":
            delta = wire.obj(data.get("delta"))
            piece = delta.get("text") if delta.get("type") == "text_delta" else None
            if isinstance(piece, str) and piece:
                self._parts.append(piece)
                out.append(piece)
        elif kind == "message_delta":
            if self._usage is None:
                self._usage = {}
            _merge_usage(self._usage, data.get("usage"))
            self._final_usage = True
            self._stop = wire.text(wire.obj(data.get("delta")).get("stop_reason")) or self._stop
        elif kind == "message_stop":
            self._done = True
            self._router_attempts = attempts_in(data) or self._router_attempts
        elif kind == "error" or name == "error":
            self._error = in_band_error(data) or InBandError(message="error event")


def system_prompt(contents: list[Any]) -> str | list[Any]:
    """Anthropic's ``system`` from the system messages' contents: one string when all are
    strings, else a list of blocks (strings become text blocks, block lists are kept as
    they are, so ``cache_control`` breakpoints reach the API: explicit prompt caching)."""
    if all(isinstance(c, str) for c in contents):
        return "\n\n".join(contents)
    blocks: list[Any] = []
    for content in contents:
        if isinstance(content, list):
            blocks.extend(content)
        elif content is not None:
            blocks.append({"type": "text", "text": str(content)})
    return blocks


class AnthropicProvider(Provider):
    name = "anthropic"
    family = "anthropic_messages"
    endpoints = frozenset({"messages"})
    capabilities = Capabilities(
        sticky_session=False,
        prompt_caching="explicit",
        streaming_usage=True,
        reports_cost=False,
        reports_upstream=False,
    )
    default_base_url = "https://api.anthropic.com"
    api_key_env = "ANTHROPIC_API_KEY"
    base_url_env = "ANTHROPIC_BASE_URL"
    prices_provider_id = "anthropic"

    def build_request(self, request: ChatRequest) -> HttpRequest:
        system: list[Any] = []
        messages: list[dict[str, Any]] = []
        for message in request.messages:
            if message.get("role") == "system":
                system.append(message.get("content"))
            else:
                # Content passes through as given: a string, or a list of content blocks
                # (text with cache_control, images…), which Anthropic takes as they are.
                messages.append({"role": message.get("role"), "content": message.get("content")})
        body: dict[str, Any] = {
            "model": request.model,
            "messages": messages,
            "max_tokens": request.max_tokens or DEFAULT_MAX_TOKENS,
        }
        if system:
            body["system"] = system_prompt(system)
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.stream:
            body["stream"] = True
        if request.extra_body:
            body.update(request.extra_body)
        headers = {
            "content-type": "application/json",
            "x-api-key": self._api_key or "",
            "anthropic-version": API_VERSION,
        }
        return HttpRequest("POST", f"{self.base_url}/v1/messages", headers, body)

    def parse_response(self, body: bytes) -> Parsed:
        return parse_message(body)

    def parse_error(self, status: int, body: bytes) -> ErrorBody:
        data = wire.obj(wire.loads(body))
        error = in_band_error(data)
        if error is None:
            return ErrorBody(message="no error details in the body")
        return ErrorBody(message=error.message, code=error.code)

    def stream_parser(self) -> MessageStreamParser:
        return MessageStreamParser()
