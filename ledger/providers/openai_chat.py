"""The OpenAI chat-completions wire format: usage, whole bodies, streams and errors.

Shared by every provider of the family (:mod:`ledger.providers.openai_compat`)
and by the Responses API parsers (:mod:`ledger.providers.openai_responses`),
which reuse its in-band error reading and its accumulator-to-``Parsed`` step.
Pure functions and parser objects: no I/O, no provider configuration.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from json.decoder import scanstring  # type: ignore[attr-defined]
from typing import Any, Protocol

from ledger.errors import is_transient_code
from ledger.providers import wire
from ledger.providers.base import ErrorBody, InBandError, Parsed, Usage
from ledger.providers.router_metadata import FIELD as ROUTER_METADATA
from ledger.providers.router_metadata import RouterAttempt, attempts_in
from ledger.providers.sse import SSEDecoder


def normalise_usage(raw: dict[str, Any], problems: list[str]) -> Usage:
    """Contract usage from an OpenAI-shaped ``usage`` object (DeepSeek/Groq variants included)."""
    prompt = wire.obj(raw.get("prompt_tokens_details"))
    completion = wire.obj(raw.get("completion_tokens_details"))
    cache_read = wire.count(raw.get("prompt_cache_hit_tokens"))  # DeepSeek's documented field
    if cache_read is None:
        cache_read = wire.count(prompt.get("cached_tokens"))
    audio_in = wire.count(prompt.get("audio_tokens"))
    audio_out = wire.count(completion.get("audio_tokens"))
    return wire.UsageBuilder(problems).build(
        input_tokens=wire.count(raw.get("prompt_tokens")),
        output_tokens=wire.count(raw.get("completion_tokens")),
        cache_read=cache_read,
        cache_write=wire.count(prompt.get("cache_write_tokens")),
        reasoning=wire.count(completion.get("reasoning_tokens")),
        input_audio=audio_in,
        output_audio=audio_out,
        modalities=[("input", "audio", audio_in), ("output", "audio", audio_out)],
    )


def find_usage(chunk: dict[str, Any]) -> dict[str, Any] | None:
    """The usage object of a response or chunk: top-level, else Groq's ``x_groq.usage``."""
    usage = chunk.get("usage")
    if isinstance(usage, dict):
        return usage
    groq = wire.obj(chunk.get("x_groq")).get("usage")
    return groq if isinstance(groq, dict) else None


def in_band_error(value: Any) -> InBandError | None:
    """An OpenAI/OpenRouter/Groq error object as an :class:`InBandError` (None if not one)."""
    if not isinstance(value, dict) or not value:
        return None
    raw_code = value.get("code")
    status = wire.count(value.get("status_code")) or wire.count(value.get("http_status"))
    if status is None and (code_int := wire.count(raw_code)) is not None:
        status = code_int
    if status is not None and not 100 <= status <= 599:
        status = None
    code = None if raw_code is None or isinstance(raw_code, dict | list) else str(raw_code)
    word = wire.text(value.get("type")) or wire.text(value.get("error_type"))
    transient = is_transient_code(status) if status is not None else is_transient_code(code or word)
    return InBandError(
        message=wire.text(value.get("message")) or "provider reported an error",
        code=code or word,
        http_status=status,
        transient=transient,
    )


class _Accumulator:
    """Fields shared by whole responses and streamed chunks.

    ``reads_upstream`` False skips looking for ``provider`` in every chunk of a
    provider that never reports one (``parsed`` would drop it anyway), and for
    ``openrouter_metadata`` (OpenRouter's router metadata) likewise.
    """

    def __init__(self, reads_upstream: bool = True) -> None:
        self.reads_upstream = reads_upstream
        self.problems: list[str] = []
        self.model: str | None = None
        self.upstream: str | None = None
        self.generation_id: str | None = None
        self.usage_raw: dict[str, Any] | None = None
        self.finish_reason: str | None = None
        self.error: InBandError | None = None
        self.router_attempts: tuple[RouterAttempt, ...] | None = None

    # absorb/absorb_choice run for every chunk of every stream: find_usage and the
    # wire helpers are inlined here (same results) because the calls were the cost.

    def absorb(self, chunk: dict[str, Any]) -> None:
        # Every chunk of a stream repeats id/model/provider: read them until known.
        if self.generation_id is None:
            self.generation_id = wire.text(chunk.get("id"))
        if self.model is None:
            self.model = wire.text(chunk.get("model"))
        if self.upstream is None and self.reads_upstream:
            self.upstream = wire.text(chunk.get("provider"))
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.usage_raw = usage
        elif "x_groq" in chunk:
            groq = chunk["x_groq"]
            usage = groq.get("usage") if isinstance(groq, dict) else None
            if isinstance(usage, dict):
                self.usage_raw = usage
        if "error" in chunk and (error := in_band_error(chunk["error"])) is not None:
            self.error = error
        if self.reads_upstream and ROUTER_METADATA in chunk:
            # The final chunk's (or the body's); a later one would win, as usage does.
            self.router_attempts = attempts_in(chunk) or self.router_attempts

    def identified(self) -> bool:
        """Id, model and (where the provider names one) upstream are all known."""
        return (
            self.generation_id is not None
            and self.model is not None
            and (self.upstream is not None or not self.reads_upstream)
        )

    def absorb_choice(self, choice: dict[str, Any]) -> None:
        finish = choice.get("finish_reason")
        if finish and isinstance(finish, str):
            self.finish_reason = finish
        raw_error = choice.get("error")
        if raw_error is not None and (error := in_band_error(raw_error)) is not None:
            self.error = error
        elif self.finish_reason == "error" and self.error is None:
            self.error = InBandError(message="finish_reason error without details")

    def parsed(self, content: str | None, *, reports_upstream: bool, valid: bool = True) -> Parsed:
        return to_parsed(self, normalise_usage, content, reports_upstream, valid)


class Seen(Protocol):
    """What an accumulator of one response (whole or streamed) has gathered."""

    problems: list[str]
    model: str | None
    upstream: str | None
    generation_id: str | None
    usage_raw: dict[str, Any] | None
    error: InBandError | None
    router_attempts: tuple[RouterAttempt, ...] | None

    @property
    def finish_reason(self) -> str | None: ...


def to_parsed(
    seen: Seen,
    normalise: Callable[[dict[str, Any], list[str]], Usage],
    content: str | None,
    reports_upstream: bool,
    valid: bool,
) -> Parsed:
    """The :class:`Parsed` of what ``seen`` gathered; ``normalise`` reads its usage block
    (chat completions and the Responses API name their counters differently)."""
    usage = cost = None
    if seen.usage_raw is not None:
        usage = normalise(seen.usage_raw, seen.problems)
        cost = wire.cost(seen.usage_raw.get("cost"))
    return Parsed(
        content=content,
        usage=usage,
        model=seen.model,
        upstream=seen.upstream if reports_upstream else None,
        generation_id=seen.generation_id,
        provider_cost_usd=cost,
        finish_reason=seen.finish_reason,
        error=seen.error,
        valid=valid,
        problems=tuple(seen.problems),
        router_attempts=seen.router_attempts if reports_upstream else None,
    )


def parse_chat_response(body: bytes, *, reports_upstream: bool) -> Parsed:
    """Parse a whole chat-completions body (pure; never raises)."""
    data = wire.loads(body)
    acc = _Accumulator()
    if not isinstance(data, dict):
        return Parsed(valid=False, problems=("body is not a JSON object",))
    acc.absorb(data)
    choices = data.get("choices")
    content = None
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        acc.absorb_choice(choices[0])
        message = wire.obj(choices[0].get("message"))
        content = message.get("content") if isinstance(message.get("content"), str) else None
    elif acc.error is None:
        acc.problems.append("no choices in response")
    if acc.usage_raw is None:
        acc.problems.append("no usage in response")
    valid = acc.error is not None or isinstance(choices, list)
    return acc.parsed(content, reports_upstream=reports_upstream, valid=valid)


# The first choice of a plain delta chunk, compact as OpenAI and OpenRouter send it: an
# index, a delta of text (and the role), and null finish reason / logprobs. Group 1 is
# the text as written in the JSON (a control character is not valid JSON: no match).
_PLAIN_CHOICE = re.compile(
    r'"choices":\[\{"index":[0-9]+,"delta":\{(?:"role":"assistant",)?'
    r'"content":"((?:[^"\\\x00-\x1f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*)"'
    r'(?:,"role":"assistant")?\}(?:,"(?:logprobs|finish_reason|native_finish_reason)":null)*'
    r"\}[\],]"
)


def plain_delta_text(data: str) -> str | None:
    """The text of a chunk that carries nothing else the row needs once the response's
    id, model and upstream are known; None for any other chunk (decode it whole).

    Most chunks of a stream are one piece of text and the same id, model and
    fingerprint again: decoding all of each to read one string was the larger part
    of a stream's parsing. A chunk qualifies when its only ``"choices":`` holds a
    first choice of :data:`_PLAIN_CHOICE`'s shape (which ``absorb_choice`` would find
    nothing in), every ``"usage"`` is ``null``, and the words ``"error"`` and
    ``"x_groq"`` appear nowhere. Quoted words inside JSON strings have their quotes
    escaped, so these searches can only refuse a plain chunk, never pass another one.
    """
    at = data.find('"choices":')
    if at < 0 or '"error"' in data or '"x_groq"' in data:
        return None
    match = _PLAIN_CHOICE.match(data, at)
    if match is None or data.find('"choices":', match.end()) >= 0:
        return None
    usage = data.find('"usage"')
    if usage >= 0 and (
        not data.startswith('"usage":null', usage) or data.find('"usage"', usage + 7) >= 0
    ):
        return None
    text = match.group(1)
    return text if "\\" not in text else scanstring(data, match.start(1))[0]


# A chunk that can carry usage, an error, a finish reason or OpenRouter's router
# metadata (JSON allows spaces around the colon). Text inside a string value has its
# quotes escaped, so it cannot match; a false match only costs a parse.
_MAY_MATTER = re.compile(
    r'"(?:usage|x_groq|openrouter_metadata)"\s*:\s*\{|"error"|"finish_reason"\s*:\s*"'
)
#: The router metadata's key as it appears in a chunk's text.
_ROUTER_METADATA_KEY = f'"{ROUTER_METADATA}"'


class ChatStreamParser:
    """Incremental parser of a chat-completions SSE stream.

    With ``text=False`` (a caller that needs the usage row but not the generated
    text: the metering transport, whose SDK reads the text itself) the parser
    stops decoding JSON once it has seen the first text and the response's
    identity, except for chunks that may carry usage, an error or a finish
    reason. Every figure but ``content`` comes out the same (tested against
    every fixture); ``content`` then holds the text up to the first delta only.
    """

    def __init__(self, *, reports_upstream: bool, text: bool = True) -> None:
        self._sse = SSEDecoder()
        self._acc = _Accumulator(reports_upstream)
        self._parts: list[str] = []
        self._reports_upstream = reports_upstream
        self._text = text
        self._skimming = False
        #: The response's id, model and upstream are known: from then on a chunk that
        #: carries nothing else the row needs is read for its choices only.
        self._identified = False
        #: OpenRouter may put its router metadata on a chunk that is otherwise plain text.
        self._router_metadata = reports_upstream
        self.done = False

    #: Read plain delta chunks for their choices only (see :func:`_choices_only`);
    #: False decodes every chunk whole (the tests' reference).
    _fast = True

    @property
    def error(self) -> InBandError | None:
        return self._acc.error

    def feed(self, data: bytes) -> list[str]:
        out: list[str] = []
        event = self._event
        for name, text in self._sse.feed_pairs(data):
            event(name, text, out)
        return out

    def finish(self) -> Parsed:
        for name, text in self._sse.close_pairs():
            self._event(name, text, [])
        content = "".join(self._parts)
        return self._acc.parsed(content, reports_upstream=self._reports_upstream)

    def _event(self, name: str, data: str, out: list[str]) -> None:
        # A chunk is a JSON object, so only data not starting with "{" can be "[DONE]".
        if data[:1] != "{" and data.strip() == "[DONE]":
            self.done = True
            return
        if self._skimming and name != "error" and _MAY_MATTER.search(data) is None:
            return
        acc = self._acc
        if (
            self._identified
            and name != "error"
            and not (self._router_metadata and _ROUTER_METADATA_KEY in data)
        ):
            piece = plain_delta_text(data)
            if piece is not None:
                if piece:
                    self._parts.append(piece)
                    out.append(piece)
                    if not self._text:
                        self._skimming = True
                return
        chunk = wire.loads_text(data)
        if not isinstance(chunk, dict):
            acc.problems.append("a stream event is not a JSON object")
            if name == "error":
                acc.error = InBandError(message="unreadable error event")
            return
        acc.absorb(chunk)
        if not self._identified and self._fast:
            self._identified = acc.identified()
        if name == "error" and acc.error is None:
            acc.error = in_band_error(chunk) or InBandError(message="error event")
        self._choice(chunk.get("choices"), out)

    def _choice(self, choices: Any, out: list[str]) -> None:
        """Read the first choice: finish reason, error, and its text into ``out``."""
        acc = self._acc
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            choice = choices[0]
            acc.absorb_choice(choice)
            delta = choice.get("delta")
            piece = delta.get("content") if isinstance(delta, dict) else None
            if isinstance(piece, str) and piece:
                self._parts.append(piece)
                out.append(piece)
                if not self._text and acc.identified():
                    self._skimming = True


def parse_openai_error(body: bytes, *, reads_upstream: bool = False) -> ErrorBody:
    """The message and code of an OpenAI-shaped error body (OpenRouter's retry hint included).

    ``reads_upstream``: take the failing upstream from ``error.metadata.provider_name``
    (OpenRouter names it when an upstream failed; null when OpenRouter itself refused).
    """
    data = wire.loads(body)
    error = wire.obj(wire.obj(data).get("error"))
    if not error:
        return ErrorBody(message="no error details in the body")
    retry = wire.count(wire.obj(error.get("availability")).get("retry_after"))
    code = error.get("code")
    word = wire.text(error.get("type")) or wire.text(error.get("error_type"))
    upstream = None
    if reads_upstream:
        upstream = wire.text(wire.obj(error.get("metadata")).get("provider_name"))
    return ErrorBody(
        message=wire.text(error.get("message")) or "no message",
        code=str(code) if isinstance(code, str | int) and not isinstance(code, bool) else word,
        retry_after=float(retry) if retry is not None and retry >= 0 else None,
        upstream=upstream,
    )
