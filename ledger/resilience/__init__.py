"""The resilience layer (ADR-0016): rate limiter, response cache, ASGI middleware.

In process by default; with ``LEDGER_REDIS_URL`` the limiter and the cache are
shared by every instance through Redis (see :mod:`.config`).
"""

from ledger.errors import error_response
from ledger.resilience.cache import (
    Codec,
    JsonCodec,
    ResponseCache,
    Served,
    SharedStore,
    is_final,
)
from ledger.resilience.config import Resilience, ResilienceSettings, parse_rate
from ledger.resilience.identity import ClientIdentity
from ledger.resilience.keys import cache_key, normalise_locale, normalise_text
from ledger.resilience.limiter import Decision, RateLimiter, SlidingWindowLimiter, enforce
from ledger.resilience.middleware import HTTPRetryable, ResilienceMiddleware
from ledger.resilience.recording import AsyncCachedCall, CachedCall, Origin, Turn, hit_event
from ledger.resilience.redis_backend import (
    RedisCacheStore,
    RedisConnections,
    RedisHealth,
    RedisSlidingWindowLimiter,
)

__all__ = [
    "AsyncCachedCall",
    "CachedCall",
    "ClientIdentity",
    "Codec",
    "Decision",
    "HTTPRetryable",
    "JsonCodec",
    "Origin",
    "RateLimiter",
    "RedisCacheStore",
    "RedisConnections",
    "RedisHealth",
    "RedisSlidingWindowLimiter",
    "Resilience",
    "ResilienceMiddleware",
    "ResilienceSettings",
    "ResponseCache",
    "Served",
    "SharedStore",
    "SlidingWindowLimiter",
    "Turn",
    "cache_key",
    "enforce",
    "error_response",
    "hit_event",
    "is_final",
    "normalise_locale",
    "normalise_text",
    "parse_rate",
]
