"""The recording core of the SDK instrumentation, shared by every transport adapter.

:class:`Meter` turns one recognised HTTP request into an :class:`Exchange`;
the exchange is fed the response bytes as they pass through to the SDK and,
when the body ends, is closed early or breaks, writes the attempt's row.

Nothing here parses a provider's wire format: parsing is the provider
modules' (``parse_response``, ``parse_error``, ``stream_parser``), the row is
:func:`ledger.attempt.build_event` with :func:`ledger.attempt.cost_of`, and
failures are classified by the same helpers the client uses, so a row written
here is the row the client would have written for the same bytes.

Degrade quietly in production, fail loudly in tests: a parser bug, a body we
cannot read or a ledger that refuses a row is logged once per kind and the
SDK's call goes on untouched; in strict mode (``strict=True`` or
``LEDGER_STRICT=1``) it raises :class:`InstrumentationError` instead.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import threading
import time
import zlib
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from typing import Any, Final

from ledger.attempt import (
    Attempt,
    Call,
    LazyRecorder,
    PolicyChoice,
    Prepared,
    build_event,
    cost_of,
    http_failure,
    in_band_failure,
)
from ledger.errors import (
    LedgerError,
    MalformedResponse,
    PriceConfigurationError,
    ProviderError,
    ProviderTimeout,
    ProviderTransportError,
    StreamInterrupted,
)
from ledger.events import UNKNOWN, Arm, Recorder, UsageEvent, new_id
from ledger.instrument.context import Context
from ledger.instrument.recognise import Recognised, Recogniser, refine
from ledger.policies import PolicySource, apply_to, arm_for
from ledger.price_overrides import NO_OVERRIDES, PriceBook, load_prices
from ledger.providers import Provider, make_provider, wire
from ledger.providers.base import ChatRequest, Endpoint, Parsed, Parsers, StreamParser
from ledger.session_key import DEFAULT_PREFIX, session_key

log = logging.getLogger("ledger.instrument")

_prices: PriceBook | None = None
_prices_lock = threading.Lock()


def price_overrides() -> PriceBook:
    """The nearest price-override file, read once per process. A bad file is logged
    once and ignored here: metering must never break the caller's SDK call (the
    client and ``ledger reprice`` refuse it with the precise error)."""
    global _prices
    with _prices_lock:
        if _prices is None:
            try:
                _prices = load_prices()
            except PriceConfigurationError as exc:
                log.error("ledger: price overrides ignored for metered calls: %s", exc)
                _prices = NO_OVERRIDES
        return _prices


STRICT_ENV: Final = "LEDGER_STRICT"
#: The header both official SDKs send with their attempt number (0 = first try).
RETRY_HEADER: Final = "x-stainless-retry-count"
#: A whole (non-streamed) body larger than this is not kept for parsing.
MAX_BODY_BYTES: Final = 32 * 1024 * 1024
#: The SDK holds the real key; provider objects here only parse, so they get a stand-in.
_NO_KEY: Final = "instrumentation-never-sends"

# (fingerprint, call_id) of the last attempt started in this thread or task: the
# SDKs retry in the same thread/task, so a retry finds its first attempt here.
_last_call: ContextVar[tuple[tuple[str, str, str], str] | None] = ContextVar(
    "ledger_last_call", default=None
)


class InstrumentationError(LedgerError):
    """Strict mode only: the instrumentation could not parse or record an attempt."""


def strict_from_env() -> bool:
    return os.environ.get(STRICT_ENV, "").lower() in ("1", "true", "yes")


class Meter:
    """Recognises calls, builds exchanges, records rows; one per transport.

    ``ledger``: a :class:`Recorder`, a database URL, or None for the process's
    default ledger (opened on the first recorded call). ``providers`` maps URL
    prefixes to provider names. ``sticky_key`` (on by default, ADR 0221 decision 1)
    adds the sticky session key ``<prefix>:<session>:<actor>`` to OpenRouter chat
    requests that carry none, when a ``ledger.context`` session is in force, so an
    agent's turns stay on one upstream and its prompt cache; the row records the key
    sent. ``sticky_key=False`` leaves OpenRouter requests as the SDK built them.

    ``include_usage`` adds ``stream_options: {"include_usage": true}`` to streamed
    chat-completions requests that do not say (OpenAI-style providers that accept
    it): without it OpenAI streams report no usage, and their rows could only say
    so (``usage_reported`` false, a warning once per process). The provider then
    sends one more chunk before ``[DONE]``, with the usage and an **empty**
    ``choices`` list: code that reads ``chunk.choices[0]`` on every chunk must
    skip it. An explicit ``include_usage: false`` in the request is left alone.

    ``policies``: the routing policies applied to OpenRouter chat requests
    (:mod:`ledger.policies`), as the client applies them; True reads those in the
    ledger's database (none when ``ledger`` is another recorder), False applies none.

    ``router_metadata`` (default True): the metering transports add
    ``X-OpenRouter-Metadata: enabled`` to OpenRouter requests that do not set it (or its
    legacy name) themselves, so the row records the upstreams OpenRouter tried inside
    the call (``router_attempts``). The SDK then receives one more field,
    ``openrouter_metadata``, in the body or the stream's final chunk, and nothing else
    changes (OpenAI-style SDKs keep unknown fields, and drop none).
    """

    def __init__(
        self,
        *,
        ledger: Recorder | str | None = None,
        providers: Mapping[str, str] | None = None,
        strict: bool | None = None,
        sticky_key: bool = True,
        session_prefix: str = DEFAULT_PREFIX,
        include_usage: bool = False,
        policies: PolicySource | bool = True,
        router_metadata: bool = True,
    ) -> None:
        self.recogniser = Recogniser(providers)
        self.router_metadata = router_metadata
        self.strict = strict_from_env() if strict is None else strict
        self.sticky_key = sticky_key
        self.include_usage = include_usage
        self.session_prefix = session_prefix
        self._sink = LazyRecorder(ledger)
        self._policies = PolicyChoice(policies, self._sink)
        self._providers: dict[tuple[str, str], Provider] = {}
        self._complained: set[str] = set()
        self._lock = threading.Lock()

    # -- failures: loud in tests, once in production -------------------------------------

    def complain(self, kind: str, message: str, exc: BaseException | None = None) -> None:
        """Raise in strict mode; otherwise log ``message`` the first time ``kind`` happens."""
        if self.strict:
            raise InstrumentationError(message) from exc
        with self._lock:
            if kind in self._complained:
                return
            self._complained.add(kind)
        log.warning("ledger instrumentation: %s (logged once)", message, exc_info=exc)

    def record(self, event: UsageEvent) -> UsageEvent:
        """Record ``event``; the event as stored (a value its row cannot hold repaired)."""
        try:
            return self._sink.record(event)
        except Exception as exc:  # the ledger is never the SDK call's problem
            self.complain("record", f"could not record attempt {event.event_id}: {exc}", exc)
            return event

    def begin_attempt(self, prep: Prepared) -> None:
        """Journal that ``prep`` is being sent (its row if this process dies first)."""
        try:
            self._sink.begin_attempt(prep)
        except Exception as exc:  # the ledger is never the SDK call's problem
            self.complain("begin", f"could not journal attempt {prep.event_id}: {exc}", exc)

    def provider(self, name: str, base_url: str) -> Provider:
        key = (name, base_url)
        found = self._providers.get(key)
        if found is None:
            found = make_provider(name, api_key=_NO_KEY, base_url=base_url)
            with self._lock:
                if len(self._providers) > 64:  # one per base URL: bounded all the same
                    self._providers.clear()
                self._providers[key] = found
        return found

    # -- one attempt ------------------------------------------------------------------------

    def route(
        self, method: str, url: str, host: str, path: str, anthropic: bool
    ) -> Recognised | None:
        return self.recogniser.route(method, url, host, path, anthropic)

    def begin(
        self,
        route: Recognised,
        url: str,
        body: bytes,
        retry_count: str | None,
        ctx: Context,
        timeouts: tuple[type[BaseException], ...],
    ) -> tuple[Exchange, bytes | None]:
        """The exchange for one attempt, and the body to send instead (sticky key added)
        or None to send it unchanged."""
        data = _json_object(body)
        if data is None:
            self.complain(f"request:{route.provider}", f"{route.provider} request body is not JSON")
            data = {}
        route = refine(route, data)
        provider = self.provider(route.provider, route.base_url)
        # Not cut to the column here: the row's requested_model is cut and flagged
        # (ledger.events.recordable), the SDK's call goes on as it was made.
        model = wire.text(data.get("model")) or route.deployment or UNKNOWN
        # The sticky key is added to chat requests only: OpenRouter documents ``session_id``
        # for chat completions, and an unknown field could make a Responses call fail.
        inject = route.endpoint == "chat"
        changed, sent_key = self._session_key(provider, data, ctx, inject=inject)
        asked = usage_asked(provider, data) if inject else True
        options = wire.obj(data.get("stream_options"))
        if not asked and self.include_usage and "include_usage" not in options:
            data["stream_options"] = {**options, "include_usage": True}
            changed = asked = True
        call_id, attempt = _filing((route.provider, url, model), retry_count)
        policy = self._policies.policy_for(provider, model) if inject else None
        arm: Arm | None = None
        if policy is not None:
            unit = sent_key or (
                session_key(ctx.session_id, ctx.actor_id, prefix=self.session_prefix)
                if ctx.session_id
                else call_id
            )
            arm = arm_for(policy.id, unit, policy.holdout_share)
            if apply_to(data, policy, arm, provider):
                changed = True
                if policy.kind == "session_key":
                    sent_key = None  # its holdout is sent without the key
        replaced = None
        if changed:
            replaced = json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()
        sort, order = _routing(provider, data)
        prep = Prepared(
            call=Call(
                messages=(),
                session_id=ctx.session_id,
                actor_id=ctx.actor_id,
                locale=ctx.locale,
                tags=ctx.tags,
            ),
            target=Attempt(provider, model, call_id, attempt, provider.name, model),
            request=ChatRequest(model=model, messages=(), stream=data.get("stream") is True),
            method="POST",
            url=url,
            headers={},
            content=b"",
            session_key=sent_key,
            routing_sort=sort,
            routing_order=order,
            policy_id=policy.id if policy is not None else None,
            arm=arm,
        )
        exchange = Exchange(self, prep, timeouts, route.endpoint)
        exchange.usage_asked = asked
        return exchange, replaced

    def _session_key(
        self, provider: Provider, data: dict[str, Any], ctx: Context, *, inject: bool = True
    ) -> tuple[bool, str | None]:
        """(whether ``data`` was changed, the key it carries)."""
        if not provider.capabilities.sticky_session:
            return False, None
        sent = provider.sent_session_key(data)
        if isinstance(sent, str) and sent:
            return False, sent  # as sent: its row cuts and flags it (events.recordable)
        if not (inject and self.sticky_key and ctx.session_id):
            return False, None
        key = session_key(ctx.session_id, ctx.actor_id, prefix=self.session_prefix)
        provider.place_session_key(data, key)
        return True, key


def usage_asked(provider: Provider, data: Mapping[str, Any]) -> bool:
    """Whether a chat request will get usage back: not streamed, a provider that does
    not take ``stream_options`` (Mistral streams usage unasked), or it asked for it."""
    if data.get("stream") is not True or not provider.sends_stream_options:
        return True
    return wire.obj(data.get("stream_options")).get("include_usage") is True


#: Warned once per process: a streamed chat call that asked for no usage and got none.
_warned_no_usage = False
_warned_lock = threading.Lock()


def warn_no_stream_usage(provider: str) -> None:
    """Say once per process why streamed rows have no tokens, and the fix."""
    global _warned_no_usage
    with _warned_lock:
        if _warned_no_usage:
            return
        _warned_no_usage = True
    log.warning(
        "ledger instrumentation: a streamed %s chat completion without "
        'stream_options={"include_usage": true} reported no usage, so its row has 0 tokens '
        'and usage_reported=false. Pass stream_options={"include_usage": True} to '
        "create(), or meter with include_usage=True (ledger.httpx_client(include_usage=True) "
        "or ledger.instrument(client, include_usage=True)); the usage then comes in a last "
        "chunk whose choices list is empty. (logged once)",
        provider,
    )


def _json_object(body: bytes) -> dict[str, Any] | None:
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def _routing(provider: Provider, data: dict[str, Any]) -> tuple[str | None, str | None]:
    """``(routing_sort, routing_order)`` as sent (read as the client reads them, but not
    refused: the SDK's call is not ours to stop; its row cuts and flags a value past its
    column, see :func:`ledger.events.recordable`)."""
    if not provider.capabilities.provider_routing:
        return None, None
    raw_sort, order = provider.sent_routing(data)
    sort = wire.text(raw_sort) or None
    joined = None
    if isinstance(order, list) and order and all(isinstance(o, str) for o in order):
        joined = ",".join(order)
    return sort, joined


def _filing(fingerprint: tuple[str, str, str], retry_count: str | None) -> tuple[str, int]:
    """``(call_id, attempt)``: an SDK retry joins the call of the attempt it repeats."""
    retries = int(retry_count) if retry_count and retry_count.isdigit() else 0
    last = _last_call.get()
    joins = retries > 0 and last is not None and last[0] == fingerprint
    call_id = last[1] if joins and last is not None else new_id()
    _last_call.set((fingerprint, call_id))
    return call_id, min(retries + 1, 32_767)


#: The content codings the meter decodes (zlib's). Metered requests offer only these
#: (the transport narrows ``accept-encoding``), so a server never answers in br or zstd,
#: which the SDK's HTTP library might decode (when brotli/zstandard are installed)
#: but the meter could not read.
DECODABLE: Final = frozenset({"gzip", "deflate"})
ACCEPT_ENCODING: Final = "gzip, deflate"


def _decoder(header: str) -> Callable[[bytes], bytes] | None:
    """A streaming decompressor for a ``content-encoding`` header; None for identity.

    Codings are listed in the order they were applied, so they are undone in
    reverse (as HTTP libraries do). ``ValueError`` names a coding we cannot decode.
    """
    steps: list[Callable[[bytes], bytes]] = []
    for coding in reversed([c.strip().lower() for c in header.split(",")]):
        if coding in ("", "identity"):
            continue
        if coding not in DECODABLE:
            raise ValueError(coding)
        bits = zlib.MAX_WBITS | (16 if coding == "gzip" else 32)
        steps.append(zlib.decompressobj(bits).decompress)
    if len(steps) <= 1:
        return steps[0] if steps else None

    def chain(data: bytes) -> bytes:
        for step in steps:
            data = step(data)
        return data

    return chain


def _ms(since: float) -> float:
    return (time.perf_counter() - since) * 1000.0


def _parsers(provider: Provider, endpoint: Endpoint) -> Parsers:
    """The parsers the provider declares for the endpoint's wire format; its own when it
    declares none (a URL mapped to a provider that speaks another format)."""
    declared = provider.parsers(endpoint)
    return declared or Parsers(provider.parse_response, provider.stream_parser)


class Exchange:
    """One HTTP attempt in flight: fed the response bytes, finished into one row.

    Every method is safe to call from the transport's hot path: it never raises
    except in strict mode, and :meth:`finish` records at most once.
    """

    def __init__(
        self,
        meter: Meter,
        prep: Prepared,
        timeouts: tuple[type[BaseException], ...],
        endpoint: Endpoint = "chat",
    ) -> None:
        self.meter = meter
        self.prep = prep
        self.timeouts = timeouts
        parsers = _parsers(prep.target.provider, endpoint)
        self._parse_body, self._new_stream_parser = parsers.body, parsers.stream
        self.t0 = time.perf_counter()
        prep.started_at = dt.datetime.now(dt.UTC)
        self.status: int | None = None
        self.headers: Mapping[str, str] = {}
        self.parser: StreamParser | None = None
        self.body: list[bytes] = []
        self.size = 0
        self.decode: Callable[[bytes], bytes] | None = None
        self.readable = True
        self.ttft: float | None = None
        self.finished = False
        self.event: UsageEvent | None = None
        #: The attempt's failure as the client would raise it (None: it succeeded), once
        #: finished: a relay that falls back on it (the gateway) reads it here.
        self.error: ProviderError | None = None
        # The SDK closed the body before its end (the stream's own end, or the whole
        # body for a non-streamed answer): the row is abandoned, its usage partial.
        self.abandoned = False
        self.broke = False
        self.usage_asked = True  # set by Meter.begin: False means a silent-zero risk
        # Built as the request goes out: from now on a kill leaves an interrupted row.
        meter.begin_attempt(prep)

    @property
    def provider(self) -> Provider:
        return self.prep.target.provider

    def respond(self, status: int, headers: Mapping[str, str]) -> None:
        """The status line and headers arrived."""
        self.status = status
        self.headers = headers
        encoding = headers.get("content-encoding")
        if encoding:
            try:
                self.decode = _decoder(encoding)
            except ValueError:
                self.readable = False
                self.meter.complain(f"encoding:{encoding}", f"content-encoding {encoding!r}")
        streamed = headers.get("content-type", "").startswith("text/event-stream")
        if streamed and 200 <= status < 300:
            try:
                self.parser = self._new_stream_parser()
            except Exception as exc:
                self.readable = False
                self.meter.complain(f"parser:{self.provider.name}", "stream parser failed", exc)

    def feed(self, chunk: bytes) -> None:
        """Bytes on their way to the SDK (as received, before any decoding)."""
        if not self.readable or not chunk:
            return
        try:
            data = self.decode(chunk) if self.decode is not None else chunk
            if self.parser is not None:
                if self.parser.feed(data) and self.ttft is None:
                    self.ttft = _ms(self.t0)
                return
            self.size += len(data)
            if self.size > MAX_BODY_BYTES:
                self.readable = False
                self.body.clear()
                return
            self.body.append(data)
        except Exception as exc:
            self.readable = False
            self.meter.complain(
                f"parser:{self.provider.name}", f"{self.provider.name} body unreadable", exc
            )

    def failed(self, exc: BaseException) -> None:
        """No response at all: the request itself raised."""
        name = self.provider.name
        error: ProviderError
        if isinstance(exc, self.timeouts):
            error = ProviderTimeout(f"{name}: timed out ({type(exc).__name__})", provider=name)
        else:
            error = ProviderTransportError(
                f"{name}: transport failure ({type(exc).__name__})", provider=name
            )
        self._write(None, error, streamed=self.prep.request.stream)

    def finish(self, *, broken: BaseException | None = None, early: bool = False) -> None:
        """The body ended (``early``: the SDK closed it first; ``broken``: reading failed)."""
        if self.finished:
            return
        self.finished = True
        try:
            parsed, error = self._outcome(broken, early)
        except InstrumentationError:
            raise
        except Exception as exc:  # a parser bug: the SDK's call must not notice
            self.meter.complain(f"parser:{self.provider.name}", "parser failed", exc)
            parsed, error = None, None
        self.abandoned = self.abandoned and error is None
        if (
            not self.usage_asked
            and self.parser is not None
            and parsed is not None
            and parsed.usage is None
            and error is None
            and not self.abandoned
        ):
            warn_no_stream_usage(self.provider.name)
        # A streamed request is streamed whatever came back (a 429 has a JSON body).
        self._write(parsed, error, streamed=self.parser is not None or self.prep.request.stream)

    def _outcome(
        self, broken: BaseException | None, early: bool
    ) -> tuple[Parsed | None, ProviderError | None]:
        """What the client would make of the same bytes (see ``Client._complete`` and
        ``_StreamCore.finish``)."""
        provider, status = self.provider, self.status or 0
        if not 200 <= status < 300:
            content = b"".join(self.body) if self.readable else b""
            body = provider.parse_error(status, content)
            return None, http_failure(provider, status, body, self.headers)
        if self.parser is not None:
            return self._stream_outcome(self.parser, broken, early)
        if broken is not None:
            cls = ProviderTimeout if isinstance(broken, self.timeouts) else ProviderTransportError
            message = f"{provider.name}: the body broke off ({type(broken).__name__})"
            return None, cls(message, provider=provider.name)
        if not self.readable:
            return None, None
        parsed = self._parse_body(b"".join(self.body))
        if parsed.error is not None:
            return parsed, in_band_failure(
                provider, parsed.error, http_status=status, streamed=False, delivered=False
            )
        if not parsed.valid:
            if early:  # the SDK stopped reading: a partial body says nothing about the server
                self.abandoned = True
                return None, None
            self.meter.complain(
                f"invalid:{provider.name}",
                f"{provider.name} answered HTTP {status} with an unusable body "
                f"({'; '.join(parsed.problems) or 'unknown shape'})",
            )
            return parsed, MalformedResponse(
                f"{provider.name} answered HTTP {status} with an unusable body",
                provider=provider.name,
                http_status=status,
            )
        return parsed, None

    def _stream_outcome(
        self, parser: StreamParser, broken: BaseException | None, early: bool
    ) -> tuple[Parsed, ProviderError | None]:
        provider = self.provider
        parsed = parser.finish()
        self.abandoned = early and not parser.done
        delivered = self.ttft is not None
        if parsed.error is not None:
            error = in_band_failure(
                provider,
                parsed.error,
                http_status=self.status or 200,
                streamed=True,
                delivered=delivered,
            )
            return parsed, error
        if broken is not None:
            self.broke = True
            return parsed, StreamInterrupted(
                f"{provider.name} stream broke: {type(broken).__name__}",
                provider=provider.name,
                http_status=self.status,
                transient=True,
                delivered=delivered,
            )
        return parsed, None

    def _write(self, parsed: Parsed | None, error: ProviderError | None, *, streamed: bool) -> None:
        self.finished = True
        self.error = error
        try:
            event = build_event(
                self.prep,
                latency_ms=_ms(self.t0),
                ttft_ms=self.ttft,
                parsed=parsed,
                error=error,
                http_status=self.status,
                streamed=streamed,
                cost=cost_of(self.prep, parsed, price_overrides()),
                abandoned=self.abandoned,
                cut_short=self.abandoned or self.broke,
            )
        except Exception as exc:
            self.meter.complain(f"row:{self.provider.name}", "could not build the row", exc)
            return
        self.event = self.meter.record(event)
