"""How long and how much a billing endpoint may take: a run's deadline and a body's cap.

httpx's timeouts bound each network operation, not a request: a server sending a
byte every few seconds never trips a read timeout, and a body is buffered whole
whatever its size. A reconcile reads every body through here instead, a chunk at
a time, so a request ends at its own timeout or the run's deadline (whichever is
first) and a body stops being read at its cap, before any of it is parsed.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Final

from ledger.errors import ReconcileDeadline, ResponseTooLarge

MIB: Final = 1 << 20


@dataclass(frozen=True, slots=True)
class Deadline:
    """A point on the monotonic clock a run must not outlive; ``None`` never passes."""

    at: float | None
    seconds: float | None = None  # as the user gave it, for the message

    @classmethod
    def after(cls, seconds: float | None) -> Deadline:
        return cls(None if seconds is None else time.monotonic() + seconds, seconds)

    def remaining(self) -> float | None:
        return None if self.at is None else max(0.0, self.at - time.monotonic())

    @property
    def passed(self) -> bool:
        return self.at is not None and time.monotonic() >= self.at

    def budget(self, timeout: float) -> float:
        """A request's time: its own timeout, or what is left of the run if that is less."""
        left = self.remaining()
        return timeout if left is None else min(timeout, left)

    def error(self, what: str) -> ReconcileDeadline:
        return ReconcileDeadline(
            f"{what}: the run's --deadline ({self.seconds or 0:g} s) passed before the bill "
            "was read; raise --deadline or narrow --since/--until"
        )


class RequestTimedOut(Exception):
    """One request took longer than its budget (a trickled body included): retried."""


def _too_large(what: str, cap: int) -> ResponseTooLarge:
    return ResponseTooLarge(f"{what}: the response is larger than {cap // 1024:,} KiB; not read")


def _declared_too_large(headers_length: str | None, cap: int) -> bool:
    # A Content-Length over the cap is refused before a byte of the body is read.
    return headers_length is not None and headers_length.isdigit() and int(headers_length) > cap


def read_capped(
    chunks: Iterator[bytes], length: str | None, *, cap: int, ends_at: float, what: str
) -> bytes:
    """The body from ``chunks``, refused above ``cap`` bytes or after ``ends_at`` (monotonic).

    Each read is also bounded by httpx's own timeout, set to the request's budget by the
    caller, so a silent server ends there and a trickling one at the next chunk.
    """
    if _declared_too_large(length, cap):
        raise _too_large(what, cap)
    body = bytearray()
    for chunk in chunks:
        body += chunk
        if len(body) > cap:
            raise _too_large(what, cap)
        if time.monotonic() >= ends_at:
            raise RequestTimedOut()
    return bytes(body)


async def aread_capped(
    chunks: AsyncIterator[bytes], length: str | None, *, cap: int, what: str
) -> bytes:
    """The body from ``chunks``, refused above ``cap`` bytes (time: the caller's timeout)."""
    if _declared_too_large(length, cap):
        raise _too_large(what, cap)
    body = bytearray()
    async for chunk in chunks:
        body += chunk
        if len(body) > cap:
            raise _too_large(what, cap)
    return bytes(body)
