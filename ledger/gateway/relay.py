"""One call through a public model's chain: the ADR-0014 cascade, with bytes relayed.

The decisions are the cascade's own (:class:`ledger.cascade.Plan`: next route on
429, 5xx, transport failures and malformed answers; any other 4xx answered at
once). When every route failed, the answer is the one a provider would give
(:func:`ledger.gateway.answers.exhausted_response`: 429 when every route was
rate-limited, the routes' shared 5xx, else 503; the shortest upstream
``Retry-After``), so each SDK's own retries behave as against the provider. What
this module adds is the relay:

* a whole answer is read, recorded, and sent on (translated when the route's wire
  differs from the client's);
* a stream is *committed* to once it produces its first text, or at once when no
  route is left to fall back to (the last route's first byte goes to the client
  as soon as it arrives). Before that its bytes are held (at most
  :data:`MAX_HELD_BYTES`, then it commits anyway), so an error before the first
  token can still fall back, as :class:`~ledger.cascade.CascadeStream` does;
* after committing, each upstream chunk is sent before the next is read: the
  client's pace is the upstream's pace (``send`` waits while the client's socket
  buffer is full), nothing piles up here;
* the OpenAI usage chunk the gateway asked for on the client's behalf is removed
  when the client did not ask for it (``stream_options`` honoured);
* an upstream that breaks off a committed stream (its connection closed or reset,
  silent past the read timeout) is never passed on as a clean end: the client's SDK
  raises as it would against the provider (:func:`_broken_stream`).

Cancellation (the client went away) propagates from the ASGI app into here: the
upstream response is closed at once, which cancels the upstream request, and the
attempt's row is written with what was seen and the tag ``disconnected=client``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import random
import re
import time
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass, replace
from typing import Any, Final, Protocol

import httpx

from ledger.attempt import Filing, check_model
from ledger.cascade import Plan, RetryPolicy, Route
from ledger.errors import ProviderError
from ledger.events import UsageEvent
from ledger.gateway.answers import JSON, NO_STORE, SSE, error_response, exhausted_response
from ledger.gateway.config import Target, Wire
from ledger.gateway.inbound import BadRequest, Inbound
from ledger.gateway.responses import chat_to_response
from ledger.gateway.responses import dumps as dump_json
from ledger.gateway.responses_stream import ChatToResponses
from ledger.gateway.translate import (
    chat_to_message,
    chat_to_messages,
    message_to_chat,
    messages_to_chat,
    structured_output_tool,
)
from ledger.gateway.translate_stream import ChatToMessages, MessagesToChat
from ledger.gateway.upstream import UpstreamResponse, Upstreams
from ledger.instrument.meter import Exchange
from ledger.providers import PROVIDERS

Message = MutableMapping[str, Any]
Send = Callable[[Message], Awaitable[None]]

#: Bytes of an uncommitted stream held back before committing anyway (no unbounded buffer).
MAX_HELD_BYTES: Final = 64 * 1024
#: The tag written on the row of an attempt whose client went away.
DISCONNECTED: Final = ("disconnected", "client")
_USAGE_ONLY: Final = re.compile(rb'"choices"\s*:\s*\[\s*\]')
#: The Anthropic-wire event that ends a stream the upstream broke off (Anthropic's own shape
#: for a mid-stream failure; its SDKs raise on it).
BROKEN_EVENT: Final = (
    b"event: error\n"
    b'data: {"type":"error","error":{"type":"api_error",'
    b'"message":"the upstream connection broke off mid-stream"}}\n\n'
)


@dataclass(slots=True)
class Outcome:
    """What the access log says about a call: its id, status and the answering route."""

    call_id: str | None = None
    status: int = 0
    provider: str | None = None
    attempts: int = 0
    #: The answering attempt's row (its provider, model, upstream credit a cache hit).
    event: UsageEvent | None = None


def bodies_for(inbound: Inbound, chain: tuple[Target, ...]) -> list[Mapping[str, Any]]:
    """The request body for each route, translated where its wire differs; checked for
    every route before anything is sent, so an untranslatable feature is a 400 up front
    rather than a surprise when the primary first fails.

    The model the rows will name as requested is checked too (``BadRequest``): a name
    the ledger cannot record is refused before any provider is paid for it, as
    :meth:`ledger.attempt.Call.check` refuses it on the client."""
    try:
        check_model(chain[0].model)
    except ValueError as exc:
        raise BadRequest(f"'model' cannot be recorded: {exc}") from None
    out: list[Mapping[str, Any]] = []
    for target in chain:
        if target.wire == inbound.wire:
            out.append(inbound.body)
        elif inbound.wire == "chat":
            out.append(chat_to_messages(inbound.body, target.model))
        else:
            provider = PROVIDERS[target.provider]
            field = getattr(provider, "max_tokens_field", "max_tokens")
            out.append(messages_to_chat(inbound.body, target.model, field))
    return out


class _UsageStripper:
    """Drops the usage-only chunk (``"choices": []``) of an OpenAI stream, event by event."""

    def __init__(self) -> None:
        self._tail = b""

    def feed(self, data: bytes) -> bytes:
        data = self._tail + data
        cut = data.rfind(b"\n\n")
        if cut < 0:
            self._tail = data
            return b""
        self._tail = data[cut + 2 :]
        events = data[: cut + 2].split(b"\n\n")
        return b"".join(e + b"\n\n" for e in events if e and not _USAGE_ONLY.search(e))

    def close(self) -> bytes:
        tail, self._tail = self._tail, b""
        return b"" if _USAGE_ONLY.search(tail) else tail


class _WholeEvents:
    """Passes an SSE stream on unchanged, cut at event ends: the bytes after the last blank
    line wait for the rest of their event (a client acts on none of them before it).

    So a stream the upstream breaks off can still be ended by an ``error`` event the
    client reads as one (appended to half an event, it would be merged into it). An
    event larger than :data:`MAX_HELD_BYTES` is passed on in pieces all the same."""

    def __init__(self) -> None:
        self._tail = b""

    def feed(self, data: bytes) -> bytes:
        data = self._tail + data
        cut = max(
            _event_end(data, b"\n\n"), _event_end(data, b"\r\n\r\n"), _event_end(data, b"\r\r")
        )
        if cut == 0 and len(data) <= MAX_HELD_BYTES:
            self._tail = data
            return b""
        if cut == 0:
            cut = len(data)
        self._tail = data[cut:]
        return data[:cut]

    def close(self) -> bytes:
        tail, self._tail = self._tail, b""
        return tail


def _event_end(data: bytes, blank: bytes) -> int:
    """Where the last event ending in ``blank`` ends in ``data`` (0: none does)."""
    at = data.rfind(blank)
    return at + len(blank) if at >= 0 else 0


class _Passthrough:
    def feed(self, data: bytes) -> bytes:
        return data

    def close(self) -> bytes:
        return b""


class _Transform(Protocol):
    def feed(self, data: bytes) -> bytes: ...
    def close(self) -> bytes: ...


class _Then:
    """One stream transform, then another (an Anthropic stream re-told as chat, then as
    the Responses API's events)."""

    def __init__(self, first: _Transform, second: _Transform) -> None:
        self.first, self.second = first, second

    def feed(self, data: bytes) -> bytes:
        return self.second.feed(self.first.feed(data))

    def close(self) -> bytes:
        return self.second.feed(self.first.close()) + self.second.close()


class Caller:
    """Runs calls for the app: ``await caller.run(inbound, chain, send)``."""

    def __init__(self, upstreams: Upstreams, *, default_retry_after_s: float) -> None:
        self.upstreams = upstreams
        self.default_retry_after_s = default_retry_after_s
        self._rng = random.Random()  # the plan's jitter (unused with one try per route)

    async def run(
        self,
        inbound: Inbound,
        chain: tuple[Target, ...],
        bodies: list[Mapping[str, Any]],
        send: Send,
        outcome: Outcome,
    ) -> None:
        routes = tuple(Route(t.provider, t.model) for t in chain)
        plan = Plan(routes, RetryPolicy(), self.default_retry_after_s, self._rng, time.monotonic)
        outcome.call_id = plan.call_id
        first = chain[0]
        while (route := plan.next()) is not None:
            index = routes.index(route)
            target, body = chain[index], bodies[index]
            filing = Filing(plan.call_id, plan.attempt, first.provider, first.model)
            try:
                prep = self.upstreams.prepare(inbound, target, body, filing)
            except ValueError as refused:  # a value its row could not hold: nothing sent
                await _answer(send, *error_response(inbound.wire, 400, str(refused)), outcome)
                return
            guard = self.upstreams.guard
            if guard is not None:
                # BudgetExceeded: nothing sent
                await guard.abefore_send(prep, dt.datetime.now(dt.UTC))
            exchange = self.upstreams.exchange(prep, target.wire)
            outcome.attempts = plan.attempt
            last = index == len(routes) - 1
            error = await self._attempt(inbound, target, exchange, send, last, outcome)
            if error is None:
                outcome.provider, outcome.event = target.provider, exchange.event
                return
            try:
                delay = plan.failed(error)
            except ProviderError:
                await self._refuse(inbound.wire, error, send, outcome)
                return
            if delay:
                await asyncio.sleep(delay)
        status, headers, payload = exhausted_response(
            inbound.wire,
            plan.errors,
            call_id=plan.call_id,
            locale=inbound.identity.locale,
            default_retry_after_s=self.default_retry_after_s,
        )
        await _answer(send, status, headers, payload, outcome)

    async def _refuse(self, wire: Wire, error: ProviderError, send: Send, outcome: Outcome) -> None:
        status = error.http_status if error.http_status and error.http_status >= 400 else 502
        answer = error_response(
            wire, status, str(error), code=error.code, retry_after=error.retry_after
        )
        await _answer(send, *answer, outcome)

    async def _attempt(
        self,
        inbound: Inbound,
        target: Target,
        exchange: Exchange,
        send: Send,
        last: bool,
        outcome: Outcome,
    ) -> ProviderError | None:
        """One attempt; None once the client has its answer, else the attempt's error."""
        response: UpstreamResponse | None = None
        try:
            response = await self.upstreams.send(exchange.prep, exchange)
            if response is None:
                return exchange.error
            if not inbound.stream or not 200 <= response.status_code < 300:
                return await self._whole(inbound, target, exchange, response, send, last, outcome)
            return await self._stream(inbound, target, exchange, response, send, last, outcome)
        except asyncio.CancelledError:
            _disconnected(exchange)
            raise
        finally:
            if response is not None:
                await response.aclose()

    async def _whole(
        self,
        inbound: Inbound,
        target: Target,
        exchange: Exchange,
        response: UpstreamResponse,
        send: Send,
        last: bool,
        outcome: Outcome,
    ) -> ProviderError | None:
        try:
            body = await response.aread()
        except httpx.HTTPError as exc:
            exchange.finish(broken=exc)
            return exchange.error
        exchange.feed(body)
        passthrough = target.wire == inbound.wire and inbound.responses is None
        if last and passthrough and 200 <= response.status_code < 300:
            # Nothing left to fall back to: the client gets the provider's answer first and
            # the row (parse, price, journal) is written after, off the client's latency.
            await _answer(send, response.status_code, [JSON, *_call_header(outcome)], body, outcome)
            exchange.finish()
            return None
        exchange.finish()
        if exchange.error is not None:
            return exchange.error
        if not passthrough:
            data = json.loads(body)
            if target.wire != inbound.wire:
                data = (
                    message_to_chat(data, structured_output_tool(inbound.body))
                    if inbound.wire == "chat"
                    else chat_to_message(data)
                )
            if inbound.responses is not None:
                data = chat_to_response(data, inbound.responses)
            body = dump_json(data)
        headers = [JSON, *_call_header(outcome)]
        await _answer(send, response.status_code, headers, body, outcome)
        return None

    async def _stream(
        self,
        inbound: Inbound,
        target: Target,
        exchange: Exchange,
        response: UpstreamResponse,
        send: Send,
        last: bool,
        outcome: Outcome,
    ) -> ProviderError | None:
        transform: _Transform
        if inbound.responses is not None:
            transform = _Then(
                MessagesToChat(include_usage=True, structured=structured_output_tool(inbound.body))
                if target.wire == "messages"
                else _Passthrough(),
                ChatToResponses(inbound.responses),
            )
        elif target.wire != inbound.wire and inbound.wire == "chat":
            transform = MessagesToChat(
                include_usage=inbound.include_usage,
                structured=structured_output_tool(inbound.body),
            )
        elif target.wire != inbound.wire:
            transform = ChatToMessages()
        elif inbound.wire == "chat" and not inbound.include_usage:
            transform = _UsageStripper()
        elif inbound.wire == "messages":
            transform = _WholeEvents()  # a break can still end it with an error event
        else:
            transform = _Passthrough()
        held: list[bytes] = []
        held_bytes = 0
        committed = last
        if committed:
            await _start_stream(send, response.status_code, outcome)
        try:
            async for raw in response.aiter_raw():
                exchange.feed(raw)
                out = transform.feed(raw)
                if not committed:
                    parser = exchange.parser
                    if parser is not None and parser.error is not None:
                        break  # an error before the first token: fall back if transient
                    held.append(out)
                    held_bytes += len(out)
                    if exchange.ttft is None and held_bytes < MAX_HELD_BYTES:
                        continue
                    committed = True
                    await _start_stream(send, response.status_code, outcome)
                    out, held = b"".join(held), []
                if out:
                    await send({"type": "http.response.body", "body": out, "more_body": True})
        except httpx.HTTPError as exc:
            exchange.finish(broken=exc)
            if not committed:
                return exchange.error
            await _broken_stream(send, inbound.wire)
            return None
        exchange.finish()
        if not committed:
            if exchange.error is not None:
                return exchange.error
            await _start_stream(send, response.status_code, outcome)
        await _end_stream(send, b"".join(held) + transform.close())
        return None


def _call_header(outcome: Outcome) -> list[tuple[bytes, bytes]]:
    return [(b"x-ledger-call-id", outcome.call_id.encode())] if outcome.call_id else []


async def _answer(
    send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes, outcome: Outcome
) -> None:
    outcome.status = status
    headers = [*headers, (b"content-length", str(len(body)).encode())]
    if not any(k == b"x-ledger-call-id" for k, _ in headers):
        headers += _call_header(outcome)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _start_stream(send: Send, status: int, outcome: Outcome) -> None:
    outcome.status = status
    headers = [SSE, NO_STORE, (b"x-accel-buffering", b"no"), *_call_header(outcome)]
    await send({"type": "http.response.start", "status": status, "headers": headers})


async def _end_stream(send: Send, tail: bytes) -> None:
    await send({"type": "http.response.body", "body": tail, "more_body": False})


async def _broken_stream(send: Send, wire: Wire) -> None:
    """The upstream broke off a committed stream: tell the client as its wire does, so its
    SDK raises as it would against the provider itself (a clean end would read as a whole
    answer: partial text, no exception).

    The translator's tail is not sent: it would close the answer as if complete (a
    ``finish_reason``, ``[DONE]``, ``message_stop``). On the Anthropic wire an ``error``
    event, as Anthropic sends one mid-stream, then the stream's end. On the OpenAI wire,
    which has no error event after the first chunk's status, the response is left
    unfinished: the ASGI server closes the connection without the last chunk of the
    chunked body, so the client's HTTP library sees it broken (the SDKs raise
    ``APIConnectionError``), exactly what a dropped upstream connection looks like."""
    if wire == "messages":
        await _end_stream(send, BROKEN_EVENT)
    # OpenAI wire: return without the closing ``more_body: False``.


def _disconnected(exchange: Exchange) -> None:
    """The client went away: the attempt's row says so, with what was seen so far.

    Nothing is recorded for an attempt whose response had not begun (no status yet),
    as the metering transport and the client do for a cancelled call."""
    if exchange.finished or exchange.status is None:
        return
    call = exchange.prep.call
    exchange.prep.call = replace(call, tags={**(call.tags or {}), DISCONNECTED[0]: DISCONNECTED[1]})
    exchange.finish(early=True)
