"""Anthropic's two cache lifetimes, billed as Anthropic bills them.

A 5-minute write costs 1.25x the input price, a 1-hour write 2x, a read 0.1x
whichever wrote it; ``cache_control: {"type": "ephemeral", "ttl": "1h"}`` asks
for the long one, and the usage splits the writes in ``cache_creation``.
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import httpx
import pytest

from ledger.simulator import Simulator, SimulatorTransport, VirtualClock
from ledger.simulator.cachettl import requested_ttl_s
from ledger.simulator.catalog import default_catalog
from ledger.simulator.core import charge

SYSTEM = "You are the reviewer agent; the tool contract follows. " * 200
SONNET_INPUT = Decimal(3)  # USD per million input tokens, the catalog's Sonnet 4.5


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock()


@pytest.fixture
def client(clock: VirtualClock) -> Iterator[httpx.Client]:
    sim = Simulator(clock=clock, seed=4)
    headers = {"x-api-key": "k"}
    with httpx.Client(
        transport=SimulatorTransport(sim), base_url="http://sim", headers=headers
    ) as c:
        yield c


def _body(ttl: str | None) -> dict[str, Any]:
    marker = {"type": "ephemeral"} if ttl is None else {"type": "ephemeral", "ttl": ttl}
    return {
        "model": "claude-sonnet-4-5-20250929",
        "max_tokens": 1,
        "system": [{"type": "text", "text": SYSTEM, "cache_control": marker}],
        "messages": [{"role": "user", "content": "go"}],
    }


def _turns(client: httpx.Client, clock: VirtualClock, ttl: str | None, gap_s: float) -> list[Any]:
    out = []
    for _ in range(2):
        out.append(client.post("/v1/messages", json=_body(ttl)).json()["usage"])
        clock.advance(gap_s)
    return out


def test_a_six_minute_gap_misses_a_five_minute_write_and_reads_a_one_hour_one(
    client: httpx.Client, clock: VirtualClock
) -> None:
    short = _turns(client, clock, None, 360)
    assert short[1]["cache_read_input_tokens"] == 0
    assert short[1]["cache_creation"]["ephemeral_5m_input_tokens"] > 0
    clock.advance(7200)  # everything written above has expired
    long = _turns(client, clock, "1h", 360)
    written = long[0]["cache_creation"]
    assert written["ephemeral_5m_input_tokens"] == 0 and written["ephemeral_1h_input_tokens"] > 0
    assert long[1]["cache_read_input_tokens"] == long[0]["cache_creation_input_tokens"]


def test_writes_cost_1_25x_or_2x_input_and_reads_0_1x() -> None:
    sonnet = default_catalog().anthropic["claude-sonnet-4-5-20250929"].upstreams[0]
    mtok = Decimal(1_000_000)
    five = charge(sonnet, prompt=10_000, read=0, write=8_000, output=0)
    hour = charge(sonnet, prompt=10_000, read=0, write=8_000, output=0, write_1h=True)
    read = charge(sonnet, prompt=10_000, read=8_000, write=0, output=0)
    plain = 2_000 * SONNET_INPUT / mtok  # the uncached rest of the prompt
    assert five.prompt_cost == plain + 8_000 * SONNET_INPUT * Decimal("1.25") / mtok
    assert hour.prompt_cost == plain + 8_000 * SONNET_INPUT * 2 / mtok
    assert read.prompt_cost == plain + 8_000 * SONNET_INPUT / 10 / mtok
    assert (five.cache_write_1h_tokens, hour.cache_write_1h_tokens) == (0, 8_000)


def test_the_longest_marker_sets_the_lifetime_wherever_it_is() -> None:
    assert requested_ttl_s({"messages": [{"role": "user", "content": "x"}]}) == 300
    tools = [{"name": "t", "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
    assert requested_ttl_s({"tools": tools}) == 3600
    nested = [{"role": "user", "content": [{"type": "text", "cache_control": {"ttl": "1h"}}]}]
    assert requested_ttl_s({"messages": nested}) == 3600
    assert requested_ttl_s({"cache_control": {"type": "ephemeral", "ttl": "5m"}}) == 300
