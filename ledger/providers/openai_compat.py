"""The OpenAI chat-completions family: openai, azure_openai, openrouter, groq, mistral,
deepseek and openai_compatible (vLLM, Ollama, LM Studio, any base URL).

One wire format with per-provider differences:

* usage: ``prompt_tokens`` already includes ``prompt_tokens_details.cached_tokens``
  (and ``cache_write_tokens`` where reported); ``completion_tokens`` includes
  ``completion_tokens_details.reasoning_tokens``. DeepSeek names its cache reads
  ``prompt_cache_hit_tokens``; Groq may report usage only under ``x_groq.usage``.
* streams: usage arrives on whichever chunk carries it (OpenAI: a final chunk
  with empty ``choices`` when ``stream_options.include_usage`` is set; OpenRouter
  may send it after the ``finish_reason`` chunk; DeepSeek on the last content
  chunk). Errors arrive in-band as a top-level ``error`` object, an
  ``event: error`` (Groq), or ``finish_reason: "error"`` with ``choices[].error``.
* OpenRouter alone reports ``usage.cost``, the serving upstream (top-level
  ``provider``), accepts ``provider.sort``/``provider.order`` and pins a
  session to its upstream given ``session_id`` (ADR 0221). Asked with
  ``X-OpenRouter-Metadata: enabled`` (sent by default), it also names the upstreams
  its router tried inside the call (:mod:`ledger.providers.router_metadata`).
* Azure addresses a deployment in the URL and authenticates with ``api-key``.
* The Responses API (``POST …/responses``) is the family's second wire format:
  its parsers live in :mod:`ledger.providers.openai_responses` and every provider
  here exposes them as ``parse_responses`` / ``responses_stream_parser`` and declares
  them for the ``responses`` endpoint in ``parsers()``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, ClassVar
from urllib.parse import quote

from ledger.providers.base import (
    Capabilities,
    ChatRequest,
    Endpoint,
    ErrorBody,
    HttpRequest,
    Parsed,
    Parsers,
    Provider,
)
from ledger.providers.openai_chat import ChatStreamParser, parse_chat_response, parse_openai_error
from ledger.providers.openai_responses import ResponsesStreamParser, parse_responses_body
from ledger.providers.router_metadata import ENABLED as METADATA_ENABLED
from ledger.providers.router_metadata import HEADER as METADATA_HEADER


class OpenAIStyleProvider(Provider):
    """Shared request building and parsing for the chat-completions family."""

    family = "openai_chat"
    endpoints = frozenset({"chat", "responses"})
    path: ClassVar[str] = "/chat/completions"
    # The family takes ``stream_options.include_usage`` (Mistral, rejecting unknown
    # fields, says otherwise).
    sends_stream_options = True
    max_tokens_field: ClassVar[str] = "max_tokens"

    def url(self, request: ChatRequest) -> str:
        return self.base_url + self.path

    def headers(self) -> dict[str, str]:
        headers = {"content-type": "application/json"}
        if self._api_key:
            headers["authorization"] = f"Bearer {self._api_key}"
        return headers

    def body(self, request: ChatRequest) -> dict[str, Any]:
        body: dict[str, Any] = {"model": request.model, "messages": list(request.messages)}
        if request.max_tokens is not None:
            body[self.max_tokens_field] = request.max_tokens
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.stream:
            body["stream"] = True
            if self.sends_stream_options:
                body["stream_options"] = {"include_usage": True}
        return body

    def build_request(self, request: ChatRequest) -> HttpRequest:
        body = self.body(request)
        if request.session_key is not None and self.capabilities.sticky_session:
            self.place_session_key(body, request.session_key)
        if request.extra_body:
            body.update(request.extra_body)
        return HttpRequest("POST", self.url(request), self.headers(), body)

    def parse_response(self, body: bytes) -> Parsed:
        return parse_chat_response(body, reports_upstream=self.capabilities.reports_upstream)

    def parse_error(self, status: int, body: bytes) -> ErrorBody:
        return parse_openai_error(body)

    def stream_parser(self) -> ChatStreamParser:
        return ChatStreamParser(reports_upstream=self.capabilities.reports_upstream)

    def usage_stream_parser(self) -> ChatStreamParser:
        """A stream parser for usage, identity and errors only (see :class:`ChatStreamParser`)."""
        return ChatStreamParser(reports_upstream=self.capabilities.reports_upstream, text=False)

    def parsers(self, endpoint: Endpoint) -> Parsers | None:
        if endpoint == "chat":
            # The caller's SDK reads the text itself: parse only what the row needs.
            return Parsers(self.parse_response, self.usage_stream_parser)
        if endpoint == "responses":
            return Parsers(self.parse_responses, self.responses_stream_parser)
        return None

    # The Responses API (``POST …/responses``), the family's second wire format. Separate
    # methods rather than a sniffing ``parse_response``: the endpoint already says which
    # format comes back, and a stream cannot be sniffed before its first event.

    def parse_responses(self, body: bytes) -> Parsed:
        """Parse a whole Responses API body (``object: "response"``); never raises."""
        return parse_responses_body(body, reports_upstream=self.capabilities.reports_upstream)

    def responses_stream_parser(self) -> ResponsesStreamParser:
        """A fresh incremental parser for one streamed Responses API call."""
        return ResponsesStreamParser(reports_upstream=self.capabilities.reports_upstream)


class OpenAIProvider(OpenAIStyleProvider):
    name = "openai"
    capabilities = Capabilities(
        sticky_session=False,
        prompt_caching="implicit",
        streaming_usage=True,
        reports_cost=False,
        reports_upstream=False,
    )
    default_base_url = "https://api.openai.com/v1"
    api_key_env = "OPENAI_API_KEY"
    base_url_env = "OPENAI_BASE_URL"
    prices_provider_id = "openai"
    # o-series models reject max_tokens; max_completion_tokens works for all.
    max_tokens_field = "max_completion_tokens"


class AzureOpenAIProvider(OpenAIStyleProvider):
    """Azure OpenAI: the model is the deployment name, addressed in the URL."""

    name = "azure_openai"
    capabilities = OpenAIProvider.capabilities
    default_base_url = None
    api_key_env = "AZURE_OPENAI_API_KEY"
    base_url_env = "AZURE_OPENAI_ENDPOINT"
    prices_provider_id = "azure"
    DEFAULT_API_VERSION: ClassVar[str] = "2024-10-21"

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        api_version: str | None = None,
    ) -> None:
        super().__init__(api_key=api_key, base_url=base_url)
        self.api_version = (
            api_version or os.environ.get("AZURE_OPENAI_API_VERSION") or self.DEFAULT_API_VERSION
        )

    def url(self, request: ChatRequest) -> str:
        deployment = quote(request.model, safe="")
        return (
            f"{self.base_url}/openai/deployments/{deployment}/chat/completions"
            f"?api-version={quote(self.api_version, safe='')}"
        )

    def headers(self) -> dict[str, str]:
        return {"content-type": "application/json", "api-key": self._api_key or ""}

    def body(self, request: ChatRequest) -> dict[str, Any]:
        body = super().body(request)
        del body["model"]  # the deployment in the URL selects the model
        return body


class OpenRouterProvider(OpenAIStyleProvider):
    """OpenRouter: reports cost and upstream, routes by ``provider``, pins by ``session_id``.

    ``router_metadata`` (default True) sends ``X-OpenRouter-Metadata: enabled``, so each
    successful response names the upstreams OpenRouter tried before the one that served
    (the row's ``router_attempts``). It adds one field to the response and changes
    nothing else; False leaves the header out (the generation record, read by ``ledger
    reconcile openrouter``, still fills ``router_attempts`` later).
    """

    name = "openrouter"
    capabilities = Capabilities(
        sticky_session=True,
        prompt_caching="explicit",
        streaming_usage=True,
        reports_cost=True,
        reports_upstream=True,
        provider_routing=True,
    )
    default_base_url = "https://openrouter.ai/api/v1"
    api_key_env = "OPENROUTER_API_KEY"
    base_url_env = "OPENROUTER_BASE_URL"
    prices_provider_id = "openrouter"

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        router_metadata: bool = True,
    ) -> None:
        super().__init__(api_key=api_key, base_url=base_url)
        self.router_metadata = router_metadata

    def headers(self) -> dict[str, str]:
        headers = super().headers()
        if self.router_metadata:
            headers[METADATA_HEADER.lower()] = METADATA_ENABLED
        return headers

    def place_session_key(self, body: dict[str, Any], key: str) -> None:
        body["session_id"] = key

    def sent_session_key(self, body: Mapping[str, Any]) -> Any:
        return body.get("session_id")

    def withhold_session_key(self, body: dict[str, Any]) -> bool:
        return body.pop("session_id", None) is not None

    def sent_routing(self, body: Mapping[str, Any]) -> tuple[Any, Any]:
        prefs = body.get("provider")
        if not isinstance(prefs, dict):
            return None, None
        sort = prefs.get("sort")
        if isinstance(sort, dict):  # the documented object form: {"by": "price", "partition": …}
            sort = sort.get("by")
        return sort, prefs.get("order")

    def parse_error(self, status: int, body: bytes) -> ErrorBody:
        return parse_openai_error(body, reads_upstream=True)

    def body(self, request: ChatRequest) -> dict[str, Any]:
        body = super().body(request)
        # Usage accounting: ask for cost and cache details explicitly.
        body["usage"] = {"include": True}
        routing: dict[str, Any] = {}
        if request.routing_sort is not None:
            routing["sort"] = request.routing_sort
        if request.routing_order is not None:
            routing["order"] = list(request.routing_order)
        if routing:
            body["provider"] = routing
        return body


class GroqProvider(OpenAIStyleProvider):
    name = "groq"
    capabilities = Capabilities(
        sticky_session=False,
        prompt_caching="implicit",
        streaming_usage=True,
        reports_cost=False,
        reports_upstream=False,
    )
    default_base_url = "https://api.groq.com/openai/v1"
    api_key_env = "GROQ_API_KEY"
    base_url_env = "GROQ_BASE_URL"
    prices_provider_id = "groq"


class MistralProvider(OpenAIStyleProvider):
    name = "mistral"
    capabilities = Capabilities(
        sticky_session=False,
        prompt_caching="implicit",
        streaming_usage=True,
        reports_cost=False,
        reports_upstream=False,
    )
    default_base_url = "https://api.mistral.ai/v1"
    api_key_env = "MISTRAL_API_KEY"
    base_url_env = "MISTRAL_BASE_URL"
    prices_provider_id = "mistral"
    # Mistral streams usage on its last chunk unasked and rejects unknown fields.
    sends_stream_options = False


class DeepSeekProvider(OpenAIStyleProvider):
    name = "deepseek"
    capabilities = Capabilities(
        sticky_session=False,
        prompt_caching="implicit",
        streaming_usage=True,
        reports_cost=False,
        reports_upstream=False,
    )
    default_base_url = "https://api.deepseek.com"
    api_key_env = "DEEPSEEK_API_KEY"
    base_url_env = "DEEPSEEK_BASE_URL"
    prices_provider_id = "deepseek"


class OpenAICompatibleProvider(OpenAIStyleProvider):
    """Any server speaking chat completions at ``base_url`` (vLLM, Ollama, LM Studio)."""

    name = "openai_compatible"
    capabilities = Capabilities(
        sticky_session=False,
        prompt_caching="none",
        streaming_usage=True,
        reports_cost=False,
        reports_upstream=False,
    )
    default_base_url = None
    api_key_env = "OPENAI_COMPATIBLE_API_KEY"
    base_url_env = "OPENAI_COMPATIBLE_BASE_URL"
    api_key_required = False
