"""The ADR-0016 response cache in front of the cascade, for whole (non-streamed) answers.

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

Streams are not cached: a stream is relayed as it arrives, and replaying a stored
one as a burst would misstate what the client measured (a documented limit).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ledger.attempt import Recorder
from ledger.gateway.config import Target
from ledger.gateway.inbound import Inbound
from ledger.gateway.relay import Message, Outcome
from ledger.resilience.cache import ResponseCache
from ledger.resilience.keys import cache_key
from ledger.resilience.recording import Origin, Turn, hit_event

log = logging.getLogger("ledger.gateway")

#: A cached answer: JSON values only, so the shared store never unpickles anything.
Answer = dict[str, Any]


def key_of(inbound: Inbound) -> str:
    """The cache key of a request (see the module docstring)."""
    text = json.dumps(inbound.body, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return f"gw:{inbound.wire}:" + cache_key(text, inbound.identity.locale, inbound.model)


def cacheable(inbound: Inbound) -> bool:
    return not inbound.stream and not inbound.identity.paused


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
            self.recorder.record(event)
        except Exception:  # recording never breaks the answer (architecture.md)
            log.exception("gateway: the cache hit's row could not be recorded")


class Capture:
    """An ASGI ``send`` that keeps a whole answer instead of sending it (for the cache)."""

    def __init__(self) -> None:
        self.status = 0
        self.headers: list[list[str]] = []
        self.body: list[bytes] = []

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            self.headers = [
                [k.decode("latin-1"), v.decode("latin-1")]
                for k, v in message.get("headers", [])
                if k != b"content-length"
            ]
        else:
            self.body.append(message.get("body", b""))

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
        return {
            "status": self.status,
            "headers": self.headers,
            "body": text,
            "provider": event.provider if event is not None else None,
            "model": event.model if event is not None else None,
            "upstream": event.upstream if event is not None else None,
            "complete": final,  # anything but a 200 is computed afresh, never shared
        }
