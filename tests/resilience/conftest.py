"""Redis fixtures: the real server at 127.0.0.1:6379 (or ``LEDGER_TEST_REDIS_URL``).

Unreachable, Redis tests skip with the reason, except under ``CI=true`` where
they fail: CI must never pass by skipping. Each test gets a unique key prefix,
deleted afterwards, so concurrent runs never share keys.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
import redis

REDIS_ENV = "LEDGER_TEST_REDIS_URL"
IN_CI = os.environ.get("CI", "").lower() == "true"


@pytest.fixture(scope="session")
def redis_url() -> str:
    url = os.environ.get(REDIS_ENV) or "redis://127.0.0.1:6379/0"
    client = redis.Redis.from_url(url, socket_connect_timeout=2)
    try:
        client.ping()
    except redis.exceptions.ConnectionError as exc:
        if IN_CI:
            pytest.fail(f"CI=true and Redis at {url} is unreachable: {exc}")
        pytest.skip(f"Redis at {url} is unreachable ({exc}); set {REDIS_ENV} to run these tests")
    finally:
        client.close()
    return url


@pytest.fixture
def redis_prefix(redis_url: str) -> Iterator[str]:
    prefix = f"ledger-test:{uuid.uuid4().hex}:"
    yield prefix
    client = redis.Redis.from_url(redis_url)
    try:
        keys = list(client.scan_iter(match=f"{prefix}*"))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


@pytest.fixture
def admin(redis_url: str) -> Iterator[redis.Redis]:
    """A separate connection for inspecting keys and killing clients."""
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()
