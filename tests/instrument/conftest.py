"""Fixtures for the SDK instrumentation: an in-memory recorder, and real loopback servers
(the simulator's HTTP server, and one replaying recorded payloads). Strict mode is on for
the whole suite (tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ledger.simulator import Simulator, VirtualClock, serve_in_thread
from tests.llm_loopback import LoopbackLLM, Rows


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
