"""The pure ASGI middleware: the rate limiter before any agent work, and one
path that turns retryable failures into a friendly HTTP answer.

It speaks raw ASGI (no framework), so it wraps Starlette, FastAPI, Django,
Litestar or a bare ASGI callable alike. For every HTTP request it:

1. keys the client with :class:`~ledger.resilience.identity.ClientIdentity`
   (proxy-aware) and asks the limiter; a rejection is answered at once with
   429, ``Retry-After`` and a short JSON body, and the app never runs;
2. runs the app; an exception raised before the response started is answered
   through the same path when it is a :class:`~ledger.errors.TooManyRequests`
   (429) or satisfies :class:`HTTPRetryable` (the cascade's "all providers
   failed", 503). Anything else, or anything after the response began,
   propagates to the server as usual.

Let it be the only judge of proxies: run uvicorn with ``--no-proxy-headers``
(it trusts ``X-Forwarded-For`` from 127.0.0.1 by default and rewrites the
peer address before any middleware sees it), and the same for other servers.

Wrap it outermost: a framework's own error middleware inside it may turn an
exception into a 500 before it gets here (register a handler that calls
``exc.http_response()`` there instead).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Protocol, runtime_checkable

from ledger.errors import HTTPResponse, TooManyRequests, error_response
from ledger.resilience.identity import ClientIdentity
from ledger.resilience.limiter import RateLimiter

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


@runtime_checkable
class HTTPRetryable(Protocol):
    """An exception that knows its HTTP answer (status, headers, body).

    ``retry_after`` is in seconds (None: no hint). The cascade's "all providers
    failed" satisfies it with a 503.
    """

    retry_after: float | None

    def http_response(self) -> HTTPResponse: ...


def rate_limited_response(exc: TooManyRequests) -> HTTPResponse:
    """The 429 answer to a :class:`~ledger.errors.TooManyRequests`."""
    return error_response(429, "rate_limited", "Too many requests; retry later.", exc.retry_after)


async def send_response(send: Send, response: HTTPResponse) -> None:
    """Send a complete response on an ASGI channel."""
    status, headers, body = response
    headers = [*headers, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class ResilienceMiddleware:
    """``ResilienceMiddleware(app, limiter=..., identity=...)``; see the module docstring.

    ``limiter=None`` keeps only the error mapping. ``exempt_paths`` (health
    checks, say) bypass the limiter. ``refusal`` renders the 429 for a request
    (default: :func:`rate_limited_response`); an API that clients' SDKs parse,
    such as the gateway, answers in its own error format so they recognise it.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        limiter: RateLimiter | None,
        identity: ClientIdentity | None = None,
        exempt_paths: frozenset[str] = frozenset(),
        refusal: Callable[[Scope, TooManyRequests], HTTPResponse] | None = None,
    ) -> None:
        self.app = app
        self.refusal = refusal or (lambda scope, exc: rate_limited_response(exc))
        self.limiter = limiter
        self.identity = identity or ClientIdentity()
        self.exempt_paths = exempt_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.limiter is not None and scope.get("path") not in self.exempt_paths:
            decision = await self.limiter.acheck(self.identity.key(scope))
            if not decision.allowed:
                refused = TooManyRequests(
                    f"rate limit of {self.limiter.limit} requests per "
                    f"{self.limiter.window_s:g} s reached; retry later",
                    retry_after=decision.retry_after_s,
                )
                await send_response(send, self.refusal(scope, refused))
                return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as exc:
            response = (
                self.refusal(scope, exc) if isinstance(exc, TooManyRequests) else _response_for(exc)
            )
            if started or response is None:
                raise
            await send_response(send, response)


def _response_for(exc: Exception) -> HTTPResponse | None:
    if isinstance(exc, TooManyRequests):
        return rate_limited_response(exc)
    if isinstance(exc, HTTPRetryable):
        return exc.http_response()
    return None
