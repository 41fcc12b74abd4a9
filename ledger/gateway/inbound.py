"""What one incoming request asks, read once: the wire format, the body, the public model,
streaming, and who it belongs to.

Identity (documented in the README's "Any language" section):

==========================================  =============================================
``x-session-id`` or body ``session_id``     the session (``x-session-id`` is OpenRouter's
                                            own header); ``x-ledger-session-id`` also works
``x-actor-id`` (or ``x-ledger-actor-id``)    the agent
``x-ledger-tags``                           a JSON object of row tags (the gateway key's
                                            tags are added over them: a client cannot
                                            claim another team)
``x-ledger-locale``                         the turn's BCP 47 locale (row column, 503 text)
``x-ledger-paused: true``                   a human-in-the-loop turn: never cached
==========================================  =============================================

The body's ``session_id`` is consumed here: no provider receives it as sent
(OpenRouter receives the ADR-0221 key in its place, the others nothing).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from ledger.attempt import Call
from ledger.gateway.config import Wire
from ledger.gateway.responses import Untranslatable, to_chat

SESSION_HEADERS: Final = (b"x-session-id", b"x-ledger-session-id")
ACTOR_HEADERS: Final = (b"x-actor-id", b"x-ledger-actor-id")
TAGS_HEADER: Final = b"x-ledger-tags"
LOCALE_HEADER: Final = b"x-ledger-locale"
PAUSED_HEADER: Final = b"x-ledger-paused"

#: A ``\\uD800``-``\\uDFFF`` escape not part of a surrogate pair: JSON that names no
#: Unicode character (Python's json would take it and fail later, encoding it upstream).
_LONE_SURROGATE: Final = re.compile(
    rb"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    rb"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}"
)
_decode: Final = msgspec.json.decode


class BadRequest(ValueError):
    """The request cannot be served as sent; the message says what to change (HTTP 400)."""


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a call belongs to, as its rows will say."""

    session_id: str | None = None
    actor_id: str | None = None
    tags: Mapping[str, Any] | None = None
    locale: str | None = None
    paused: bool = False


@dataclass(frozen=True, slots=True)
class Inbound:
    """One request: ``body`` is the client's JSON object minus ``session_id``."""

    wire: Wire
    model: str
    body: Mapping[str, Any]
    stream: bool
    identity: Identity
    #: The Responses API request this call answers (``POST /v1/responses``): ``body`` is
    #: its chat-completions translation, the answer is re-told as a Responses object.
    responses: Mapping[str, Any] | None = None

    @property
    def include_usage(self) -> bool:
        """Whether an OpenAI-wire stream asked for the final usage chunk."""
        options = self.body.get("stream_options")
        return isinstance(options, dict) and options.get("include_usage") is True


def _json(raw: bytes | bytearray, what: str) -> Any:
    """``raw`` decoded by msgspec (half of json's time, bench/bench_gateway_decode.py; on
    the event loop, as a thread would hold the GIL as long; it refuses lone surrogates,
    and nesting past the recursion limit as RecursionError); ``BadRequest`` says why
    not, naming ``what``."""
    try:
        return _decode(raw)
    except RecursionError:
        raise BadRequest(f"{what} is nested too deeply") from None
    except msgspec.DecodeError as exc:
        if _LONE_SURROGATE.search(raw):
            raise BadRequest(
                f"{what} holds an unpaired UTF-16 surrogate escape (\\ud800-\\udfff), "
                "which is not a Unicode character"
            ) from None
        raise BadRequest(f"{what} is not JSON ({exc})") from None
    except msgspec.ValidationError as exc:  # a number out of float's range
        raise BadRequest(f"{what} is not JSON this gateway can read ({exc})") from None


def _header(headers: Mapping[bytes, bytes], names: tuple[bytes, ...]) -> str | None:
    for name in names:
        value = headers.get(name)
        if value is not None and value.strip():
            return value.decode("utf-8", "replace").strip()
    return None


def identity_of(
    headers: Mapping[bytes, bytes], body: Mapping[str, Any], key_tags: Mapping[str, str]
) -> Identity:
    """The identity from headers and body (see the module docstring); ``BadRequest`` when a
    value cannot be recorded."""
    session = _header(headers, SESSION_HEADERS)
    if session is None and body.get("session_id") is not None:
        session = body["session_id"]
        if not isinstance(session, str):
            raise BadRequest("session_id must be a string")
    tags: dict[str, Any] | None = None
    if (raw := headers.get(TAGS_HEADER)) is not None:
        parsed = _json(raw, "x-ledger-tags")
        if not isinstance(parsed, dict):
            raise BadRequest("x-ledger-tags must be a JSON object")
        tags = parsed
    if key_tags:
        tags = {**(tags or {}), **key_tags}
    paused = _header(headers, (PAUSED_HEADER,))
    identity = Identity(
        session_id=session or None,
        actor_id=_header(headers, ACTOR_HEADERS),
        tags=tags,
        locale=_header(headers, (LOCALE_HEADER,)),
        paused=paused is not None and paused.lower() in ("1", "true", "yes"),
    )
    try:
        Call(
            messages=(),
            session_id=identity.session_id,
            actor_id=identity.actor_id,
            tags=identity.tags,
            locale=identity.locale,
        ).check()
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    return identity


def parse(
    wire: Wire,
    raw: bytes | bytearray,
    headers: Mapping[bytes, bytes],
    key_tags: Mapping[str, str],
) -> Inbound:
    """The request in ``raw``; ``BadRequest`` names what is wrong."""
    body = _json(raw, "the request body")
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("'model' is required (a public model name this gateway serves)")
    if not isinstance(body.get("messages"), list):
        raise BadRequest("'messages' must be an array")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequest("'stream' must be true or false")
    identity = identity_of(headers, body, key_tags)
    body.pop("session_id", None)
    return Inbound(wire=wire, model=model, body=body, stream=stream, identity=identity)


def parse_responses(
    raw: bytes | bytearray, headers: Mapping[bytes, bytes], key_tags: Mapping[str, str]
) -> Inbound:
    """A ``POST /v1/responses`` request, translated to chat completions
    (:func:`ledger.gateway.responses.to_chat`; ``BadRequest`` says what cannot be)."""
    body = _json(raw, "the request body")
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("'model' is required (a public model name this gateway serves)")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequest("'stream' must be true or false")
    identity = identity_of(headers, body, key_tags)
    body.pop("session_id", None)
    try:
        chat = to_chat(body)
    except Untranslatable as exc:
        raise BadRequest(str(exc)) from None
    return Inbound("chat", model, chat, stream, identity, responses=body)
