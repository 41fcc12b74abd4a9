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
through untouched, and nothing here ever changes what the SDK receives. A request
changes in two cases: an OpenRouter chat request made under a ``ledger.context`` with
a session and without a session id of its own gets the sticky session key (ADR 0221;
``sticky_key=False`` opts out), and ``include_usage=True`` asks streamed chat
completions for their usage (the stream then ends with a usage chunk whose
``choices`` is empty).

The choke point is the client's transport: :func:`instrument` wraps the
transports of an existing ``httpx``/``httpx2`` client (or of the one inside an
SDK client) and :func:`uninstrument` puts them back; both are idempotent.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import re
from typing import TYPE_CHECKING, Any, Final, Literal, TypeVar, overload

import httpx

from ledger.events import Recorder
from ledger.instrument.context import Context, context, current
from ledger.instrument.meter import InstrumentationError, Meter
from ledger.instrument.threads import ContextThreadPoolExecutor, bind
from ledger.instrument.transport import AsyncMeteringTransport, MeteringTransport

if TYPE_CHECKING:
    import httpx2

T = TypeVar("T")
Library = Literal["httpx", "httpx2"]

# The SDKs' own defaults for the client they build (openai/anthropic DEFAULT_TIMEOUT and
# connection limits), so passing our client changes nothing but the metering.
_TIMEOUT: Final = {"timeout": 600.0, "connect": 5.0}
_LIMITS: Final = {"max_connections": 1000, "max_keepalive_connections": 100}


#: The SDKs whose HTTP library :func:`httpx_client` matches, in order of preference.
_SDKS: Final = ("openai", "anthropic")


def sdk_library() -> Library:
    """The HTTP library the installed SDK is built on: ``httpx2`` (pydantic's fork, which
    openai 3.x and anthropic 2.x require) or ``httpx`` (older SDKs).

    Read from the SDK's declared requirements at call time, not assumed: ledger itself
    declares only ``httpx``, and ``httpx2`` is there only when such an SDK brought it.
    With neither SDK installed, ``httpx``.
    """
    for sdk in _SDKS:
        try:
            requirements = importlib.metadata.requires(sdk) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        names = {re.split(r"[\s<>=!~;\[(]", r, maxsplit=1)[0].lower() for r in requirements}
        if "httpx2" in names:
            return "httpx2"
        if "httpx" in names:
            return "httpx"
    return "httpx"


def _module(library: Library | None) -> Any:
    if (library or sdk_library()) == "httpx":
        return httpx
    import httpx2 as module  # present: the installed SDK requires it (see sdk_library)

    return module


def _client_options(module: Any, options: dict[str, Any]) -> dict[str, Any]:
    options.setdefault("timeout", module.Timeout(_TIMEOUT["timeout"], connect=_TIMEOUT["connect"]))
    options.setdefault("limits", module.Limits(**_LIMITS))
    options.setdefault("follow_redirects", True)
    return options


@overload
def httpx_client(*, library: None = ..., meter: Meter | None = ..., **options: Any) -> Any: ...
@overload
def httpx_client(
    *, library: Literal["httpx2"], meter: Meter | None = ..., **options: Any
) -> httpx2.Client: ...
@overload
def httpx_client(
    *, library: Literal["httpx"], meter: Meter | None = ..., **options: Any
) -> httpx.Client: ...
def httpx_client(
    *, library: Library | None = None, meter: Meter | None = None, **options: Any
) -> Any:
    """A new sync client whose every LLM call is recorded: ``openai.OpenAI(http_client=…)``.

    ``library``: ``httpx2`` or ``httpx``; by default the one the installed openai
    (else anthropic) SDK is built on (:func:`sdk_library`), since an SDK rejects a
    client of the other library. ``options`` are the client's (``timeout``, ``headers``…), plus
    :class:`Meter`'s (``ledger``, ``providers``, ``strict``, ``sticky_key``,
    ``session_prefix``, ``include_usage``, ``policies``).

    ``include_usage=True`` asks OpenAI-style streamed chat completions for their usage
    (``stream_options.include_usage``) when the request does not say: the stream then
    ends with one extra chunk whose ``choices`` is **empty**. Without it an OpenAI
    stream reports no usage and its row says so (``usage_reported`` false; a warning,
    once per process, names the fix).
    """
    module = _module(library)
    meter = meter or Meter(**_meter_options(options))
    client = module.Client(**_client_options(module, options))
    return instrument(client, meter=meter)


@overload
def async_httpx_client(
    *, library: None = ..., meter: Meter | None = ..., **options: Any
) -> Any: ...
@overload
def async_httpx_client(
    *, library: Literal["httpx2"], meter: Meter | None = ..., **options: Any
) -> httpx2.AsyncClient: ...
@overload
def async_httpx_client(
    *, library: Literal["httpx"], meter: Meter | None = ..., **options: Any
) -> httpx.AsyncClient: ...
def async_httpx_client(
    *, library: Library | None = None, meter: Meter | None = None, **options: Any
) -> Any:
    """The asynchronous :func:`httpx_client` (``openai.AsyncOpenAI(http_client=…)``)."""
    module = _module(library)
    meter = meter or Meter(**_meter_options(options))
    client = module.AsyncClient(**_client_options(module, options))
    return instrument(client, meter=meter)


_METER_OPTIONS: Final = (
    "ledger",
    "providers",
    "strict",
    "sticky_key",
    "session_prefix",
    "include_usage",
    "policies",
    "router_metadata",
)


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


def _is_async(http: Any) -> bool:
    """Whether ``http`` is an async client: asked of the client, not its transport, since
    a transport may implement both interfaces (``MockTransport`` does)."""
    return inspect.iscoroutinefunction(type(http).send)


def _wrap(transport: Any, meter: Meter, is_async: bool) -> Any:
    if transport is None or isinstance(transport, MeteringTransport | AsyncMeteringTransport):
        return transport
    if is_async:
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
    is_async = _is_async(http)
    http._transport = _wrap(http._transport, meter, is_async)
    http._mounts = {pattern: _wrap(t, meter, is_async) for pattern, t in http._mounts.items()}
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
    "ContextThreadPoolExecutor",
    "InstrumentationError",
    "Meter",
    "MeteringTransport",
    "Recorder",
    "async_httpx_client",
    "bind",
    "context",
    "current",
    "httpx_client",
    "instrument",
    "is_instrumented",
    "sdk_library",
    "uninstrument",
]
