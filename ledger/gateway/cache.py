"""The ADR-0016 response cache in front of the cascade, for whole answers and streams.

The key is :func:`ledger.resilience.keys.cache_key` of (the request body as
canonical JSON, the turn's locale, the public model), so two requests share an
answer only when they ask the same thing of the same model in the same
language; who asks (session, agent, gateway key) is not part of it, as in the
ADR ("ten visitors click the same example: compute it once").

:class:`~ledger.resilience.cache.ResponseCache` does the rest: TTL and bounds,
single flight (identical requests in flight wait for the first), the shared
Redis store for several workers, and never storing or serving a paused turn
(those bypass it entirely here) or a value that is not final (any answer but a
200, marked ``complete: false``). A hit, from the cache or from another caller's
flight, gets its own row (``attempt = 0``, ``response_cache_hit = true``, this
caller's identity, the original answer's provider, model and upstream).

Streams are cached too, without single flight. A miss is relayed live as it
arrives (the first byte is not delayed) while :class:`Capture` keeps a copy of
the bytes the client got; only a stream that ended normally (HTTP 200, its row
``ok``, no disconnect, at most :data:`MAX_STREAM_BYTES`) is stored. A hit replays
the stored events at once, as one body: the client receives the same SSE bytes,
its row says ``response_cache_hit`` with its own (short) latency, and no provider
is called, which is the ADR's "compute it once". Identical streams *in flight*
do not wait for each other (a follower would get nothing until the leader's
stream ended, and its disconnect could not cancel the leader's upstream call):
each computes its own until one is stored.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final

from ledger.events import Recorder
from ledger.gateway.config import Target
from ledger.gateway.inbound import Inbound
from ledger.gateway.relay import DISCONNECTED, Message, Outcome, Send
from ledger.resilience.cache import ResponseCache
from ledger.resilience.keys import cache_key
from ledger.resilience.recording import Origin, Turn, hit_event

log = logging.getLogger("ledger.gateway")

#: A cached answer: JSON values only, so the shared store never unpickles anything.
Answer = dict[str, Any]


def key_of(inbound: Inbound) -> str:
    """The cache key of a request (see the module docstring)."""
    text = json.dumps(inbound.body, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    wire = "responses" if inbound.responses is not None else inbound.wire  # answered apart
    return f"gw:{wire}:" + cache_key(text, inbound.identity.locale, inbound.model)


#: A stream longer than this is relayed but not stored (a cache entry is not a log).
MAX_STREAM_BYTES: Final = 1024 * 1024


def cacheable(inbound: Inbound) -> bool:
    return not inbound.identity.paused


class GatewayCache:
    """``await cache.answer(inbound, chain, compute)``: the answer, computed at most once."""

    def __init__(self, cache: ResponseCache[Answer], recorder: Recorder) -> None:
        self.cache = cache
        self.recorder = recorder

    async def answer(
        self, inbound: Inbound, chain: tuple[Target, ...], compute: Callable[[], Awaitable[Answer]]
    ) -> tuple[Answer, bool]:
        """The answer and whether it was a hit (its row then written here)."""
        started, t0 = dt.datetime.now(dt.UTC), time.perf_counter()
        served = await self.cache.aget_or_compute(key_of(inbound), compute)
        if served.hit:
            self._record_hit(inbound, chain, served.value, started, t0)
        return served.value, served.hit

    async def stored(self, inbound: Inbound, chain: tuple[Target, ...]) -> Answer | None:
        """A stored stream for this request (its hit row written), or None."""
        started, t0 = dt.datetime.now(dt.UTC), time.perf_counter()
        value = await self.cache.aget(key_of(inbound))
        if value is not None:
            self._record_hit(inbound, chain, value, started, t0)
        return value

    async def keep(self, inbound: Inbound, answer: Answer) -> None:
        """Store a stream that ended normally (``answer['complete']``)."""
        if answer["complete"]:
            await self.cache.aput(key_of(inbound), answer)

    def _record_hit(
        self,
        inbound: Inbound,
        chain: tuple[Target, ...],
        value: Answer,
        started: dt.datetime,
        t0: float,
    ) -> None:
        ident = inbound.identity
        turn = Turn(
            text="",  # the key is computed already; the row carries no text
            model=chain[0].model,
            requested_provider=chain[0].provider,
            locale=ident.locale,
            session_id=ident.session_id,
            actor_id=ident.actor_id,
            tags=dict(ident.tags) if ident.tags is not None else None,
        )
        origin = Origin(
            value.get("provider") or chain[0].provider, value.get("model"), value.get("upstream")
        )
        try:
            event = hit_event(
                turn, origin, started_at=started, latency_ms=(time.perf_counter() - t0) * 1000
            )
            if inbound.stream:
                event = event.replace(streamed=True)  # the replay went out as a stream
            self.recorder.record(event)
        except Exception:  # recording never breaks the answer (architecture.md)
            log.exception("gateway: the cache hit's row could not be recorded")


class Capture:
    """An ASGI ``send`` that keeps an answer: instead of sending it (a whole answer, for
    the cache to share), or while sending it on (``forward``: a live stream)."""

    def __init__(self, forward: Send | None = None, *, limit: int | None = None) -> None:
        self.forward = forward
        self.limit = limit
        self.status = 0
        self.headers: list[list[str]] = []
        self.body: list[bytes] = []
        self.size = 0

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            self.headers = [
                [k.decode("latin-1"), v.decode("latin-1")]
                for k, v in message.get("headers", [])
                if k != b"content-length"
            ]
            if self.forward is not None:
                headers = [*message.get("headers", []), (b"x-ledger-cache", b"miss")]
                message = {**message, "headers": headers}
        else:
            chunk = message.get("body", b"")
            self.size += len(chunk)
            if self.limit is None or self.size <= self.limit:
                self.body.append(chunk)
        if self.forward is not None:
            await self.forward(message)

    def answer(self, outcome: Outcome) -> Answer:
        body = b"".join(self.body)
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            text = body.decode("utf-8", "replace")
            final = False
        else:
            final = self.status == 200
        event = outcome.event
        if self.forward is not None:  # a live stream: kept only if it ended normally
            final = final and self.limit is not None and self.size <= self.limit
            final = final and event is not None and event.status == "ok"
            final = final and (event is not None and DISCONNECTED[0] not in (event.tags or {}))
        return {
            "status": self.status,
            "headers": self.headers,
            "body": text,
            "provider": event.provider if event is not None else None,
            "model": event.model if event is not None else None,
            "upstream": event.upstream if event is not None else None,
            "complete": final,  # anything but a 200 is computed afresh, never shared
        }
