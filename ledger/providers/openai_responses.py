"""OpenAI's Responses API (``POST /v1/responses``): the OpenAI family's second wire format.

OpenAI serves it, and so do OpenRouter (``/api/v1/responses``), Azure OpenAI
and OpenAI-compatible servers, so every chat-completions provider exposes these
parsers as :meth:`OpenAIStyleProvider.parse_responses` and
:meth:`OpenAIStyleProvider.responses_stream_parser`; the caller picks them by
endpoint (a body cannot be told apart from a chat completion before it arrives).

* usage: ``input_tokens`` already includes ``input_tokens_details.cached_tokens``
  (and ``cache_write_tokens`` where reported); ``output_tokens`` includes
  ``output_tokens_details.reasoning_tokens``. OpenRouter adds ``usage.cost``.
  A response also carries ``tool_usage`` (built-in tools' own counts): it is
  not the model's usage and is never read as such.
* body: ``object: "response"`` with ``id``, ``model``, ``status``
  (``completed``/``incomplete``/``failed``…), ``error`` (``{code, message}``),
  ``incomplete_details.reason`` and ``output[]``, whose ``message`` items hold
  ``content[]`` parts; the text is in the parts of type ``output_text``.
* streams: typed SSE events (``event:`` lines are optional: OpenRouter sends
  only ``data:``), each naming its ``type``. ``response.created`` /
  ``response.in_progress`` carry the response so far, ``response.output_text.delta``
  the text, and a terminal ``response.completed`` / ``response.incomplete`` /
  ``response.failed`` the final response with its usage. An ``error`` event
  (``{code, message}``, top-level or nested under ``error``) ends the stream.
"""

from __future__ import annotations

from typing import Any, Final

from ledger.providers import wire
from ledger.providers.base import InBandError, Parsed, Usage
from ledger.providers.openai_chat import in_band_error, to_parsed
from ledger.providers.router_metadata import FIELD as ROUTER_METADATA
from ledger.providers.router_metadata import RouterAttempt, attempts_in
from ledger.providers.sse import SSEDecoder

#: Events carrying the whole response object (so far, or final) under ``response``.
_RESPONSE_EVENTS: Final = frozenset(
    {
        "response.created",
        "response.queued",
        "response.in_progress",
        "response.completed",
        "response.incomplete",
        "response.failed",
    }
)
_TERMINAL_EVENTS: Final = frozenset(
    {"response.completed", "response.incomplete", "response.failed"}
)
_TEXT_DELTA: Final = "response.output_text.delta"


def normalise_responses_usage(raw: dict[str, Any], problems: list[str]) -> Usage:
    """Contract usage from a Responses API ``usage`` object."""
    prompt = wire.obj(raw.get("input_tokens_details"))
    completion = wire.obj(raw.get("output_tokens_details"))
    return wire.UsageBuilder(problems).build(
        input_tokens=wire.count(raw.get("input_tokens")),
        output_tokens=wire.count(raw.get("output_tokens")),
        cache_read=wire.count(prompt.get("cached_tokens")),
        cache_write=wire.count(prompt.get("cache_write_tokens")),
        reasoning=wire.count(completion.get("reasoning_tokens")),
    )


def output_text(output: Any) -> str | None:
    """The text of a response's ``output[]``: its ``output_text`` parts, joined (None if none)."""
    if not isinstance(output, list):
        return None
    parts: list[str] = []
    for item in output:
        content = item.get("content") if isinstance(item, dict) else None
        if not isinstance(content, list):
            continue
        for part in content:
            if isinstance(part, dict) and part.get("type") == "output_text":
                piece = part.get("text")
                if isinstance(piece, str):
                    parts.append(piece)
    return "".join(parts) if parts else None


class _Response:
    """What the response object(s) seen so far say; later ones win."""

    def __init__(self) -> None:
        self.problems: list[str] = []
        self.generation_id: str | None = None
        self.model: str | None = None
        self.upstream: str | None = None
        self.usage_raw: dict[str, Any] | None = None
        self.status: str | None = None
        self.incomplete: str | None = None
        self.error: InBandError | None = None
        self.text: str | None = None
        self.router_attempts: tuple[RouterAttempt, ...] | None = None

    def absorb(self, data: dict[str, Any]) -> None:
        self.generation_id = wire.text(data.get("id")) or self.generation_id
        self.model = wire.text(data.get("model")) or self.model
        self.upstream = wire.text(data.get("provider")) or self.upstream
        usage = data.get("usage")
        if isinstance(usage, dict):
            self.usage_raw = usage
        self.status = wire.text(data.get("status")) or self.status
        reason = wire.obj(data.get("incomplete_details")).get("reason")
        self.incomplete = wire.text(reason) or self.incomplete
        if (error := in_band_error(data.get("error"))) is not None:
            self.error = error
        elif self.status == "failed" and self.error is None:
            self.error = InBandError(message="response failed without error details")
        self.text = output_text(data.get("output")) or self.text

    def absorb_router_metadata(self, document: dict[str, Any]) -> None:
        """OpenRouter's router metadata, on the body or the final event (the docs do not
        say whether a Responses event carries it at its top level or in its ``response``:
        both are read)."""
        if ROUTER_METADATA in document or ROUTER_METADATA in wire.obj(document.get("response")):
            self.router_attempts = attempts_in(document) or self.router_attempts

    @property
    def finish_reason(self) -> str | None:
        # An incomplete response's reason ("max_output_tokens", "content_filter")
        # is what a chat completion's finish_reason would say.
        return self.incomplete if self.status == "incomplete" and self.incomplete else self.status

    def parsed(self, content: str | None, *, reports_upstream: bool, valid: bool) -> Parsed:
        return to_parsed(self, normalise_responses_usage, content, reports_upstream, valid)


def parse_responses_body(body: bytes, *, reports_upstream: bool) -> Parsed:
    """Parse a whole Responses API body (pure; never raises)."""
    data = wire.loads(body)
    if not isinstance(data, dict):
        return Parsed(valid=False, problems=("body is not a JSON object",))
    acc = _Response()
    acc.absorb(data)
    acc.absorb_router_metadata(data)
    looks_right = data.get("object") == "response" or isinstance(data.get("output"), list)
    if not looks_right and acc.error is None:
        acc.problems.append("not a response object")
    if acc.usage_raw is None:
        acc.problems.append("no usage in response")
    valid = looks_right or acc.error is not None
    return acc.parsed(acc.text, reports_upstream=reports_upstream, valid=valid)


def stream_error(chunk: dict[str, Any]) -> InBandError:
    """An ``error`` stream event: ``{code, message}`` at the top level or under ``error``."""
    nested = chunk.get("error")
    return in_band_error(nested if isinstance(nested, dict) else chunk) or InBandError(
        message="error event without details"
    )


class ResponsesStreamParser:
    """Incremental parser of a Responses API SSE stream (no I/O; see the module docstring)."""

    def __init__(self, *, reports_upstream: bool) -> None:
        self._sse = SSEDecoder()
        self._acc = _Response()
        self._parts: list[str] = []
        self._reports_upstream = reports_upstream
        self.done = False  # a terminal event (or OpenRouter's ``[DONE]``) arrived

    @property
    def error(self) -> InBandError | None:
        return self._acc.error

    def feed(self, data: bytes) -> list[str]:
        out: list[str] = []
        for name, text in self._sse.feed_pairs(data):
            self._event(name, text, out)
        return out

    def finish(self) -> Parsed:
        for name, text in self._sse.close_pairs():
            self._event(name, text, [])
        acc = self._acc
        if not self.done and acc.error is None:
            acc.problems.append("stream ended before its terminal event")
        # No deltas (a proxy that buffers, or a tool-only answer): the final object's text.
        content = "".join(self._parts) if self._parts else acc.text or ""
        return acc.parsed(content, reports_upstream=self._reports_upstream, valid=True)

    def _event(self, name: str, data: str, out: list[str]) -> None:
        if data[:1] != "{" and data.strip() == "[DONE]":
            self.done = True
            return
        chunk = wire.loads_text(data)
        if not isinstance(chunk, dict):
            self._acc.problems.append("a stream event is not a JSON object")
            if name == "error":
                self._acc.error = InBandError(message="unreadable error event")
            return
        kind = chunk.get("type")
        if not isinstance(kind, str):
            kind = name  # the SSE event name says the same when the data omits it
        self._acc.absorb_router_metadata(chunk)
        if kind == _TEXT_DELTA:
            piece = chunk.get("delta")
            if isinstance(piece, str) and piece:
                self._parts.append(piece)
                out.append(piece)
        elif kind in _RESPONSE_EVENTS:
            response = chunk.get("response")
            if isinstance(response, dict):
                self._acc.absorb(response)
            if kind in _TERMINAL_EVENTS:
                self.done = True
        elif kind == "error" or name == "error":
            self._acc.error = stream_error(chunk)
