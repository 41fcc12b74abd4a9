"""``ledger gateway``: an OpenAI- and Anthropic-compatible endpoint, so agents in any
language land in the ledger by changing one base URL.

A front door, not a new pipeline: requests are built by the provider modules
(sticky key on OpenRouter only), answers parsed by the metering transport's
exchange (the same parsers, the same row builder), fallbacks decided by the
cascade's plan (ADR-0014), refusals by the ADR-0016 limiter and the budget guard.

* :mod:`.config`: ``[tool.ledger.gateway]`` / ``ledger.toml [gateway]``
* :mod:`.auth`: gateway keys, stored as SHA-256 digests
* :mod:`.inbound`: one request's wire, body, model and identity
* :mod:`.intake`: reading request bodies, bounded per request and across requests
* :mod:`.upstream`: one attempt's request and its metered exchange
* :mod:`.http1`: the lean keep-alive HTTP/1.1 pool the upstream calls go through
* :mod:`.cache`: the response cache (whole answers and completed streams)
* :mod:`.relay`: the cascade with bytes relayed (commit at the first token)
* :mod:`.translate`, :mod:`.translate_stream`: OpenAI <-> Anthropic wire
* :mod:`.app`: the ASGI application; :mod:`.serve`: uvicorn, graceful shutdown
"""

from ledger.gateway.app import GatewayApp, create_app, from_environment
from ledger.gateway.auth import hash_key, new_key
from ledger.gateway.config import (
    GatewayConfig,
    GatewayConfigurationError,
    GatewayKey,
    ProviderSettings,
    Target,
    load_config,
    parse_config,
)
from ledger.gateway.translate import Untranslatable

__all__ = [
    "GatewayApp",
    "GatewayConfig",
    "GatewayConfigurationError",
    "GatewayKey",
    "ProviderSettings",
    "Target",
    "Untranslatable",
    "create_app",
    "from_environment",
    "hash_key",
    "load_config",
    "new_key",
    "parse_config",
]
