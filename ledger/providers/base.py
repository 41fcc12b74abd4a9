"""What every provider is: declared capabilities, a request builder and pure parsers.

A provider module knows one wire format and nothing else: it turns a
:class:`ChatRequest` into an :class:`HttpRequest` and turns response bytes
(whole, or fed incrementally as an SSE stream) into a :class:`Parsed` result
with usage normalised to the ledger's contract. No provider does I/O, so the
client, the cascade and the SDK instrumentation all reuse the same parsing.

Parsers are total: any bytes in, a :class:`Parsed` out (with ``problems`` saying
what was wrong). A parser bug must never surface as a crash in a user's call.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from decimal import Decimal
from typing import Any, ClassVar, Literal, Protocol

from ledger.errors import ProviderConfigurationError
from ledger.providers.router_metadata import RouterAttempt

PromptCaching = Literal["none", "implicit", "explicit"]
#: The wire formats a request seen on the wire can speak, named by their endpoint:
#: ``…/chat/completions``, ``…/responses`` (OpenAI's Responses API), ``…/v1/messages``.
Endpoint = Literal["chat", "responses", "messages"]


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a provider does, declared once per provider class.

    * ``sticky_session``: the provider pins a session to one upstream when the
      request carries a session key (true on OpenRouter only, ADR 0221).
    * ``prompt_caching``: ``none``, ``implicit`` (the provider caches prefixes
      by itself) or ``explicit`` (the request marks cache breakpoints).
    * ``streaming_usage``: streams report token usage.
    * ``reports_cost``: responses carry the attempt's cost in USD.
    * ``reports_upstream``: responses name who served the call behind an aggregator.
    * ``provider_routing``: the request accepts ``provider.sort``/``provider.order``.
    """

    sticky_session: bool
    prompt_caching: PromptCaching
    streaming_usage: bool
    reports_cost: bool
    reports_upstream: bool
    provider_routing: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts normalised to contract §1 (``input_tokens`` includes cache reads and writes)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    #: Of ``cache_write_tokens``, those written with a 1-hour TTL (Anthropic's
    #: ``cache_creation.ephemeral_1h_input_tokens``), priced at their own, higher rate.
    #: Not a ledger column: it only makes the computed cost right.
    cache_write_1h_tokens: int = 0
    #: Audio tokens the response reports apart from text (Gemini's ``AUDIO``
    #: modality, OpenAI's ``audio_tokens`` details): subsets of ``input_tokens``,
    #: ``cache_read_tokens`` and ``output_tokens`` respectively, billed at audio
    #: rates. Not ledger columns either: they only make the computed cost right.
    input_audio_tokens: int = 0
    cache_audio_read_tokens: int = 0
    output_audio_tokens: int = 0
    #: The per-modality split the response reported, as (part, modality, tokens):
    #: part is ``input``, ``cache_read`` or ``output``; modality is lower case
    #: (``text``, ``audio``, ``image``, ``video``...). Recorded as ``usage_details``,
    #: with ``cache_write.ttl_1h`` for 1-hour cache writes (see :meth:`details`).
    modalities: tuple[tuple[str, str, int], ...] = ()

    def details(self) -> dict[str, dict[str, int]] | None:
        """``modalities`` as the row's ``usage_details`` JSON (None when none was reported)."""
        out: dict[str, dict[str, int]] = {}
        for part, modality, tokens in self.modalities:
            out.setdefault(part, {})[modality] = tokens
        if self.cache_write_1h_tokens:
            # Not a modality, but a repriced row needs it: 1-hour writes have their own rate.
            out.setdefault("cache_write", {})["ttl_1h"] = self.cache_write_1h_tokens
        return out or None


@dataclass(frozen=True, slots=True)
class InBandError:
    """An error the provider reported inside a 2xx body or a stream.

    ``http_status`` is the HTTP-like status the error stands for, when the
    provider gave one (OpenRouter's numeric ``code``, Anthropic's error type).
    """

    message: str
    code: str | None = None
    http_status: int | None = None
    transient: bool = True


@dataclass(frozen=True, slots=True)
class Parsed:
    """What one response (or one stream, so far) says.

    ``usage`` is None when the provider reported none; ``usage_partial`` is True
    when it is known not to be the final report (an Anthropic stream that ended
    before its ``message_delta``: output not counted yet). ``valid`` is False when
    the body was not a response at all (not JSON, wrong shape). ``problems``
    lists what was wrong or adjusted (clamped counts, missing fields).
    ``router_attempts``: the upstreams an aggregator's router tried inside this call,
    in order (OpenRouter's router metadata, :mod:`ledger.providers.router_metadata`);
    None when the response did not say.
    """

    content: str | None = None
    usage: Usage | None = None
    model: str | None = None
    upstream: str | None = None
    generation_id: str | None = None
    provider_cost_usd: Decimal | None = None
    finish_reason: str | None = None
    error: InBandError | None = None
    valid: bool = True
    problems: tuple[str, ...] = ()
    usage_partial: bool = False
    router_attempts: tuple[RouterAttempt, ...] | None = None


@dataclass(frozen=True, slots=True)
class ErrorBody:
    """The readable parts of a non-2xx body: a message (no secrets), a code, a retry hint."""

    message: str
    code: str | None = None
    retry_after: float | None = None
    #: Who failed behind an aggregator, when the error names it (OpenRouter's
    #: ``error.metadata.provider_name``); None when not named.
    upstream: str | None = None


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """A provider-neutral chat call. ``messages`` use the OpenAI shape (role + content)."""

    model: str
    messages: Sequence[Mapping[str, Any]]
    max_tokens: int | None = None
    temperature: float | None = None
    stream: bool = False
    session_key: str | None = None
    routing_sort: str | None = None
    routing_order: tuple[str, ...] | None = None
    extra_body: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class HttpRequest:
    """What to send: the body stays a dict so callers can inspect it before encoding."""

    method: str
    url: str
    headers: dict[str, str]
    body: dict[str, Any] = field(default_factory=dict)


class StreamParser(Protocol):
    """An incremental parser for one streamed response; fed raw bytes, no I/O.

    ``feed`` returns the text deltas found in the bytes (for the caller, as
    they arrive); ``finish`` flushes what is pending and returns the whole
    picture. ``error`` is the in-band error, once one was seen; ``done`` is True
    once the stream's own end was seen (``[DONE]``, ``message_stop``, a terminal
    event, a finish reason): a caller that stops reading after it left nothing.
    """

    @property
    def error(self) -> InBandError | None: ...

    @property
    def done(self) -> bool: ...

    def feed(self, data: bytes) -> list[str]: ...

    def finish(self) -> Parsed: ...


@dataclass(frozen=True, slots=True)
class Parsers:
    """A provider's parsers for one endpoint's responses: a whole body, and a fresh
    incremental parser for a stream."""

    body: Callable[[bytes], Parsed]
    stream: Callable[[], StreamParser]


class Provider(ABC):
    """One provider: its name, capabilities, request building and parsing.

    Subclasses set the class attributes; the constructor checks them, so a
    provider that declares ``sticky_session`` without overriding
    :meth:`place_session_key` fails as soon as it is built.
    """

    name: ClassVar[str]
    family: ClassVar[str]
    capabilities: ClassVar[Capabilities]
    default_base_url: ClassVar[str | None] = None
    api_key_env: ClassVar[str | None] = None
    base_url_env: ClassVar[str | None] = None
    api_key_required: ClassVar[bool] = True
    #: The provider id genai-prices knows this provider by (None: match by URL or model).
    prices_provider_id: ClassVar[str | None] = None
    #: The endpoints whose responses :meth:`parsers` reads, for calls ledger did not
    #: build itself (the metering transport, the gateway). A provider declaring more
    #: than one overrides :meth:`parsers` to say which parser reads which.
    endpoints: ClassVar[frozenset[Endpoint]] = frozenset()
    #: Whether the API takes ``stream_options.include_usage``: if so, a streamed call
    #: reports usage only when it asks (others report it unasked, or reject the field).
    sends_stream_options: ClassVar[bool] = False

    def __init__(self, *, api_key: str | None = None, base_url: str | None = None) -> None:
        self._check_declaration()
        env_key = os.environ.get(self.api_key_env) if self.api_key_env else None
        self._api_key = api_key or env_key or None
        env_url = os.environ.get(self.base_url_env) if self.base_url_env else None
        url = base_url or env_url or self.default_base_url
        if not url:
            where = f" or set {self.base_url_env}" if self.base_url_env else ""
            raise ProviderConfigurationError(f"{self.name}: pass base_url{where}")
        self.base_url = url.rstrip("/")
        if self.api_key_required and not self._api_key:
            where = f" or set {self.api_key_env}" if self.api_key_env else ""
            raise ProviderConfigurationError(f"{self.name}: no API key; pass api_key{where}")

    def _check_declaration(self) -> None:
        cls = type(self)
        if self.capabilities.sticky_session and cls.place_session_key is Provider.place_session_key:
            raise ProviderConfigurationError(
                f"{cls.__name__} declares sticky_session but does not override "
                "place_session_key(), so the session key would never reach the provider"
            )
        if len(self.endpoints) > 1 and cls.parsers is Provider.parsers:
            raise ProviderConfigurationError(
                f"{cls.__name__} declares endpoints {sorted(self.endpoints)} but does not "
                "override parsers(), so every endpoint would be read as one wire format"
            )

    def __repr__(self) -> str:
        # Never show the key.
        return f"{type(self).__name__}(base_url={self.base_url!r})"

    @property
    def secrets(self) -> tuple[str, ...]:
        """Values to redact from anything raised or logged."""
        return (self._api_key,) if self._api_key else ()

    def place_session_key(self, body: dict[str, Any], key: str) -> None:
        """Put the sticky session key in the request body (only sticky providers override this)."""
        raise NotImplementedError(f"{self.name} has no sticky sessions")

    def sent_session_key(self, body: Mapping[str, Any]) -> Any:
        """The sticky key a built ``body`` carries, as found (not checked), or None.

        Read back from the final body rather than remembered, because
        ``extra_body`` may have replaced what :meth:`place_session_key` put there.
        """
        return None

    def withhold_session_key(self, body: dict[str, Any]) -> bool:
        """Take the sticky key out of a built ``body`` (a ``session_key`` policy's
        holdout); whether there was one."""
        return False

    def sent_routing(self, body: Mapping[str, Any]) -> tuple[Any, Any]:
        """``(provider.sort, provider.order)`` as a built ``body`` carries them (not checked)."""
        return None, None

    @abstractmethod
    def build_request(self, request: ChatRequest) -> HttpRequest:
        """URL, headers (auth included) and body for ``request``."""

    @abstractmethod
    def parse_response(self, body: bytes) -> Parsed:
        """Parse a whole 2xx response body; never raises."""

    @abstractmethod
    def parse_error(self, status: int, body: bytes) -> ErrorBody:
        """Parse a non-2xx body; never raises."""

    @abstractmethod
    def stream_parser(self) -> StreamParser:
        """A fresh incremental parser for one streamed response."""

    def parsers(self, endpoint: Endpoint) -> Parsers | None:
        """The parsers for a response from ``endpoint`` to a call ledger did not build
        (usage, identity and errors; the text only where the wire format needs it), or
        None when this provider does not declare the endpoint. By default a provider
        with one endpoint reads it with :meth:`parse_response` and :meth:`stream_parser`.
        """
        if endpoint not in self.endpoints:
            return None
        return Parsers(self.parse_response, self.stream_parser)

    @classmethod
    def describe(cls) -> dict[str, Any]:
        """The provider-capabilities DTO (what an HTTP service would return for it)."""
        return {
            "name": cls.name,
            "family": cls.family,
            "default_base_url": cls.default_base_url,
            "api_key_env": cls.api_key_env,
            "base_url_env": cls.base_url_env,
            "capabilities": cls.capabilities.to_dict(),
        }
