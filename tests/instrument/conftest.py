"""Fixtures for the SDK instrumentation: an in-memory recorder, and real loopback servers
(the simulator's HTTP server, and one replaying recorded payloads). Strict mode is on for
the whole suite (tests/conftest.py)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from ledger.events import UsageEvent, to_row
from ledger.simulator import Simulator, VirtualClock, serve_in_thread
from tests.llm_loopback import LoopbackLLM


class Rows:
    """A thread-safe recorder that validates each event as the ledger would."""

    def __init__(self) -> None:
        self.events: list[UsageEvent] = []
        self._lock = threading.Lock()

    def record(self, event: UsageEvent) -> str:
        to_row(event)
        with self._lock:
            self.events.append(event)
        return event.event_id

    @property
    def only(self) -> UsageEvent:
        assert len(self.events) == 1, self.events
        return self.events[0]


@pytest.fixture
def rows() -> Rows:
    return Rows()


@pytest.fixture(scope="module")
def sim_server() -> Iterator[tuple[Simulator, str]]:
    sim = Simulator(clock=VirtualClock(), seed=11)
    with serve_in_thread(sim) as url:
        yield sim, url


@pytest.fixture
def loopback() -> Iterator[LoopbackLLM]:
    with LoopbackLLM() as server:
        yield server
