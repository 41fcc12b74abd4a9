"""ledger: a cost ledger and token-usage analytics for LLM agents."""

from ledger.events import UsageEvent
from ledger.instrument import (
    AsyncMeteringTransport,
    MeteringTransport,
    async_httpx_client,
    context,
    httpx_client,
    instrument,
    uninstrument,
)
from ledger.store.ledger import Ledger, default_ledger

__all__ = [
    "AsyncMeteringTransport",
    "Ledger",
    "MeteringTransport",
    "UsageEvent",
    "async_httpx_client",
    "context",
    "default_ledger",
    "httpx_client",
    "instrument",
    "uninstrument",
]
