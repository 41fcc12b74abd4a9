"""Which requests are LLM calls, and to which provider: by URL first, then by body.

Pure functions over a method, a URL and a few headers; no body parsing here
beyond reading keys of an already-decoded JSON object. Recognised endpoints:

* ``POST …/chat/completions``: the OpenAI chat family. The provider is the one
  whose API host it is (``api.openai.com``, ``openrouter.ai``, Groq, Mistral,
  DeepSeek, Azure), else OpenRouter when the path has OpenRouter's ``/api/v1/``
  layout or the body uses OpenRouter-only fields, else ``openai_compatible``.
* ``POST …/responses``: OpenAI's Responses API, parsed by the same providers
  (:mod:`ledger.providers.openai_responses`). Under a host or mapping that names
  an OpenAI-family provider any ``…/responses`` path counts (Azure serves it at
  ``/openai/v1/responses`` and ``/openai/responses``); elsewhere only
  ``…/v1/responses`` does, as OpenRouter when the path has its ``/api/v1/``
  layout, else ``openai_compatible``. ``/responses/{id}``, ``…/cancel``,
  ``…/input_tokens`` and ``…/compact`` are not model calls we parse.
* ``POST …/v1/messages``: Anthropic Messages, when the host is Anthropic's or
  the request carries ``anthropic-version`` (so OpenAI's
  ``/threads/{id}/messages`` is never mistaken for it).

Everything else (embeddings, files, ``count_tokens``, ``GET``s) is not ours and
passes through untouched. A URL prefix can be mapped to a provider explicitly
(``{"http://127.0.0.1:8080/v1": "openai"}``); provider base URLs set in the
environment (``OPENROUTER_BASE_URL``…) count as such mappings too.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

from ledger.errors import ProviderConfigurationError
from ledger.providers import PROVIDERS
from ledger.providers.base import Endpoint

_CHAT: Final = "/chat/completions"
_MESSAGES: Final = "/v1/messages"
_RESPONSES: Final = "/responses"
_V1_RESPONSES: Final = "/v1/responses"
_AZURE_HOSTS: Final = (".openai.azure.com", ".cognitiveservices.azure.com")
#: Request fields only OpenRouter defines (a proxy in front of it keeps them).
_OPENROUTER_FIELDS: Final = ("provider", "models", "transforms", "plugins", "session_id")


@dataclass(frozen=True, slots=True)
class Recognised:
    """A recognised call: the provider (a :data:`~ledger.providers.PROVIDERS` name), the
    base URL its provider instance is built with, and the endpoint's wire format.

    ``inferred`` is True when no host or mapping named the provider, so the
    body may still reveal it (see :func:`refine`). ``deployment`` is Azure's
    deployment name from the URL (Azure's bodies carry no model).
    """

    provider: str
    base_url: str
    endpoint: Endpoint
    inferred: bool = False
    deployment: str | None = None


def _host_table() -> dict[str, str]:
    hosts: dict[str, str] = {}
    for name, cls in PROVIDERS.items():
        if cls.default_base_url:
            host = urlsplit(cls.default_base_url).hostname
            if host:
                hosts.setdefault(host, name)
    return hosts


_HOSTS: Final = _host_table()


def _env_prefixes() -> dict[str, str]:
    found: dict[str, str] = {}
    for name, cls in PROVIDERS.items():
        if cls.base_url_env and (url := os.environ.get(cls.base_url_env)):
            found[url.rstrip("/")] = name
    return found


class Recogniser:
    """Routes requests; ``providers`` maps URL prefixes to provider names (checked here)."""

    def __init__(self, providers: Mapping[str, str] | None = None) -> None:
        prefixes = {**_env_prefixes(), **{k.rstrip("/"): v for k, v in (providers or {}).items()}}
        for prefix, name in prefixes.items():
            if name not in PROVIDERS:
                known = ", ".join(PROVIDERS)
                raise ProviderConfigurationError(
                    f"URL prefix {prefix!r} maps to unknown provider {name!r}; known: {known}"
                )
        # Longest prefix first, so a specific mapping beats a general one.
        self._prefixes = sorted(prefixes.items(), key=lambda item: -len(item[0]))

    def route(
        self, method: str, url: str, host: str, path: str, anthropic: bool
    ) -> Recognised | None:
        """The route of a request, or None when it is not an LLM call we meter.

        ``url`` is the full URL, ``host`` and ``path`` its parts; ``anthropic``
        says whether the request carries an ``anthropic-version`` header.
        """
        if method != "POST":
            return None
        path = path.rstrip("/")
        if path.endswith(_CHAT):
            return self._chat(url, host, path)
        if path.endswith(_RESPONSES):
            return self._responses(url, host, path)
        # The anthropic-version header names the wire format even under a URL mapped
        # to another provider (one loopback or gateway serving both).
        if path.endswith(_MESSAGES) and (anthropic or self._named(url, host) == "anthropic"):
            return Recognised("anthropic", _base(url, path, _MESSAGES), "messages")
        return None

    def _named(self, url: str, host: str) -> str | None:
        for prefix, name in self._prefixes:
            if url.startswith(prefix):
                return name
        if host.endswith(_AZURE_HOSTS):
            return "azure_openai"
        return _HOSTS.get(host)

    def _chat(self, url: str, host: str, path: str) -> Recognised | None:
        named = self._named(url, host)
        if named == "anthropic":
            return None  # Anthropic's OpenAI-compatible layer: not a format we parse as Anthropic
        if named == "azure_openai":
            marker = path.find("/openai/deployments/")
            if marker < 0:
                return None
            deployment = path[marker + len("/openai/deployments/") :].split("/", 1)[0]
            return Recognised(
                "azure_openai", _base(url, path, path[marker:]), "chat", False, deployment
            )
        base = _base(url, path, _CHAT)
        if named is not None:
            return Recognised(named, base, "chat")
        if "/api/v1/" in path + "/":
            return Recognised("openrouter", base, "chat", inferred=True)
        return Recognised("openai_compatible", base, "chat", inferred=True)

    def _responses(self, url: str, host: str, path: str) -> Recognised | None:
        named = self._named(url, host)
        if named is not None and "responses" not in PROVIDERS[named].endpoints:
            return None  # the provider named has no Responses API to parse
        base = _base(url, path, _RESPONSES)
        if named is not None:
            return Recognised(named, base, "responses")
        if not path.endswith(_V1_RESPONSES):
            return None  # an unknown host's "/responses" may be anything
        if "/api/v1/" in path + "/":
            return Recognised("openrouter", base, "responses", inferred=True)
        return Recognised("openai_compatible", base, "responses", inferred=True)


def refine(route: Recognised, body: Mapping[str, Any]) -> Recognised:
    """An inferred OpenAI-compatible route whose body uses OpenRouter-only fields is OpenRouter."""
    guessed = route.inferred and route.provider == "openai_compatible"
    if guessed and any(key in body for key in _OPENROUTER_FIELDS):
        return Recognised("openrouter", route.base_url, route.endpoint, inferred=True)
    return route


def _base(url: str, path: str, suffix: str) -> str:
    """``url`` cut just before ``suffix`` (the endpoint part of ``path``), query dropped."""
    split = urlsplit(url)
    kept = path[: len(path) - len(suffix)]
    return f"{split.scheme}://{split.netloc}{kept}"
