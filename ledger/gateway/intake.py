"""Reading a request's body with memory bounded per request and across requests.

Two limits, both checked before bytes are kept:

* ``max_body_bytes`` per request: a body that says (``Content-Length``) or turns out
  (chunked) to be larger is refused with 413, not buffered first;
* ``body_budget_bytes`` across requests: the bytes of the bodies in flight (read,
  parsed or still in use by their call). A request that would take the total past
  it is answered 503 with ``Retry-After`` before its body is read (the SDKs retry
  it), so a burst of large bodies cannot take the process's memory, and a small
  request still fits beside them. A body's bytes stay counted until its call ends:
  its parsed form is kept for the cascade's fallbacks until then.

A body that stops arriving for ``body_idle_timeout_s`` is answered 408 and its share
given back: a stalled client must not hold budget that others' bodies wait for.

The bytes refused are never read into memory: uvicorn discards the rest of a body
its application did not read once the answer is sent, and a client that sent
``Expect: 100-continue`` is answered before it sends the body at all.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any, Final

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]

#: A request body larger than this is refused (413) before it is read further.
MAX_BODY_BYTES: Final = 32 * 1024 * 1024
#: The bytes of request bodies in flight at once; beyond it, 503 with Retry-After. One
#: body at the cap and 16 MiB of others: each large body holds the event loop for a while
#: (decoded, re-encoded for the provider, written), so two at once double a small call's
#: worst wait (bench/bench_gateway_bodies.py); each also holds several times its size.
BODY_BUDGET_BYTES: Final = 48 * 1024 * 1024
#: Retry-After of a 503 for a full budget: large bodies in flight take about a second.
BUSY_RETRY_AFTER_S: Final = 1.0


class BodyTooLarge(Exception):
    """The request body is larger than the per-request cap (HTTP 413)."""


class BodyBudgetFull(Exception):
    """The bodies in flight leave no room for this one now (HTTP 503, Retry-After)."""


class BodyStalled(Exception):
    """No body bytes arrived for the idle timeout (HTTP 408)."""


class ClientGone(Exception):
    """The client disconnected before its request body arrived."""


class BodyBudget:
    """The bytes of the request bodies in flight in this process, against one limit.

    Single event loop, no awaits inside: plain integers are enough."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_flight = 0

    def take(self, size: int) -> None:
        """Count ``size`` more bytes, or raise :class:`BodyBudgetFull` without counting."""
        if self.in_flight + size > self.limit:
            raise BodyBudgetFull
        self.in_flight += size

    def give_back(self, size: int) -> None:
        self.in_flight -= size


class Reservation:
    """One request's share of a :class:`BodyBudget`; :meth:`release` when its call ends."""

    def __init__(self, budget: BodyBudget) -> None:
        self._budget = budget
        self.held = 0

    def grow(self, size: int) -> None:
        self._budget.take(size)
        self.held += size

    def release(self) -> None:
        self._budget.give_back(self.held)
        self.held = 0


def declared_length(headers: Mapping[bytes, bytes]) -> int | None:
    """The body's ``Content-Length`` (None: chunked, or absent). The HTTP parser has
    already refused a malformed one."""
    raw = headers.get(b"content-length")
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        return None


async def read_body(
    receive: Receive,
    headers: Mapping[bytes, bytes],
    reservation: Reservation,
    *,
    max_bytes: int,
    idle_timeout_s: float,
) -> bytearray:
    """The whole body, counted against ``max_bytes`` and ``reservation`` before it is read
    (the declared length) or as it arrives (chunked); :class:`BodyStalled` when nothing
    arrives for ``idle_timeout_s``."""
    declared = declared_length(headers)
    if declared is not None:
        if declared > max_bytes:
            raise BodyTooLarge
        reservation.grow(declared)
    body = bytearray()
    while True:
        try:
            # asyncio.timeout: a timer on this task (wait_for would wrap each chunk in a task)
            async with asyncio.timeout(idle_timeout_s):
                message = await receive()
        except TimeoutError:
            raise BodyStalled from None
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk = message.get("body", b"")
        if len(body) + len(chunk) > max_bytes:
            raise BodyTooLarge
        if len(body) + len(chunk) > reservation.held:
            reservation.grow(len(body) + len(chunk) - reservation.held)
        body += chunk
        if not message.get("more_body", False):
            return body
