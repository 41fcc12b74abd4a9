"""Settings and assembly: in process by default, Redis when ``LEDGER_REDIS_URL`` is set.

Each setting may also be written in the ``[resilience]`` section (``[tool.ledger.resilience]``
in pyproject.toml), read by :mod:`ledger.config`; the variable, when set, wins over the file.

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

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeVar

from ledger import config as cfg
from ledger.errors import ConfigurationError, SettingError
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


def _rate(where: cfg.Where, key: str, value: Any) -> tuple[int, float]:
    spec = cfg.text(where, key, value)
    try:
        return parse_rate(spec)
    except ConfigurationError:
        where.fail(key, "N/W[s|m|h], e.g. 60/1m", spec)


def _proxies(where: cfg.Where, key: str, value: Any) -> str:
    spec = cfg.text(where, key, value, empty=True)
    try:
        ClientIdentity.from_spec(spec)  # fail early if malformed
    except ConfigurationError as exc:
        where.fail(key, "a hop count or comma-separated networks", spec, said=f"{spec!r} ({exc})")
    return spec


def _size(where: cfg.Where, key: str, value: Any) -> int:
    return int(cfg.positive(where, key, value))


@dataclass(frozen=True, kw_only=True, slots=True)
class ResilienceSettings:
    """Everything the resilience layer can be told; see the module docstring."""

    rate_limit: int = cfg.setting(
        default=60,
        doc="requests per window per client: N/Ws, N/Wm, N/Wh or N/W seconds",
        env="LEDGER_RATE_LIMIT",
        example='"30/1m"',
        default_text="`60/60s`",
    )
    window_s: float = 60.0
    max_keys: int = 100_000
    trusted_proxies: str = cfg.setting(
        default="",
        doc="2 (hop count) or 10.0.0.0/8,…: whose X-Forwarded-For is believed",
        env="LEDGER_TRUSTED_PROXIES",
        example='"10.0.0.0/8"',
    )
    redis_url: str | None = cfg.setting(
        default=None,
        doc="share the limiter and cache through Redis",
        env="LEDGER_REDIS_URL",
        example='"redis://127.0.0.1:6379/0"',
    )
    redis_prefix: str = cfg.setting(
        default="ledger:",
        doc="key prefix in Redis",
        env="LEDGER_REDIS_PREFIX",
        example='"myapp:"',
    )
    redis_timeout_s: float = cfg.setting(
        default=0.25,
        doc="bound on connecting and on each answer, seconds (past it, Redis is unreachable)",
        env="LEDGER_REDIS_TIMEOUT_S",
        example="0.5",
    )
    redis_max_connections: int = cfg.setting(
        default=100,
        doc="connections per Redis client (per event loop); requests beyond wait for one",
        env="LEDGER_REDIS_MAX_CONNECTIONS",
        example="250",
    )
    redis_wait_s: float = cfg.setting(
        default=2.0,
        doc="a request's deadline for a free connection, seconds (then refused, Retry-After)",
        env="LEDGER_REDIS_WAIT_S",
        example="3",
    )
    redis_retry_interval_s: float = 5.0
    cache_ttl_s: float = cfg.setting(
        default=300.0,
        doc="response cache TTL, seconds",
        env="LEDGER_CACHE_TTL_S",
        example="120",
    )
    cache_max_entries: int = cfg.setting(
        default=1024,
        doc="local cache bound, entries",
        env="LEDGER_CACHE_MAX_ENTRIES",
        example="4096",
    )
    cache_max_bytes: int = cfg.setting(
        default=32 * 2**20,
        doc="local cache bound, bytes (32 MiB)",
        env="LEDGER_CACHE_MAX_BYTES",
        example="67108864",
    )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ResilienceSettings:
        """The defaults with the environment's variables over them (no file is read)."""
        return cls._read(None, environ)

    @classmethod
    def load(
        cls,
        path: Path | None = None,
        *,
        start: Path | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> ResilienceSettings:
        """The ``[resilience]`` section of ``path`` (else the one found from ``start``),
        the environment's variables over it."""
        return cls._read(cfg.read_table(SECTION, path, start=start), environ)

    @classmethod
    def _read(
        cls, found: tuple[Any, cfg.Where] | None, environ: Mapping[str, str] | None
    ) -> ResilienceSettings:
        values = cfg.read_settings(SECTION, found, _READERS, environ)
        if "rate_limit" in values:
            values["rate_limit"], values["window_s"] = values["rate_limit"]
        return cls(**values)


SECTION: Final = cfg.Section(
    "resilience",
    ResilienceSettings,
    SettingError,
    summary="`ledger.resilience`: the rate limiter, the response cache and their Redis.",
)
_READERS: Final[dict[str, cfg.Reader]] = {
    "rate_limit": _rate,
    "trusted_proxies": _proxies,
    "redis_url": cfg.text,
    "redis_prefix": cfg.text,
    "redis_timeout_s": cfg.seconds,
    "redis_max_connections": cfg.count,
    "redis_wait_s": cfg.seconds,
    "cache_ttl_s": cfg.seconds,
    "cache_max_entries": _size,
    "cache_max_bytes": _size,
}


class Resilience:
    """The assembled layer: ``limiter``, ``identity``, :meth:`cache`, :meth:`middleware`.

    With ``redis_url`` the limiter and every cache share Redis (and one
    :class:`RedisHealth`, so an outage is warned about once); without, all is
    in process.
    """

    def __init__(self, settings: ResilienceSettings | None = None) -> None:
        self.settings = s = settings or ResilienceSettings.load()
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
