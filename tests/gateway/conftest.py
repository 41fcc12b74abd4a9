"""Fixtures for the gateway: the simulator and a scripted loopback server as upstreams,
the gateway itself served by uvicorn on a loopback port, rows kept in memory."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import uvicorn

from ledger.gateway import GatewayApp, hash_key, parse_config
from ledger.simulator import Simulator, VirtualClock, serve_in_thread
from ledger.simulator.server import free_port
from tests.llm_loopback import LoopbackLLM, Rows

KEY = "lgw-test-key-for-the-search-team"
OTHER_KEY = "lgw-test-key-for-the-ops-team"


@pytest.fixture
def rows() -> Rows:
    return Rows()


@pytest.fixture(scope="module")
def sim() -> Iterator[tuple[Simulator, str]]:
    simulator = Simulator(clock=VirtualClock(), seed=5)
    with serve_in_thread(simulator) as url:
        yield simulator, url


@pytest.fixture
def loopback() -> Iterator[LoopbackLLM]:
    with LoopbackLLM() as server:
        yield server


@pytest.fixture(autouse=True)
def provider_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GW_OPENAI_KEY", "sk-provider-openai-secret-0001")
    monkeypatch.setenv("GW_ANTHROPIC_KEY", "sk-ant-provider-secret-0002")
    monkeypatch.setenv("GW_OPENROUTER_KEY", "sk-or-provider-secret-0003")


def config_table(
    openai_url: str,
    anthropic_url: str,
    openrouter_url: str,
    **settings: Any,
) -> dict[str, Any]:
    """A gateway table (as TOML would give it) with providers at the given URLs."""
    table: dict[str, Any] = {
        "passthrough": ["openrouter", "openai", "anthropic"],
        "models": {
            "gpt-4o-mini": ["openai:gpt-4o-mini", "anthropic:claude-haiku-4-5-20251001"],
            "claude-haiku": ["anthropic:claude-haiku-4-5-20251001"],
        },
        "providers": {
            "openai": {"base_url": openai_url, "api_key_env": "GW_OPENAI_KEY"},
            "anthropic": {"base_url": anthropic_url, "api_key_env": "GW_ANTHROPIC_KEY"},
            "openrouter": {"base_url": openrouter_url, "api_key_env": "GW_OPENROUTER_KEY"},
        },
        "keys": {
            "search": {"sha256": hash_key(KEY), "tags": {"team": "search"}},
            "ops": {"sha256": hash_key(OTHER_KEY), "tags": {"team": "ops"}},
        },
    }
    table.update(settings)
    return table


def sim_table(url: str, **settings: Any) -> dict[str, Any]:
    return config_table(url + "/v1", url, url + "/api/v1", **settings)


class Served:
    """A running gateway: ``url`` (…/v1 is the SDKs' base URL) and its app."""

    def __init__(self, app: GatewayApp, url: str) -> None:
        self.app = app
        self.url = url


def _serve(app: GatewayApp) -> Iterator[Served]:
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve()), daemon=True)
    thread.start()
    try:
        for _ in range(1000):
            if server.started:
                break
            threading.Event().wait(0.01)
        else:
            raise RuntimeError("the gateway did not start within 10 s")
        yield Served(app, f"http://127.0.0.1:{port}")
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture
def serve_app() -> Iterator[Callable[[GatewayApp], Served]]:
    """``serve_app(app)``: serve a built app on a loopback port until the test ends."""
    running: list[Iterator[Served]] = []

    def start(app: GatewayApp) -> Served:
        gen = _serve(app)
        running.append(gen)
        return next(gen)

    yield start
    for gen in running:
        for _ in gen:
            pass


@pytest.fixture
def serve_gateway(rows: Rows, serve_app: Callable[[GatewayApp], Served]) -> Callable[..., Served]:
    """``serve_gateway(table, **app_options)``: a gateway for a config table, rows to ``rows``."""

    def start(table: dict[str, Any], **options: Any) -> Served:
        return serve_app(GatewayApp(parse_config(table), rows, strict=True, **options))

    return start


@pytest.fixture
def gateway(sim: tuple[Simulator, str], serve_gateway: Callable[..., Served]) -> Served:
    """A gateway in front of the simulator with the default test configuration."""
    return serve_gateway(sim_table(sim[1]))
