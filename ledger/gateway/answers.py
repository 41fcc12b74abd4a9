"""The gateway's own answers, in the wire format of the route that was called, so the
official SDKs read them as they read the provider's (``RateLimitError`` on 429 and so on).

OpenAI: ``{"error": {"message", "type", "param", "code"}}``.
Anthropic: ``{"type": "error", "error": {"type", "message"}}``.
Messages never contain a key or request text: callers pass ledger's own wording
or a provider message already redacted by :func:`ledger.attempt.http_failure`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Final

from ledger.errors import AllProvidersFailed, HTTPResponse, ProviderError, retry_after_header
from ledger.gateway.config import Wire

JSON: Final = (b"content-type", b"application/json")
SSE: Final = (b"content-type", b"text/event-stream; charset=utf-8")
NO_STORE: Final = (b"cache-control", b"no-store")

#: Anthropic's error type for each status (their documented table).
_ANTHROPIC_TYPES: Final = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}
#: OpenAI's error type for each status (the SDK reads the status; the type is for humans).
_OPENAI_TYPES: Final = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    402: "insufficient_quota",
    403: "invalid_request_error",
    404: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_exceeded",
}
#: OpenAI has no 529: an Anthropic-style "overloaded" reaches an OpenAI-wire client as
#: 503, which its SDK reads as the same retryable ``InternalServerError``.
_OPENAI_OVERLOADED: Final = 503


def error_body(wire: Wire, status: int, message: str, code: str | None = None) -> bytes:
    """The JSON error body for ``status`` in ``wire``'s shape."""
    if wire == "messages":
        kind = _ANTHROPIC_TYPES.get(
            status, "api_error" if status >= 500 else "invalid_request_error"
        )
        return json.dumps(
            {"type": "error", "error": {"type": kind, "message": message}}, ensure_ascii=False
        ).encode()
    kind = _OPENAI_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    error = {"message": message, "type": kind, "param": None, "code": code or kind}
    return json.dumps({"error": error}, ensure_ascii=False).encode()


def error_response(
    wire: Wire,
    status: int,
    message: str,
    *,
    code: str | None = None,
    retry_after: float | None = None,
) -> HTTPResponse:
    """A whole error answer: status, JSON headers (``Retry-After`` when given), body."""
    headers = [JSON, NO_STORE]
    if retry_after is not None:
        headers.append((b"retry-after", retry_after_header(retry_after).encode()))
    return status, headers, error_body(wire, status, message, code)


def exhausted_status(wire: Wire, errors: Sequence[ProviderError]) -> int:
    """The status a provider would have answered when every route failed transiently.

    429 when every attempt was rate-limited (the SDKs raise ``RateLimitError``, as the
    provider's own 429 makes them); the routes' own 5xx when they all answered the same
    one (Anthropic's 529 ``overloaded_error`` stays 529 on its wire); else 503: the
    routes failed in different ways (a timeout, a reset, a 500 and a 429), which no
    single provider status describes."""
    if errors and all(e.error_type == "rate_limited" for e in errors):
        return 429
    statuses = {e.http_status for e in errors}
    if len(statuses) == 1:
        (status,) = statuses
        if status is not None and 500 <= status <= 599:
            return _OPENAI_OVERLOADED if status == 529 and wire == "chat" else status
    return 503


def shortest_retry_after(errors: Sequence[ProviderError], default: float) -> float:
    """The shortest ``Retry-After`` any route sent, else ``default``: the chain serves again
    as soon as any one route does, so that is when the client's retry can succeed."""
    hints = [e.retry_after for e in errors if e.retry_after is not None]
    return min(hints) if hints else default


def exhausted_response(
    wire: Wire,
    errors: Sequence[ProviderError],
    *,
    call_id: str,
    locale: str | None,
    default_retry_after_s: float,
) -> HTTPResponse:
    """The answer when every route failed transiently: :func:`exhausted_status`, the
    shortest upstream ``Retry-After`` (else ``default_retry_after_s``), and the cascade's
    localized message in ``wire``'s error shape."""
    retry_after = shortest_retry_after(errors, default_retry_after_s)
    exc = AllProvidersFailed(tuple(errors), retry_after=retry_after, call_id=call_id, locale=locale)
    status = exhausted_status(wire, errors)
    code = "rate_limit_exceeded" if status == 429 else "providers_unavailable"
    return all_failed_response(wire, exc, locale, status=status, code=code)


def all_failed_response(
    wire: Wire,
    exc: AllProvidersFailed,
    locale: str | None,
    *,
    status: int = 503,
    code: str = "providers_unavailable",
) -> HTTPResponse:
    """The cascade's friendly, localized answer (:meth:`AllProvidersFailed.http_response`),
    its message carried in ``wire``'s error shape so the SDKs show it, with ``status``."""
    _, headers, body = exc.http_response(locale)
    message = json.loads(body)["message"]
    retry = dict(headers).get(b"retry-after")
    extra = [JSON, NO_STORE] + ([(b"retry-after", retry)] if retry else [])
    return status, extra, error_body(wire, status, message, code)
