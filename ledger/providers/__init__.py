"""The providers ledger speaks, by name, and their declared capabilities."""

from __future__ import annotations

from typing import Any, Final

from ledger.errors import ProviderConfigurationError
from ledger.providers.anthropic import AnthropicProvider
from ledger.providers.base import (
    Capabilities,
    ChatRequest,
    ErrorBody,
    HttpRequest,
    InBandError,
    Parsed,
    Provider,
    StreamParser,
    Usage,
)
from ledger.providers.gemini import GeminiProvider
from ledger.providers.openai_compat import (
    AzureOpenAIProvider,
    DeepSeekProvider,
    GroqProvider,
    MistralProvider,
    OpenAICompatibleProvider,
    OpenAIProvider,
    OpenRouterProvider,
)

#: Every provider class by its name, in display order.
PROVIDERS: Final[dict[str, type[Provider]]] = {
    cls.name: cls
    for cls in (
        OpenAIProvider,
        AzureOpenAIProvider,
        AnthropicProvider,
        OpenRouterProvider,
        GeminiProvider,
        MistralProvider,
        GroqProvider,
        DeepSeekProvider,
        OpenAICompatibleProvider,
    )
}


def provider_class(name: str) -> type[Provider]:
    try:
        return PROVIDERS[name]
    except KeyError:
        known = ", ".join(PROVIDERS)
        raise ProviderConfigurationError(f"unknown provider {name!r}; known: {known}") from None


def make_provider(name: str, **options: Any) -> Provider:
    """Build the provider called ``name``; keys and URLs default to its environment variables."""
    return provider_class(name)(**options)


def capabilities_table() -> list[dict[str, Any]]:
    """The provider-capabilities DTO: one entry per provider, in display order."""
    return [cls.describe() for cls in PROVIDERS.values()]


__all__ = [
    "PROVIDERS",
    "AnthropicProvider",
    "AzureOpenAIProvider",
    "Capabilities",
    "ChatRequest",
    "DeepSeekProvider",
    "ErrorBody",
    "GeminiProvider",
    "GroqProvider",
    "HttpRequest",
    "InBandError",
    "MistralProvider",
    "OpenAICompatibleProvider",
    "OpenAIProvider",
    "OpenRouterProvider",
    "Parsed",
    "Provider",
    "StreamParser",
    "Usage",
    "capabilities_table",
    "make_provider",
    "provider_class",
]
