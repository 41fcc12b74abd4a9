"""A lean pooled HTTP/1.1 client for the gateway's upstream calls (asyncio + httptools).

Why not httpx here: the gateway's target is to add at most 1 ms to a call, and on a
loopback upstream httpx's layers (client, auth and redirect hooks, cookie jar, URL
re-parsing, httpcore's pool, h11's pure-Python parser) cost more CPU per request
than everything else the gateway does. This client does only what a relay needs:
keep-alive connections per origin, one request at a time per connection, the
response head parsed by ``httptools`` (the C parser uvicorn uses), the body handed
on chunk by chunk as it arrives, reading paused while the consumer lags (no
unbounded buffer).

Failures are raised as httpx's exception classes (``ConnectError``,
``ConnectTimeout``, ``ReadTimeout``, ``ReadError``, ``RemoteProtocolError``,
``WriteError``) so the relay and the meter classify them exactly as they classify
httpx's (a timeout is a timeout row, anything else a transport failure).

Not handled, so :class:`~ledger.gateway.upstream.Upstreams` keeps httpx for it: a
proxy from the environment (``HTTPS_PROXY`` and friends).
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Final, cast
from urllib.parse import urlsplit

import httptools
import httpx

#: Upstream bytes queued for a consumer that lags before the socket stops being read.
HIGH_WATER_BYTES: Final = 256 * 1024
USER_AGENT: Final = b"ledger-gateway"
#: Headers the pool writes itself; a caller's copy of them is not sent.
_OURS: Final = frozenset({"host", "content-length", "transfer-encoding", "connection"})


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Seconds: to connect, and to wait for the response's head or its next bytes."""

    connect: float
    read: float


class _Connection(asyncio.Protocol):
    """One keep-alive connection; the parser's callbacks fill the current response."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.lost = False
        self._raw_headers: list[tuple[bytes, bytes]] = []
        self.head: asyncio.Future[None] | None = None
        self.chunks: deque[bytes] = deque()
        self.queued = 0
        self.complete = False
        self.failure: httpx.HTTPError | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.paused = False
        self.status = 0
        self.keep_alive = True

    # -- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but have its methods.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(httpx.RemoteProtocolError("upstream switched protocols"))
        except httptools.HttpParserError as exc:
            self._fail(httpx.RemoteProtocolError(f"malformed upstream response ({exc})"))

    def eof_received(self) -> bool | None:
        return False  # close the transport; connection_lost says the rest

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self.head is None and not self.chunks and self.complete:
            return  # an idle connection closed by the server: the pool drops it
        if not self.complete and self.failure is None:
            what = type(exc).__name__ if exc is not None else "closed"
            if self.head is not None and not self.head.done():
                self._fail(httpx.RemoteProtocolError(f"upstream closed before answering ({what})"))
            else:
                self._fail(httpx.ReadError(f"upstream closed mid-body ({what})"))
        self._wake()

    # -- httptools callbacks ------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self._raw_headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.keep_alive = self.parser.should_keep_alive()
        if self.head is not None and not self.head.done():
            self.head.set_result(None)

    def on_body(self, body: bytes) -> None:
        self.chunks.append(bytes(body))
        self.queued += len(body)
        if self.queued > HIGH_WATER_BYTES and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        self.complete = True
        self._wake()

    # -- the response side --------------------------------------------------------------

    def _fail(self, error: httpx.HTTPError) -> None:
        self.failure = error
        self.keep_alive = False
        if self.head is not None and not self.head.done():
            self.head.set_exception(error)
        self._wake()
        if self.transport is not None:
            self.transport.close()

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def start(self, request: bytes) -> None:
        """Send one request; the response's state is reset for it."""
        assert self.transport is not None
        self._raw_headers = []
        self.chunks.clear()
        self.queued = 0
        self.complete = False
        self.head = self.loop.create_future()
        self.transport.write(request)

    async def wait_head(self, timeout_s: float) -> None:
        """Until the response's status line and headers are in."""
        assert self.head is not None
        timer = self.loop.call_later(timeout_s, _expire, self.head)
        try:
            await self.head
        finally:
            timer.cancel()

    def headers(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for name, value in self._raw_headers:
            key = name.decode("latin-1").lower()
            text = value.decode("latin-1")
            out[key] = f"{out[key]}, {text}" if key in out else text
        return out

    async def next_chunk(self, timeout_s: float) -> bytes | None:
        """The next body chunk; None at the body's end."""
        while not self.chunks:
            if self.failure is not None:
                raise self.failure
            if self.complete:
                return None
            if self.lost:
                raise httpx.ReadError("upstream closed mid-body")
            waiter = self.waiter = self.loop.create_future()
            timer = self.loop.call_later(timeout_s, _expire, waiter)
            try:
                await waiter
            finally:
                timer.cancel()
                self.waiter = None
        chunk = self.chunks.popleft()
        self.queued -= len(chunk)
        if self.paused and self.queued <= HIGH_WATER_BYTES // 2 and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()
        return chunk

    @property
    def reusable(self) -> bool:
        return self.keep_alive and self.complete and not self.lost and self.failure is None


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(httpx.ReadTimeout("no upstream bytes within the read timeout"))


class Http1Response:
    """A response whose body has not been read yet (the shape the relay reads)."""

    def __init__(self, pool: Http1Pool, origin: _Origin, conn: _Connection) -> None:
        self._pool, self._origin, self._conn = pool, origin, conn
        self.status_code = conn.status
        self.headers: Mapping[str, str] = conn.headers()
        self._closed = False

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        """The body as it arrives (identity coding is asked for, so raw = decoded)."""
        while (chunk := await self._conn.next_chunk(self._pool.timeouts.read)) is not None:
            yield chunk

    async def aread(self) -> bytes:
        return b"".join([chunk async for chunk in self.aiter_raw()])

    async def aclose(self) -> None:
        """Give the connection back when its response was read to the end, else close it
        (closing is how an unfinished upstream request is cancelled)."""
        if self._closed:
            return
        self._closed = True
        self._pool.release(self._origin, self._conn)


@dataclass(frozen=True, slots=True)
class _Origin:
    scheme: str
    host: str
    port: int


class Http1Pool:
    """Keep-alive connections per origin; ``send`` returns once the response head is in."""

    def __init__(
        self,
        timeouts: Timeouts,
        *,
        max_connections: int = 1000,
        max_idle_per_origin: int = 200,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.timeouts = timeouts
        self._idle: dict[_Origin, list[_Connection]] = {}
        self._slots = asyncio.Semaphore(max_connections)
        self._max_idle = max_idle_per_origin
        self._ssl = ssl_context
        self._targets: dict[str, tuple[_Origin, bytes]] = {}

    async def send(
        self, method: str, url: str, headers: Mapping[str, str], content: bytes
    ) -> Http1Response:
        origin, head = self._target(url)
        lines = [method.encode(), b" ", head]
        for name, value in headers.items():
            if name.lower() in _OURS:
                continue  # framing is this client's to state, once
            lines += [name.encode("latin-1"), b": ", value.encode("latin-1"), b"\r\n"]
        lines += [b"content-length: ", str(len(content)).encode(), b"\r\n\r\n", content]
        await self._slots.acquire()
        conn: _Connection | None = None
        try:
            conn = self._idle_connection(origin) or await self._connect(origin)
            conn.start(b"".join(lines))
            await conn.wait_head(self.timeouts.read)
        except BaseException:
            self._slots.release()
            if conn is not None:
                _close(conn)
            raise
        return Http1Response(self, origin, conn)

    def release(self, origin: _Origin, conn: _Connection) -> None:
        self._slots.release()
        idle = self._idle.setdefault(origin, [])
        if conn.reusable and len(idle) < self._max_idle:
            idle.append(conn)
        else:
            _close(conn)

    def _target(self, url: str) -> tuple[_Origin, bytes]:
        """The origin and the request line's tail (target, version, fixed headers)."""
        found = self._targets.get(url)
        if found is None:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise httpx.UnsupportedProtocol(f"cannot send to {parts.scheme}://")
            port = parts.port or (443 if parts.scheme == "https" else 80)
            origin = _Origin(parts.scheme, parts.hostname, port)
            path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            default = port == (443 if parts.scheme == "https" else 80)
            host = parts.hostname if default else f"{parts.hostname}:{port}"
            if ":" in parts.hostname and not default:
                host = f"[{parts.hostname}]:{port}"
            head = (
                f"{path} HTTP/1.1\r\nhost: {host}\r\naccept: */*\r\n"
                f"user-agent: {USER_AGENT.decode()}\r\n"
            ).encode("ascii")
            found = (origin, head)
            if len(self._targets) < 1024:
                self._targets[url] = found
        return found

    def _idle_connection(self, origin: _Origin) -> _Connection | None:
        idle = self._idle.get(origin)
        while idle:
            conn = idle.pop()
            if not conn.lost and conn.transport is not None and not conn.transport.is_closing():
                return conn
        return None

    async def _connect(self, origin: _Origin) -> _Connection:
        loop = asyncio.get_running_loop()
        context: ssl.SSLContext | None = None
        if origin.scheme == "https":
            context = self._ssl = self._ssl or httpx.create_ssl_context()
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(
                    lambda: _Connection(loop),
                    origin.host,
                    origin.port,
                    ssl=context,
                    server_hostname=origin.host if context is not None else None,
                ),
                self.timeouts.connect,
            )
        except TimeoutError:
            raise httpx.ConnectTimeout(f"connecting to {origin.host}:{origin.port}") from None
        except OSError as exc:
            raise httpx.ConnectError(f"connecting to {origin.host}:{origin.port}: {exc}") from None
        # asyncio and uvloop set TCP_NODELAY on TCP transports: the one write of head and
        # body is not held back by Nagle.
        return conn

    async def aclose(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                _close(conn)
        self._idle.clear()


def _close(conn: _Connection) -> None:
    if conn.transport is not None and not conn.transport.is_closing():
        conn.transport.close()
