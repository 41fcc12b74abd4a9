"""Helpers for simulator tests: a simulator on a virtual clock and a client for it."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import httpx
import pytest

from ledger.simulator import (
    Catalog,
    Latency,
    ModelPool,
    Simulator,
    SimulatorTransport,
    UpstreamSpec,
    VirtualClock,
)

MODEL = "test/model"
LONG_SYSTEM = "You are the planning agent. Follow the tool contract exactly. " * 120


def upstream(name: str, price: str = "1", read: str | None = "0.1", **kw: Any) -> UpstreamSpec:
    return UpstreamSpec(
        name=name,
        slug=name.lower(),
        input_per_mtok=Decimal(price),
        output_per_mtok=Decimal(price) * 2,
        cache_read_per_mtok=None if read is None else Decimal(read),
        min_cacheable_tokens=kw.pop("min_cacheable_tokens", 256),
        latency=kw.pop("latency", Latency(0.2, 0.1, 100.0)),
        **kw,
    )


def catalog_of(*upstreams: UpstreamSpec) -> Catalog:
    base = Catalog(openrouter={}, openai={}, anthropic={})
    return base.with_pool("openrouter", ModelPool(MODEL, upstreams))


class Chat:
    """Posts OpenRouter chat requests to a simulator through the in-process transport."""

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        self.client = httpx.Client(
            transport=SimulatorTransport(sim),
            base_url="https://openrouter.ai/api/v1",
            headers={"Authorization": "Bearer sk-or-test"},
        )

    def body(
        self, first: str = "task 1", system: str = LONG_SYSTEM, **extra: Any
    ) -> dict[str, Any]:
        messages = [{"role": "system", "content": system}, {"role": "user", "content": first}]
        return {"model": MODEL, "messages": messages, **extra}

    def post(self, body: dict[str, Any], **kw: Any) -> httpx.Response:
        return self.client.post("/chat/completions", json=body, **kw)

    def upstream_of(self, body: dict[str, Any]) -> str:
        response = self.post(body)
        assert response.status_code == 200, response.text
        provider: str = response.json()["provider"]
        return provider


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock()


@pytest.fixture
def five_equal(clock: VirtualClock) -> Iterator[Chat]:
    """Five equally priced upstreams with cheap cache reads."""
    sim = Simulator(catalog_of(*(upstream(f"U{i}") for i in range(5))), clock=clock, seed=7)
    chat = Chat(sim)
    yield chat
    chat.client.close()
