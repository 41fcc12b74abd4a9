"""Settings and assembly: in process by default, Redis when ``LEDGER_REDIS_URL`` is set.

================================  ============  ================================================
environment variable              default       meaning
================================  ============  ================================================
``LEDGER_RATE_LIMIT``             ``60/60s``    requests per window per client (``N/Ws``,
                                                ``N/Wm``, ``N/Wh`` or ``N/W`` seconds)
``LEDGER_TRUSTED_PROXIES``        (none)        ``2`` (hop count) or ``10.0.0.0/8,…``
``LEDGER_REDIS_URL``              (none)        ``redis://host:6379/0``: share limiter and cache
``LEDGER_REDIS_PREFIX``           ``ledger:``   key prefix in Redis
``LEDGER_REDIS_MAX_CONNECTIONS``  ``100``       connections per Redis client (the sync one,
                                                one per event loop); requests beyond wait
                                                for a free one
``LEDGER_REDIS_TIMEOUT_S``        ``0.25``      bound on connecting and on each answer,
                                                seconds (past it, Redis is unreachable)
``LEDGER_REDIS_WAIT_S``           ``2``         a request's deadline for a free connection,
                                                seconds (past it, refused with Retry-After;
                                                a busy pool is never an outage)
``LEDGER_CACHE_TTL_S``            ``300``       response cache TTL, seconds
``LEDGER_CACHE_MAX_ENTRIES``      ``1024``      local cache bound, entries
``LEDGER_CACHE_MAX_BYTES``        ``33554432``  local cache bound, bytes (32 MiB)
================================  ============  ================================================
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from ledger.errors import ConfigurationError
from ledger.resilience.cache import Codec, ResponseCache
from ledger.resilience.identity import ClientIdentity
from ledger.resilience.limiter import RateLimiter, SlidingWindowLimiter
from ledger.resilience.middleware import ASGIApp, ResilienceMiddleware
from ledger.resilience.redis_backend import (
    RedisCacheStore,
    RedisConnections,
    RedisHealth,
    RedisSlidingWindowLimiter,
)

V = TypeVar("V")

_RATE: Final = re.compile(r"^\s*(\d+)\s*/\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*$")
_UNIT_S: Final = {"": 1, "s": 1, "m": 60, "h": 3600}


def parse_rate(spec: str) -> tuple[int, float]:
    """``"60/1m"`` -> ``(60, 60.0)``: requests and window seconds."""
    match = _RATE.match(spec)
    if not match or int(match[1]) < 1 or float(match[2]) <= 0:
        raise ConfigurationError(f"rate limit {spec!r}: expected N/W[s|m|h], e.g. 60/1m")
    return int(match[1]), float(match[2]) * _UNIT_S[match[3]]


def _number(environ: Mapping[str, str], name: str, default: float) -> float:
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigurationError(f"{name}={raw!r}: expected a number") from None
    if value <= 0:
        raise ConfigurationError(f"{name}={raw!r}: expected a positive number")
    return value


def _whole(environ: Mapping[str, str], name: str, default: int) -> int:
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or int(raw) < 1:
        raise ConfigurationError(f"{name}={raw!r}: expected a whole number >= 1")
    return int(raw)


@dataclass(frozen=True, kw_only=True, slots=True)
class ResilienceSettings:
    """Everything the resilience layer can be told; see the module docstring."""

    rate_limit: int = 60
    window_s: float = 60.0
    max_keys: int = 100_000
    trusted_proxies: str = ""
    redis_url: str | None = None
    redis_prefix: str = "ledger:"
    redis_timeout_s: float = 0.25
    redis_max_connections: int = 100
    redis_wait_s: float = 2.0
    redis_retry_interval_s: float = 5.0
    cache_ttl_s: float = 300.0
    cache_max_entries: int = 1024
    cache_max_bytes: int = 32 * 2**20

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ResilienceSettings:
        env = os.environ if environ is None else environ
        limit, window_s = parse_rate(env.get("LEDGER_RATE_LIMIT") or "60/60s")
        ClientIdentity.from_spec(env.get("LEDGER_TRUSTED_PROXIES"))  # fail early if malformed
        return cls(
            rate_limit=limit,
            window_s=window_s,
            trusted_proxies=env.get("LEDGER_TRUSTED_PROXIES", ""),
            redis_url=env.get("LEDGER_REDIS_URL") or None,
            redis_prefix=env.get("LEDGER_REDIS_PREFIX") or "ledger:",
            redis_timeout_s=_number(env, "LEDGER_REDIS_TIMEOUT_S", 0.25),
            redis_max_connections=_whole(env, "LEDGER_REDIS_MAX_CONNECTIONS", 100),
            redis_wait_s=_number(env, "LEDGER_REDIS_WAIT_S", 2.0),
            cache_ttl_s=_number(env, "LEDGER_CACHE_TTL_S", 300.0),
            cache_max_entries=int(_number(env, "LEDGER_CACHE_MAX_ENTRIES", 1024)),
            cache_max_bytes=int(_number(env, "LEDGER_CACHE_MAX_BYTES", 32 * 2**20)),
        )


class Resilience:
    """The assembled layer: ``limiter``, ``identity``, :meth:`cache`, :meth:`middleware`.

    With ``redis_url`` the limiter and every cache share Redis (and one
    :class:`RedisHealth`, so an outage is warned about once); without, all is
    in process.
    """

    def __init__(self, settings: ResilienceSettings | None = None) -> None:
        self.settings = s = settings or ResilienceSettings.from_env()
        self.identity = ClientIdentity.from_spec(s.trusted_proxies)
        local = SlidingWindowLimiter(s.rate_limit, s.window_s, max_keys=s.max_keys)
        self.connections: RedisConnections | None = None
        self.health: RedisHealth | None = None
        self.limiter: RateLimiter = local
        if s.redis_url:
            self.connections = RedisConnections(
                s.redis_url,
                timeout_s=s.redis_timeout_s,
                max_connections=s.redis_max_connections,
                wait_s=s.redis_wait_s,
            )
            self.health = RedisHealth(retry_interval_s=s.redis_retry_interval_s)
            self.limiter = RedisSlidingWindowLimiter(
                self.connections,
                s.rate_limit,
                s.window_s,
                prefix=s.redis_prefix,
                health=self.health,
                fallback=local,
            )

    def cache(self, codec: Codec[V] | None = None, **options: Any) -> ResponseCache[V]:
        """A response cache with these settings (``options`` override them)."""
        s = self.settings
        shared = None
        if self.connections is not None:
            shared = RedisCacheStore(self.connections, prefix=s.redis_prefix, health=self.health)
        kwargs: dict[str, Any] = {
            "ttl_s": s.cache_ttl_s,
            "max_entries": s.cache_max_entries,
            "max_bytes": s.cache_max_bytes,
            "shared": shared,
            "codec": codec,
            **options,
        }
        return ResponseCache(**kwargs)

    def middleware(self, app: ASGIApp, **options: Any) -> ResilienceMiddleware:
        """``app`` wrapped in the rate limiter and the retryable-error mapping."""
        return ResilienceMiddleware(app, limiter=self.limiter, identity=self.identity, **options)

    def close(self) -> None:
        if self.connections is not None:
            self.connections.close()

    async def aclose(self) -> None:
        """Close the running loop's Redis client and the sync one."""
        if self.connections is not None:
            await self.connections.aclose()
            self.connections.close()
