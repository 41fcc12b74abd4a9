"""ledger: a cost ledger and token-usage analytics for LLM agents.

The façade: record usage (:class:`Ledger`), call providers through the client
(:class:`Client`, :class:`AsyncClient`) or a fallback :class:`Cascade`, or
meter the official SDKs (:func:`httpx_client`, :func:`instrument`).
"""

from ledger.attempt import Call, ChatOptions, ChatResult, Filing
from ledger.cascade import DEFAULT_CHAIN, AsyncCascade, Cascade, RetryPolicy, Route
from ledger.client import AsyncClient, Client
from ledger.errors import AllProvidersFailed, LedgerError, ProviderError
from ledger.events import UsageEvent
from ledger.instrument import (
    AsyncMeteringTransport,
    ContextThreadPoolExecutor,
    MeteringTransport,
    async_httpx_client,
    bind,
    context,
    httpx_client,
    instrument,
    uninstrument,
)
from ledger.store.ledger import Ledger, default_ledger

__all__ = [
    "DEFAULT_CHAIN",
    "AllProvidersFailed",
    "AsyncCascade",
    "AsyncClient",
    "AsyncMeteringTransport",
    "Call",
    "Cascade",
    "ChatOptions",
    "ChatResult",
    "Client",
    "ContextThreadPoolExecutor",
    "Filing",
    "Ledger",
    "LedgerError",
    "MeteringTransport",
    "ProviderError",
    "RetryPolicy",
    "Route",
    "UsageEvent",
    "async_httpx_client",
    "bind",
    "context",
    "default_ledger",
    "httpx_client",
    "instrument",
    "uninstrument",
]
