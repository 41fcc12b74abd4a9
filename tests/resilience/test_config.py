from __future__ import annotations

import logging
import socket
from typing import Any

import httpx
import pytest

from ledger.errors import ConfigurationError
from ledger.resilience import (
    RedisSlidingWindowLimiter,
    Resilience,
    ResilienceSettings,
    SlidingWindowLimiter,
    parse_rate,
)
from tests.resilience.servers import LoopbackServer


def test_rates_read_like_a_person_writes_them() -> None:
    assert parse_rate("60/1m") == (60, 60.0)
    assert parse_rate("10 / 30s") == (10, 30.0)
    assert parse_rate("1000/1h") == (1000, 3600.0)
    assert parse_rate("5/2.5") == (5, 2.5)
    for bad in ("0/1m", "ten/1m", "5/0", "5/1d"):
        with pytest.raises(ConfigurationError):
            parse_rate(bad)


def test_settings_come_from_the_environment() -> None:
    settings = ResilienceSettings.from_env(
        {
            "LEDGER_RATE_LIMIT": "30/1m",
            "LEDGER_TRUSTED_PROXIES": "10.0.0.0/8",
            "LEDGER_REDIS_URL": "redis://cache:6379/1",
            "LEDGER_CACHE_TTL_S": "120",
        }
    )
    assert (settings.rate_limit, settings.window_s, settings.cache_ttl_s) == (30, 60.0, 120.0)
    assert settings.redis_url == "redis://cache:6379/1"
    with pytest.raises(ConfigurationError):
        ResilienceSettings.from_env({"LEDGER_TRUSTED_PROXIES": "not-a-network"})
    with pytest.raises(ConfigurationError):
        ResilienceSettings.from_env({"LEDGER_CACHE_TTL_S": "-1"})


def test_the_redis_pool_is_sized_from_the_environment(redis_url: str) -> None:
    settings = ResilienceSettings.from_env(
        {
            "LEDGER_REDIS_URL": redis_url,
            "LEDGER_REDIS_MAX_CONNECTIONS": "250",
            "LEDGER_REDIS_TIMEOUT_S": "0.5",
            "LEDGER_REDIS_WAIT_S": "3",
        }
    )
    assert (settings.redis_max_connections, settings.redis_timeout_s) == (250, 0.5)
    assert settings.redis_wait_s == 3.0
    defaults = ResilienceSettings.from_env({})
    assert (defaults.redis_max_connections, defaults.redis_timeout_s) == (100, 0.25)
    assert defaults.redis_wait_s == 2.0
    layer = Resilience(settings)
    assert layer.connections is not None
    pool = layer.connections.client.connection_pool
    assert (pool.max_connections, pool.timeout) == (250, 3.0)  # type: ignore[attr-defined]
    assert pool.connection_kwargs["socket_timeout"] == 0.5
    layer.close()
    for bad in ("0", "2.5", "many"):
        with pytest.raises(ConfigurationError, match="LEDGER_REDIS_MAX_CONNECTIONS"):
            ResilienceSettings.from_env({"LEDGER_REDIS_MAX_CONNECTIONS": bad})
    with pytest.raises(ConfigurationError, match="LEDGER_REDIS_TIMEOUT_S"):
        ResilienceSettings.from_env({"LEDGER_REDIS_TIMEOUT_S": "0"})
    with pytest.raises(ConfigurationError, match="LEDGER_REDIS_WAIT_S"):
        ResilienceSettings.from_env({"LEDGER_REDIS_WAIT_S": "-1"})


def test_without_redis_everything_is_in_process() -> None:
    layer = Resilience(ResilienceSettings(rate_limit=2))
    assert isinstance(layer.limiter, SlidingWindowLimiter)
    assert layer.cache().shared is None


async def hello(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"hi"})


def test_with_redis_the_served_app_is_limited_through_redis(
    redis_url: str, redis_prefix: str
) -> None:
    layer = Resilience(
        ResilienceSettings(rate_limit=2, redis_url=redis_url, redis_prefix=redis_prefix)
    )
    assert isinstance(layer.limiter, RedisSlidingWindowLimiter)
    assert layer.cache().shared is not None
    with (
        LoopbackServer(layer.middleware(hello)) as server,
        httpx.Client(base_url=server.url) as client,
    ):
        statuses = [client.get("/").status_code for _ in range(3)]
        layer.close()  # while uvicorn's loop runs, so its Redis connections close cleanly
    assert statuses == [200, 200, 429]
    assert layer.health is not None and not layer.health.down


def test_a_served_app_keeps_answering_when_redis_is_unreachable(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    layer = Resilience(ResilienceSettings(rate_limit=3, redis_url=f"redis://127.0.0.1:{port}/0"))
    with (
        caplog.at_level(logging.WARNING, logger="ledger.resilience"),
        LoopbackServer(layer.middleware(hello)) as server,
        httpx.Client(base_url=server.url) as client,
    ):
        statuses = [client.get("/").status_code for _ in range(5)]
        layer.close()
    assert statuses == [200, 200, 200, 429, 429]
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1


def test_the_facade_exports_a_sorted_importable_list() -> None:
    import ledger.resilience as facade

    assert facade.__all__ == sorted(facade.__all__)
    assert all(hasattr(facade, name) for name in facade.__all__)
