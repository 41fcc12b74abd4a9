"""Instrument the official SDKs: every openai/anthropic/OpenRouter call lands in the ledger.

::

    import anthropic, openai, ledger

    client = openai.OpenAI(http_client=ledger.httpx_client())      # a new client, metered
    claude = ledger.instrument(anthropic.Anthropic())              # or one already built
    with ledger.context(session_id="s-42", actor_id="planner"):
        client.chat.completions.create(model="gpt-4o-mini", messages=[...])
    ledger.uninstrument(claude)

Each HTTP attempt to a recognised endpoint (chat completions, the Responses API, Anthropic
messages; see :mod:`ledger.instrument.recognise`) becomes one row; the SDK's own
retries are attempts 2, 3… of the same ``call_id``. Everything else passes
through untouched, and nothing here ever changes what the SDK receives.

The choke point is the client's transport: :func:`instrument` wraps the
transports of an existing ``httpx``/``httpx2`` client (or of the one inside an
SDK client) and :func:`uninstrument` puts them back; both are idempotent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, Literal, TypeVar, overload

import httpx

from ledger.instrument.context import Context, context, current
from ledger.instrument.meter import InstrumentationError, Meter, Recorder
from ledger.instrument.transport import AsyncMeteringTransport, MeteringTransport

if TYPE_CHECKING:
    import httpx2

T = TypeVar("T")
Library = Literal["httpx", "httpx2"]

# The SDKs' own defaults for the client they build (openai/anthropic DEFAULT_TIMEOUT and
# connection limits), so passing our client changes nothing but the metering.
_TIMEOUT: Final = {"timeout": 600.0, "connect": 5.0}
_LIMITS: Final = {"max_connections": 1000, "max_keepalive_connections": 100}


def _module(library: Library) -> Any:
    if library == "httpx":
        return httpx
    import httpx2 as module  # comes with openai>=3 / anthropic>=2

    return module


def _client_options(module: Any, options: dict[str, Any]) -> dict[str, Any]:
    options.setdefault("timeout", module.Timeout(_TIMEOUT["timeout"], connect=_TIMEOUT["connect"]))
    options.setdefault("limits", module.Limits(**_LIMITS))
    options.setdefault("follow_redirects", True)
    return options


@overload
def httpx_client(
    *, library: Literal["httpx2"] = ..., meter: Meter | None = ..., **options: Any
) -> httpx2.Client: ...
@overload
def httpx_client(
    *, library: Literal["httpx"], meter: Meter | None = ..., **options: Any
) -> httpx.Client: ...
def httpx_client(*, library: Library = "httpx2", meter: Meter | None = None, **options: Any) -> Any:
    """A new sync client whose every LLM call is recorded: ``openai.OpenAI(http_client=…)``.

    ``library``: ``httpx2`` (what the openai 3.x / anthropic 2.x SDKs use) or
    ``httpx``. ``options`` are the client's (``timeout``, ``headers``…), plus
    :class:`Meter`'s (``ledger``, ``providers``, ``strict``, ``sticky_key``,
    ``session_prefix``).
    """
    module = _module(library)
    meter = meter or Meter(**_meter_options(options))
    client = module.Client(**_client_options(module, options))
    return instrument(client, meter=meter)


@overload
def async_httpx_client(
    *, library: Literal["httpx2"] = ..., meter: Meter | None = ..., **options: Any
) -> httpx2.AsyncClient: ...
@overload
def async_httpx_client(
    *, library: Literal["httpx"], meter: Meter | None = ..., **options: Any
) -> httpx.AsyncClient: ...
def async_httpx_client(
    *, library: Library = "httpx2", meter: Meter | None = None, **options: Any
) -> Any:
    """The asynchronous :func:`httpx_client` (``openai.AsyncOpenAI(http_client=…)``)."""
    module = _module(library)
    meter = meter or Meter(**_meter_options(options))
    client = module.AsyncClient(**_client_options(module, options))
    return instrument(client, meter=meter)


_METER_OPTIONS: Final = ("ledger", "providers", "strict", "sticky_key", "session_prefix")


def _meter_options(options: dict[str, Any]) -> dict[str, Any]:
    return {name: options.pop(name) for name in _METER_OPTIONS if name in options}


def _http_of(client: Any) -> Any:
    """The ``httpx``/``httpx2`` client itself, or the one inside an SDK client."""
    if hasattr(client, "_transport") and hasattr(client, "_mounts"):
        return client
    inner = getattr(client, "_client", None)
    if inner is not None and hasattr(inner, "_transport") and hasattr(inner, "_mounts"):
        return inner
    raise TypeError(
        f"cannot instrument {type(client).__name__}: expected an httpx/httpx2 client "
        "or an SDK client built on one (openai.OpenAI, anthropic.Anthropic, …)"
    )


def _wrap(transport: Any, meter: Meter) -> Any:
    if transport is None or isinstance(transport, MeteringTransport | AsyncMeteringTransport):
        return transport
    if hasattr(transport, "handle_async_request"):
        return AsyncMeteringTransport(transport, meter=meter)
    return MeteringTransport(transport, meter=meter)


def _unwrap(transport: Any) -> Any:
    if isinstance(transport, MeteringTransport | AsyncMeteringTransport):
        return transport.inner
    return transport


def instrument(client: T, *, meter: Meter | None = None, **options: Any) -> T:
    """Record every LLM call ``client`` makes from now on; returns ``client``.

    ``client`` is an ``httpx``/``httpx2`` client or an SDK client (its inner
    HTTP client is instrumented, so every copy made with ``with_options``
    shares it). Idempotent: an instrumented client keeps its one metering
    layer (and its first options). ``options``: :class:`Meter`'s.
    """
    http = _http_of(client)
    meter = meter or Meter(**options)
    http._transport = _wrap(http._transport, meter)
    http._mounts = {pattern: _wrap(t, meter) for pattern, t in http._mounts.items()}
    return client


def uninstrument(client: T) -> T:
    """Undo :func:`instrument` (a no-op for a client that is not instrumented)."""
    http = _http_of(client)
    http._transport = _unwrap(http._transport)
    http._mounts = {pattern: _unwrap(t) for pattern, t in http._mounts.items()}
    return client


def is_instrumented(client: Any) -> bool:
    return isinstance(_http_of(client)._transport, MeteringTransport | AsyncMeteringTransport)


__all__ = [
    "AsyncMeteringTransport",
    "Context",
    "InstrumentationError",
    "Meter",
    "MeteringTransport",
    "Recorder",
    "async_httpx_client",
    "context",
    "current",
    "httpx_client",
    "instrument",
    "is_instrumented",
    "uninstrument",
]
