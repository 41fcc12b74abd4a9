"""The metering transports: hold the real transport, delegate, record around it.

One pair of classes serves both HTTP stacks: ``httpx`` (the ledger client's)
and ``httpx2`` (pydantic's fork, which the ``openai`` 3.x and ``anthropic``
2.x SDKs are built on). The two share an API, so the transports use the
request and response objects they are handed as they are; the one thing that
must come from the right library is the response-stream base class the
client checks with ``isinstance``, which :func:`_library` finds from the
request's own class (both libraries set ``__module__`` to their top name).

The response body is never buffered on the SDK's behalf: each chunk is fed to
the exchange (parsed on the fly for SSE) and handed on unchanged, so the SDK
receives the same bytes at the same moment as without the transport. The one
change made to a metered request (besides removing our ``x-ledger-*`` headers,
and the body changes a :class:`~ledger.instrument.meter.Meter` was asked for:
``sticky_key``, ``include_usage``) is its ``accept-encoding``, narrowed to the
codings the meter can decode (:data:`~ledger.instrument.meter.ACCEPT_ENCODING`), and,
on OpenRouter requests, ``X-OpenRouter-Metadata: enabled`` unless the request says
otherwise (``Meter(router_metadata=False)`` sends none; see
:mod:`ledger.providers.router_metadata`).

Cancellation is not a provider error: a request interrupted by
``asyncio.CancelledError`` or ``KeyboardInterrupt`` before its response arrived
records no row, exactly as the client records none for a cancelled call (a
stream the caller stops reading is still recorded, as closed early).
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import httpx

from ledger.instrument.context import HEADER_PREFIX, current, effective
from ledger.instrument.meter import ACCEPT_ENCODING, DECODABLE, RETRY_HEADER, Exchange, Meter
from ledger.providers.router_metadata import ENABLED as METADATA_ENABLED
from ledger.providers.router_metadata import HEADER as METADATA_HEADER
from ledger.providers.router_metadata import LEGACY_HEADER as LEGACY_METADATA_HEADER

_PREFIX_LEN = len(HEADER_PREFIX)


class _MeteredStream:
    """The response stream handed to the client: the inner one, observed."""

    def __init__(self, inner: Any, exchange: Exchange) -> None:
        self._inner = inner
        self._exchange = exchange

    def __iter__(self) -> Iterator[bytes]:
        exchange = self._exchange
        try:
            for chunk in self._inner:
                exchange.feed(chunk)  # before handing it on: a consumer may stop after it
                yield chunk
        except GeneratorExit:
            raise  # the consumer stopped reading; close() records
        except Exception as exc:
            exchange.finish(broken=exc)
            raise
        exchange.finish()

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            self._exchange.finish(early=True)


class _AsyncMeteredStream:
    def __init__(self, inner: Any, exchange: Exchange) -> None:
        self._inner = inner
        self._exchange = exchange

    async def __aiter__(self) -> AsyncIterator[bytes]:
        exchange = self._exchange
        try:
            async for chunk in self._inner:
                exchange.feed(chunk)
                yield chunk
        except GeneratorExit:
            raise
        except Exception as exc:
            exchange.finish(broken=exc)
            raise
        exchange.finish()

    async def aclose(self) -> None:
        try:
            await self._inner.aclose()
        finally:
            self._exchange.finish(early=True)


@dataclass(frozen=True, slots=True)
class _Library:
    """What a transport needs from httpx or httpx2."""

    sync_stream: type[_MeteredStream]
    async_stream: type[_AsyncMeteredStream]
    timeouts: tuple[type[BaseException], ...]


_libraries: dict[type, _Library] = {}


def _library(request_type: type) -> _Library:
    found = _libraries.get(request_type)
    if found is None:
        module = importlib.import_module(request_type.__module__.partition(".")[0])
        found = _Library(
            sync_stream=type("MeteredStream", (_MeteredStream, module.SyncByteStream), {}),
            async_stream=type(
                "AsyncMeteredStream", (_AsyncMeteredStream, module.AsyncByteStream), {}
            ),
            timeouts=(module.TimeoutException,),
        )
        _libraries[request_type] = found  # racing threads build equal values: harmless
    return found


def _pop_ledger_headers(request: Any) -> dict[str, str] | None:
    """Remove the ``x-ledger-*`` headers (they are ours, never the provider's); return them."""
    found: dict[str, str] | None = None
    for key, value in request.headers.raw:
        if key[:_PREFIX_LEN].lower() == HEADER_PREFIX:
            found = found if found is not None else {}
            found[key.decode("latin-1").lower()] = value.decode("utf-8", "replace")
    if found:
        for name in found:
            del request.headers[name]
    return found


class _Core:
    """What the sync and async transports share: everything before and after the I/O."""

    inner: Any
    meter: Meter

    def _begin(self, request: Any) -> tuple[Exchange | None, Any]:
        """The exchange for ``request`` (None: not ours) and the request to send."""
        found = _pop_ledger_headers(request)
        if request.method != "POST":
            return None, request
        url = request.url
        full = str(url)
        headers = request.headers
        meter = self.meter
        route = meter.route("POST", full, url.host, url.path, "anthropic-version" in headers)
        if route is None:
            return None, request
        try:
            ctx = effective(found)
        except ValueError as exc:
            meter.complain("headers", f"ignored unusable x-ledger headers: {exc}", exc)
            ctx = current()
        try:
            content = request.content
        except Exception:  # a streamed upload: no JSON chat body to read, so not ours
            return None, request
        timeouts = _library(type(request)).timeouts
        exchange, body = meter.begin(route, full, content, headers.get(RETRY_HEADER), ctx, timeouts)
        accepted = headers.get("accept-encoding")
        if accepted is not None and not _decodable(accepted):
            headers["accept-encoding"] = ACCEPT_ENCODING
        if (
            route.provider == "openrouter"
            and meter.router_metadata
            and METADATA_HEADER not in headers  # the caller's own choice, either name, stays
            and LEGACY_METADATA_HEADER not in headers
        ):
            headers[METADATA_HEADER] = METADATA_ENABLED
        if body is not None:
            request = _with_body(request, body)
        return exchange, request

    def _observe(self, exchange: Exchange, response: Any, stream_class: type) -> Any:
        exchange.respond(response.status_code, response.headers)
        # A response the inner transport has already read (MockTransport, a cache) is
        # never streamed by the client, which reads ``content`` instead: record it now.
        content = getattr(response, "_content", None)
        if isinstance(content, bytes):
            exchange.feed(content)
            exchange.finish()
            return response
        response.stream = stream_class(response.stream, exchange)
        return response


def _decodable(accepted: str) -> bool:
    codings = (c.split(";", 1)[0].strip().lower() for c in accepted.split(","))
    return all(c in DECODABLE or c in ("", "identity") for c in codings)


def _with_body(request: Any, body: bytes) -> Any:
    headers = request.headers.copy()
    headers["content-length"] = str(len(body))
    return type(request)(
        request.method, request.url, headers=headers, content=body, extensions=request.extensions
    )


class MeteringTransport(_Core, httpx.BaseTransport):
    """A sync transport (``httpx`` or ``httpx2``) that records every LLM attempt.

    ``inner`` is the transport that really sends (e.g. ``httpx2.HTTPTransport()``);
    the keyword options are :class:`~ledger.instrument.meter.Meter`'s.
    """

    def __init__(self, inner: Any, *, meter: Meter | None = None, **options: Any) -> None:
        self.inner = inner
        self.meter = meter if meter is not None else Meter(**options)

    def handle_request(self, request: Any) -> Any:
        exchange, request = self._begin(request)
        if exchange is None:
            return self.inner.handle_request(request)
        try:
            response = self.inner.handle_request(request)
        except Exception as exc:  # not BaseException: an interrupted call is no attempt
            exchange.failed(exc)
            raise
        return self._observe(exchange, response, _library(type(request)).sync_stream)

    def close(self) -> None:
        self.inner.close()


class AsyncMeteringTransport(_Core, httpx.AsyncBaseTransport):
    """The asynchronous :class:`MeteringTransport`."""

    def __init__(self, inner: Any, *, meter: Meter | None = None, **options: Any) -> None:
        self.inner = inner
        self.meter = meter if meter is not None else Meter(**options)

    async def handle_async_request(self, request: Any) -> Any:
        exchange, request = self._begin(request)
        if exchange is None:
            return await self.inner.handle_async_request(request)
        try:
            response = await self.inner.handle_async_request(request)
        except Exception as exc:  # CancelledError is a BaseException: no row, as the client
            exchange.failed(exc)
            raise
        return self._observe(exchange, response, _library(type(request)).async_stream)

    async def aclose(self) -> None:
        await self.inner.aclose()
