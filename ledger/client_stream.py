"""Streamed attempts: iterate text as it arrives; the row is recorded when the stream
ends, fails, or the caller stops reading early.

:class:`_StreamCore` is the I/O-free half shared by the sync and async streams.

A caller that stops reading early still gets its row, with or without ``with``:
``close()`` records it, and so does dropping the stream (``for text in stream:
break``), through ``__del__``. Stopped before the stream's own end (``[DONE]``,
``message_stop``…), the row is an ``error`` of type ``abandoned`` with the
usage seen so far and ``usage_reported`` false: partial counts are never a
served attempt's usage. Stopped after it, nothing was left unread: ``ok``.
Nothing references a stream back, so CPython drops it (and records) as soon as
the caller's last reference goes. The async stream
cannot await in ``__del__``: it records the row at once and schedules the
response's ``aclose()`` on the running event loop; with no loop running (the
loop already closed) the connection is left to the pool's own cleanup.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections import deque
from collections.abc import AsyncIterator, Iterator
from typing import Any, NoReturn, Protocol, Self

import httpx

from ledger.attempt import ChatResult, Prepared, http_failure, in_band_failure, result_of
from ledger.clock import Clock
from ledger.errors import ProviderError, StreamInterrupted, map_transport_errors
from ledger.events import UsageEvent
from ledger.providers.base import Parsed, StreamParser


class StreamOwner(Protocol):
    """What a stream needs from the client that opened it, and nothing more: its
    clock, strictness and timeouts, and how it records (and raises) an attempt.
    The client implements it; the stream never imports the client."""

    clock: Clock
    strict: bool

    def timeout_for(self, prep: Prepared) -> Any: ...

    def begin_attempt(self, prep: Prepared) -> None: ...

    def attempt_event(
        self,
        prep: Prepared,
        latency: float | None,
        ttft: float | None,
        parsed: Parsed | None,
        error: ProviderError | None,
        status: int | None,
        *,
        streamed: bool,
        abandoned: bool = False,
        cut_short: bool = False,
    ) -> UsageEvent: ...

    def raise_failure(
        self,
        prep: Prepared,
        exc: ProviderError,
        latency: float | None,
        parsed: Parsed | None,
        status: int | None,
        *,
        streamed: bool = False,
    ) -> NoReturn: ...


class SyncStreamOwner(StreamOwner, Protocol):
    @property
    def http(self) -> httpx.Client: ...


class AsyncStreamOwner(StreamOwner, Protocol):
    @property
    def http(self) -> httpx.AsyncClient: ...


log = logging.getLogger("ledger.client")


@functools.lru_cache(maxsize=256)
def request_url(url: str) -> httpx.URL:
    """``url`` parsed once: a client sends to a handful of URLs again and again, and httpx
    parses a ``str`` URL on every request (about half of its own request building); an
    ``httpx.URL`` it takes as is. The clients and the streams send through this."""
    return httpx.URL(url)


def _encoded(response: httpx.Response) -> bool:
    """The body needs ``iter_bytes``: it has a content encoding to undo (or was already
    read). Otherwise ``iter_raw`` yields the very same chunks without the decoding
    layer, a generator and a decoder call per chunk that undo nothing (``iter_bytes``
    over ``iter_raw``, for an identity decoder and no chunk size)."""
    return "content-encoding" in response.headers or response.is_stream_consumed


#: Response closes scheduled by abandoned async streams (a task needs a strong reference).
_closing: set[asyncio.Task[None]] = set()


class _StreamCore:
    """The I/O-free half of a stream: feed bytes, collect deltas, finish into a row."""

    def __init__(self, owner: StreamOwner, prep: Prepared) -> None:
        self.owner = owner
        self.prep = prep
        self.parser: StreamParser = prep.target.provider.stream_parser()
        #: The provider's name, read once: every chunk read is mapped under it.
        self.provider_name = prep.target.provider.name
        self.pending: deque[str] = deque()
        self.t0 = 0.0  # set when the request is sent
        self.ttft: float | None = None
        self.status: int | None = None
        self.delivered = False
        self.finished = False
        self.event: UsageEvent | None = None
        #: What :attr:`result` is built from, once the stream ended well.
        self._ended: tuple[Parsed, float] | None = None
        self._result: ChatResult | None = None

    @property
    def result(self) -> ChatResult | None:
        """The result of a stream that ended well, built when first asked for: most
        callers of a stream read its text and never look."""
        if self._result is None and self._ended is not None and self.event is not None:
            parsed, latency = self._ended
            self._result = result_of(
                self.prep, parsed, self.event, latency_ms=latency, ttft_ms=self.ttft
            )
        return self._result

    def broken_by(self, exc: httpx.RequestError) -> ProviderError:
        """Our error for a chunk read that failed, as ``map_transport_errors`` raises it:
        a stream reads chunk after chunk, so it catches httpx's error itself instead of
        entering the context manager for each one."""
        error = map_transport_errors(self.provider_name).error_for(exc)
        error.__cause__ = exc
        return error

    def elapsed_ms(self) -> float:
        return (self.owner.clock.monotonic() - self.t0) * 1000.0

    def feed(self, chunk: bytes) -> bool:
        """Parse ``chunk``; True once the parser has seen an in-band error (the end)."""
        parser = self.parser
        try:
            deltas = parser.feed(chunk)
        except Exception:
            if self.owner.strict:
                raise
            log.exception("ledger: %s stream parser failed", self.prep.target.provider.name)
            return parser.error is not None
        if deltas:
            if self.ttft is None:
                self.ttft = self.elapsed_ms()
            self.pending.extend(deltas)
        return parser.error is not None

    def next_delta(self) -> str:
        self.delivered = True
        return self.pending.popleft()

    def finish(self, *, broken: ProviderError | None = None, early: bool = False) -> None:
        """Record the row; raise the in-band (or broken-connection) error, if any.

        ``early``: the caller stopped reading before the body ended."""
        if self.finished:
            return
        self.finished = True
        try:
            parsed = self.parser.finish()
        except Exception as exc:
            if self.owner.strict:
                raise
            log.exception("ledger: %s stream parser failed", self.prep.target.provider.name)
            parsed = Parsed(problems=(f"parser bug: {type(exc).__name__}",))
        latency = self.elapsed_ms()
        provider = self.prep.target.provider
        error: ProviderError | None = None
        if parsed.error is not None:
            error = in_band_failure(
                provider,
                parsed.error,
                http_status=self.status or 200,
                streamed=True,
                delivered=self.delivered,
            )
        elif broken is not None:
            error = StreamInterrupted(
                f"{provider.name} stream broke: {broken}",
                provider=provider.name,
                http_status=self.status,
                transient=True,
                delivered=self.delivered,
            )
        abandoned = early and error is None and not self.parser.done
        self.event = self.owner.attempt_event(
            self.prep,
            latency,
            self.ttft,
            parsed,
            error,
            self.status,
            streamed=True,
            abandoned=abandoned,
            cut_short=broken is not None or abandoned,
        )
        if error is not None:
            raise error from broken
        self._ended = (parsed, latency)


class ChatStream:
    """A streamed attempt: iterate for text as it arrives; ``result`` once it ends.

    Use it as a context manager: leaving early still records the attempt's row
    (status ``error``, ``error_type`` ``abandoned``, the usage seen so far, not
    reported: see the module docstring).
    """

    def __init__(self, client: SyncStreamOwner, prep: Prepared) -> None:
        self._client = client
        self._core = _StreamCore(client, prep)
        self._response: httpx.Response | None = None
        self._raw: Iterator[bytes] | None = None

    @property
    def result(self) -> ChatResult | None:
        return self._core.result

    @property
    def event(self) -> UsageEvent | None:
        return self._core.event

    def _open(self) -> None:
        core = self._core
        prep = core.prep
        name = prep.target.provider.name
        request = self._client.http.build_request(
            prep.method,
            request_url(prep.url),
            headers=prep.headers,
            content=prep.content,
            timeout=self._client.timeout_for(prep),
        )
        prep.started_at = self._client.clock.now()
        self._client.begin_attempt(prep)
        core.t0 = self._client.clock.monotonic()
        try:
            with map_transport_errors(name):
                self._response = self._client.http.send(request, stream=True)
                core.status = self._response.status_code
                if not 200 <= core.status < 300:
                    body = self._response.read()
        except ProviderError as exc:
            core.finished = True
            self._client.raise_failure(prep, exc, core.elapsed_ms(), None, None, streamed=True)
        assert self._response is not None
        if not 200 <= core.status < 300:
            core.finished = True
            self._response.close()
            error = http_failure(
                prep.target.provider,
                core.status,
                prep.target.provider.parse_error(core.status, body),
                self._response.headers,
            )
            self._client.raise_failure(
                prep, error, core.elapsed_ms(), None, core.status, streamed=True
            )
        response = self._response
        self._raw = response.iter_bytes() if _encoded(response) else response.iter_raw()

    def __enter__(self) -> Self:
        if self._response is None:
            self._open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> str:
        core = self._core
        if core.pending:  # the usual step: text already parsed (so the stream is open)
            core.delivered = True
            return core.pending.popleft()
        if self._response is None:
            self._open()
        while not core.pending:
            if core.finished:
                raise StopIteration
            self._pull()
        return core.next_delta()

    def _pull(self) -> None:
        core = self._core
        assert self._raw is not None
        try:
            chunk = next(self._raw, None)
        except httpx.RequestError as exc:  # what map_transport_errors maps (not entered per chunk)
            self._end(broken=core.broken_by(exc))
            return
        if chunk is None or core.feed(chunk):
            self._end()

    def _end(self, *, broken: ProviderError | None = None, early: bool = False) -> None:
        if self._response is not None:
            self._response.close()
        self._core.finish(broken=broken, early=early)

    def close(self) -> None:
        """Stop reading; the attempt is recorded with what was seen (nothing when the
        request was never sent)."""
        core = self._core
        if core.finished:
            return
        if self._response is None:
            core.finished = True  # never opened: nothing was sent, so there is no attempt
            return
        self._end(early=True)

    def abandon(self) -> None:
        """:meth:`close`, for a caller who is gone: an in-band error found while
        flushing is recorded on the row but not raised (no one is left to catch it)."""
        with contextlib.suppress(ProviderError):
            self.close()

    def __del__(self) -> None:
        # ``for text in client.stream(...): break`` without ``with``: record the row and
        # release the connection when the caller drops the stream.
        core: _StreamCore | None = getattr(self, "_core", None)
        if core is not None and not core.finished:
            self.abandon()


class AsyncChatStream:
    """The asynchronous :class:`ChatStream`: ``async for text in stream``."""

    def __init__(self, client: AsyncStreamOwner, prep: Prepared) -> None:
        self._client = client
        self._core = _StreamCore(client, prep)
        self._response: httpx.Response | None = None
        self._raw: AsyncIterator[bytes] | None = None

    @property
    def result(self) -> ChatResult | None:
        return self._core.result

    @property
    def event(self) -> UsageEvent | None:
        return self._core.event

    async def _open(self) -> None:
        core = self._core
        prep = core.prep
        request = self._client.http.build_request(
            prep.method,
            request_url(prep.url),
            headers=prep.headers,
            content=prep.content,
            timeout=self._client.timeout_for(prep),
        )
        prep.started_at = self._client.clock.now()
        self._client.begin_attempt(prep)
        core.t0 = self._client.clock.monotonic()
        try:
            with map_transport_errors(prep.target.provider.name):
                self._response = await self._client.http.send(request, stream=True)
                core.status = self._response.status_code
                if not 200 <= core.status < 300:
                    body = await self._response.aread()
        except ProviderError as exc:
            core.finished = True
            self._client.raise_failure(prep, exc, core.elapsed_ms(), None, None, streamed=True)
        assert self._response is not None
        if not 200 <= core.status < 300:
            core.finished = True
            await self._response.aclose()
            error = http_failure(
                prep.target.provider,
                core.status,
                prep.target.provider.parse_error(core.status, body),
                self._response.headers,
            )
            self._client.raise_failure(
                prep, error, core.elapsed_ms(), None, core.status, streamed=True
            )
        response = self._response
        self._raw = response.aiter_bytes() if _encoded(response) else response.aiter_raw()

    async def __aenter__(self) -> Self:
        if self._response is None:
            await self._open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> str:
        core = self._core
        if core.pending:  # the usual step: text already parsed (so the stream is open)
            core.delivered = True
            return core.pending.popleft()
        if self._response is None:
            await self._open()
        while not core.pending:
            if core.finished:
                raise StopAsyncIteration
            await self._pull()
        return core.next_delta()

    async def _pull(self) -> None:
        core = self._core
        assert self._raw is not None
        try:
            chunk = await anext(self._raw, None)
        except httpx.RequestError as exc:  # what map_transport_errors maps (not entered per chunk)
            await self._end(broken=core.broken_by(exc))
            return
        if chunk is None or core.feed(chunk):
            await self._end()

    async def _end(self, *, broken: ProviderError | None = None, early: bool = False) -> None:
        if self._response is not None:
            await self._response.aclose()
        self._core.finish(broken=broken, early=early)

    async def aclose(self) -> None:
        """Stop reading; the attempt is recorded with what was seen (nothing when the
        request was never sent)."""
        core = self._core
        if core.finished:
            return
        if self._response is None:
            core.finished = True
            return
        await self._end(early=True)

    def __del__(self) -> None:
        # ``async for … : break`` without ``async with``: a finaliser cannot await, so the
        # row is recorded now (it is synchronous) and the response closed by a task.
        core: _StreamCore | None = getattr(self, "_core", None)
        if core is None or core.finished or self._response is None:
            return
        _schedule_close(self._response)
        with contextlib.suppress(ProviderError):  # recorded on the row; no one left to raise to
            core.finish(early=True)


def _schedule_close(response: Any) -> None:
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return  # no loop to run aclose() on: the pool reclaims the connection when closed
    task = loop.create_task(response.aclose())
    _closing.add(task)
    task.add_done_callback(_closing.discard)
