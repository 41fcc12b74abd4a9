"""Scriptable fault injection: what goes wrong, where, and for how long.

A :class:`Fault` targets a *service* front door (``openrouter``, ``openai``,
``anthropic``: the client sees the fault directly) or, with ``upstream`` set,
one upstream behind OpenRouter (OpenRouter sees it and falls back to the next
upstream, as the real router does, unless ``allow_fallbacks`` is false or no
upstream is left). A fault is active inside its ``[start, end)`` time window
and for its first ``count`` matching requests (None: no count limit); with
``probability`` < 1 each matching request draws.

Tests script faults through :class:`FaultInjector` (``Simulator.faults``)::

    sim.faults.add(Fault(FaultKind.RATE_LIMIT, "openai", count=3, retry_after_s=2))
    sim.faults.add(Fault(FaultKind.SERVER_ERROR, "openrouter", upstream="Azure", status=503))
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass
from enum import StrEnum

from ledger.simulator.catalog import SERVICES, UpstreamSpec


class FaultKind(StrEnum):
    RATE_LIMIT = "rate_limit"  # 429 with Retry-After
    SERVER_ERROR = "server_error"  # 5xx (500 unless ``status`` says otherwise)
    OVERLOADED = "overloaded"  # 529 (Anthropic's overloaded_error; 503 elsewhere)
    CONNECTION_RESET = "connection_reset"  # the connection drops without a response
    SLOW_FIRST_BYTE = "slow_first_byte"  # success, after ``delay_s`` more before byte one
    MIDSTREAM_ERROR = "midstream_error"  # streams only: an in-band error after some chunks
    MALFORMED_BODY = "malformed_body"  # 200 with a body that is not valid JSON


#: Kinds that make an attempt fail (OpenRouter falls back past them).
FAILING_KINDS = frozenset(
    {
        FaultKind.RATE_LIMIT,
        FaultKind.SERVER_ERROR,
        FaultKind.OVERLOADED,
        FaultKind.CONNECTION_RESET,
        FaultKind.MALFORMED_BODY,
    }
)


@dataclass(slots=True)
class Fault:
    """One scripted fault; ``count`` is decremented as requests consume it."""

    kind: FaultKind
    service: str
    upstream: str | None = None
    model: str | None = None
    count: int | None = 1
    start: float | None = None
    end: float | None = None
    probability: float = 1.0
    status: int | None = None
    retry_after_s: float | None = None
    delay_s: float = 2.0
    after_chunks: int = 2
    hits: int = 0

    def __post_init__(self) -> None:
        if self.service not in SERVICES:
            raise ValueError(f"unknown service {self.service!r}; expected one of {SERVICES}")
        if self.count is not None and self.count < 0:
            raise ValueError("count must be >= 0 or None")
        if not 0.0 < self.probability <= 1.0:
            raise ValueError("probability must be in (0, 1]")

    def _targets(self, service: str, upstream: UpstreamSpec | None, model: str) -> bool:
        if service != self.service or (self.model is not None and self.model != model):
            return False
        if self.upstream is None:
            return upstream is None
        return upstream is not None and self.upstream.lower() in (
            upstream.name.lower(),
            upstream.slug,
        )

    def _live(self, now: float) -> bool:
        if self.count is not None and self.hits >= self.count:
            return False
        return (self.start is None or now >= self.start) and (self.end is None or now < self.end)


class FaultInjector:
    """The scripted faults of one simulator; thread-safe."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._faults: list[Fault] = []
        self._lock = threading.Lock()

    def add(self, fault: Fault) -> Fault:
        with self._lock:
            self._faults.append(fault)
        return fault

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    @property
    def active(self) -> list[Fault]:
        with self._lock:
            return [f for f in self._faults if f.count is None or f.hits < f.count]

    def take(
        self,
        service: str,
        model: str,
        now: float,
        *,
        upstream: UpstreamSpec | None = None,
        streamed: bool,
    ) -> Fault | None:
        """The fault hitting this request (consuming one of its ``count``), if any."""
        with self._lock:
            for fault in self._faults:
                if not fault._targets(service, upstream, model) or not fault._live(now):
                    continue
                if fault.kind is FaultKind.MIDSTREAM_ERROR and not streamed:
                    continue  # only a stream can break mid-way
                if fault.probability < 1.0 and self._rng.random() >= fault.probability:
                    continue
                fault.hits += 1
                return fault
        return None
