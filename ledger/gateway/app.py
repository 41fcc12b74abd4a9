"""The gateway as a plain ASGI application (no framework: four routes do not need one).

::

    POST /v1/chat/completions   OpenAI wire, plain and SSE
    POST /v1/messages           Anthropic wire, plain and SSE
    POST /v1/responses          OpenAI's Responses API, plain and SSE, served through chat
                                completions on any route (:mod:`ledger.gateway.responses`)
    POST /v1/messages/count_tokens
                                Anthropic's token count, forwarded to Anthropic when the
                                model's first route is Anthropic (else a 400 saying so)
    GET  /v1/models             what the gateway serves: the public model names, then one
                                ``<prefix>/<model>`` entry per pass-through prefix
                                (OpenAI's list shape, or Anthropic's when the request
                                carries anthropic-version)
    GET  /v1/models/{id}        one of them (any ``<prefix>/<model>`` of a pass-through)
    GET  /healthz               liveness, no key needed
    POST /v1/traces             OTLP/HTTP traces in (``otlp = true``): GenAI client spans
                                from other instrumentations become rows
                                (:class:`ledger.otel.receiver.OTLPReceiver`), behind the
                                same gateway keys

A request passes, in order: the gateway key (401 without a valid one), the
ADR-0016 rate limiter (:class:`~ledger.resilience.ResilienceMiddleware`, keyed by
the gateway key's name, else the proxy-aware client address), the response cache
when configured (:mod:`ledger.gateway.cache`), then the cascade
(:mod:`ledger.gateway.relay`). Every refusal is an error in the wire format of the
route called. A watcher on the ASGI ``receive``
channel cancels the call when the client disconnects, which closes the upstream
request and records the row (:func:`ledger.gateway.relay._disconnected`).

Importable for any ASGI server: ``uvicorn --factory ledger.gateway.app:from_environment``
reads the configuration file (see :mod:`ledger.gateway.config`) in each worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import httpx

from ledger.errors import (
    BudgetExceeded,
    ConfigurationError,
    HTTPResponse,
    ProviderConfigurationError,
    TooManyRequests,
)
from ledger.events import Recorder
from ledger.gateway.access_log import ACCESS_LOG_ENV, configure_access_log, log_access
from ledger.gateway.answers import JSON, NO_STORE, error_response
from ledger.gateway.auth import KeyTable, presented_key
from ledger.gateway.cache import MAX_STREAM_BYTES, Answer, Capture, GatewayCache, cacheable
from ledger.gateway.config import GatewayConfig, GatewayKey, Target, Wire, load_config
from ledger.gateway.connections import configure_server
from ledger.gateway.inbound import BadRequest, Inbound, parse, parse_responses
from ledger.gateway.intake import (
    BUSY_RETRY_AFTER_S,
    BodyBudget,
    BodyBudgetFull,
    BodyStalled,
    BodyTooLarge,
    ClientGone,
    Reservation,
    declared_length,
    read_body,
)
from ledger.gateway.relay import Caller, Outcome, bodies_for
from ledger.gateway.translate import Untranslatable
from ledger.gateway.upstream import Upstreams
from ledger.resilience.cache import ResponseCache
from ledger.resilience.identity import ClientIdentity
from ledger.resilience.limiter import RateLimiter, SlidingWindowLimiter
from ledger.resilience.middleware import ResilienceMiddleware

if TYPE_CHECKING:
    from ledger.budgets.guard import BudgetGuard
    from ledger.budgets.shared import SharedBudgetGuard
    from ledger.events import UsageEvent
    from ledger.otel.receiver import OTLPReceiver
    from ledger.resilience.redis_backend import RedisConnections

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

log = logging.getLogger("ledger.gateway")

COUNT_TOKENS: Final = "/v1/messages/count_tokens"
RESPONSES: Final = "/v1/responses"
ROUTES: Final[dict[str, Wire]] = {
    "/v1/chat/completions": "chat",
    "/v1/messages": "messages",
    COUNT_TOKENS: "messages",
    RESPONSES: "chat",  # served through chat completions (ledger.gateway.responses)
}
MODELS: Final = "/v1/models"
TRACES: Final = "/v1/traces"
#: The key prefix of the gateway's limiter windows and cache entries in Redis.
REDIS_PREFIX: Final = "ledger:gateway:"
#: Where the authenticated key travels from the auth step to the limiter's key.
KEY_STATE: Final = "ledger.gateway.key"
#: The tags of the key a ``/v1/traces`` request presented, for the rows its spans make
#: (the receiver records synchronously inside the request's task, so it sees them).
_TRACE_KEY_TAGS: ContextVar[Mapping[str, str]] = ContextVar("ledger_gateway_trace_tags")


class KeyIdentity(ClientIdentity):
    """The limiter's key: the gateway key's name, else the proxy-aware client address."""

    def key(self, scope: Mapping[str, Any]) -> str:
        found: GatewayKey | None = scope.get("state", {}).get(KEY_STATE)
        return f"key:{found.name}" if found is not None else super().key(scope)


def _wire_of(scope: Scope) -> Wire:
    return ROUTES.get(scope.get("path", ""), "chat")


def _refusal(scope: Scope, exc: TooManyRequests) -> HTTPResponse:
    return error_response(
        _wire_of(scope), 429, str(exc), code="rate_limited", retry_after=exc.retry_after
    )


def _busy(wire: Wire) -> HTTPResponse:
    """The answer to a request whose body does not fit the body budget now."""
    message = "the gateway is busy reading other large request bodies; retry shortly"
    return error_response(wire, 503, message, code="overloaded", retry_after=BUSY_RETRY_AFTER_S)


def _headers(scope: Scope) -> dict[bytes, bytes]:
    return {k.lower(): v for k, v in scope.get("headers") or ()}


async def _send_answer(send: Send, answer: HTTPResponse) -> None:
    status, headers, body = answer
    headers = [*headers, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class GatewayApp:
    """The ASGI application; see the module docstring.

    ``ledger``: where rows go (a :class:`~ledger.store.ledger.Ledger`, or anything
    with its ``record``); it is flushed at shutdown when it has ``flush``.
    ``guard``: the budget guard (None: budgets not enforced). ``limiter``: the
    ADR-0016 limiter (None: built from the configuration's ``rate_limit``, if any).
    ``cache``: the response cache (None: an in-process one when ``response_cache``).
    ``redis``: the Redis connections behind the limiter and cache, closed at shutdown.
    """

    def __init__(
        self,
        config: GatewayConfig,
        ledger: Recorder,
        *,
        guard: BudgetGuard | SharedBudgetGuard | None = None,
        limiter: RateLimiter | None = None,
        upstreams: Upstreams | None = None,
        cache: ResponseCache[Answer] | None = None,
        redis: RedisConnections | None = None,
        strict: bool | None = None,
    ) -> None:
        self.config = config
        self.ledger = ledger
        self.redis = redis  # closed at shutdown
        self.keys = KeyTable(config.keys)
        self.upstreams = upstreams or Upstreams(config, ledger, guard=guard, strict=strict)
        # Every provider a route can reach is built now (as the cascade does): a missing key
        # fails at start, not under load when the primary first answers 429.
        named = {t.provider for chain in config.models.values() for t in chain}
        for name in sorted(named | set(config.passthrough)):
            self.upstreams.provider(name)
        self.caller = Caller(self.upstreams, default_retry_after_s=config.default_retry_after_s)
        if cache is None and config.response_cache:
            cache = ResponseCache(ttl_s=config.cache_ttl_s)
        self.cache = GatewayCache(cache, ledger) if cache is not None else None
        if limiter is None and config.rate_limit is not None:
            limiter = SlidingWindowLimiter(*config.rate_limit)
        identity = KeyIdentity.from_spec(config.trusted_proxies)
        self._call_app = ResilienceMiddleware(
            self._call,
            limiter=limiter,
            identity=KeyIdentity(identity.networks, identity.hops),
            refusal=_refusal,
        )
        self._in_flight = 0
        self.bodies = BodyBudget(config.body_budget_bytes)
        self.otlp = _receiver(self.upstreams.recorder) if config.otlp else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path, method = scope.get("path", ""), scope.get("method", "GET")
        if path == "/healthz":
            await _send_answer(send, (200, [JSON, NO_STORE], b'{"status":"ok"}'))
            return
        wire = ROUTES.get(path)
        if path == TRACES and self.otlp is not None:
            wire = None
        elif wire is None and path != MODELS and not path.startswith(MODELS + "/"):
            await _send_answer(send, error_response("chat", 404, f"no route {path}"))
            return
        expected = "GET" if wire is None else "POST"
        if method != expected and path != TRACES:
            await _send_answer(send, error_response(wire or "chat", 405, f"use {expected} {path}"))
            return
        headers = _headers(scope)
        found = self.keys.find(presented_key(headers))
        if found is None and self.config.auth == "keys":
            answer_wire: Wire = wire or ("messages" if b"anthropic-version" in headers else "chat")
            message = "a valid gateway key is required (Authorization: Bearer … or x-api-key)"
            await _send_answer(
                send, error_response(answer_wire, 401, message, code="invalid_api_key")
            )
            return
        scope.setdefault("state", {})[KEY_STATE] = found
        if path == TRACES and self.otlp is not None:
            await self._traces(scope, receive, send, headers, found)
            return
        if wire is None:
            await self._models(path, headers, send)
            return
        await self._call_app(scope, receive, send)

    async def _traces(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        headers: Mapping[bytes, bytes],
        key: GatewayKey | None,
    ) -> None:
        """OTLP in: its declared body counted in the body budget while it is handled (the
        receiver enforces its own per-request cap), its rows tagged with the key's tags."""
        assert self.otlp is not None
        reservation = Reservation(self.bodies)
        declared = declared_length(headers)
        try:
            reservation.grow(min(declared or 0, self.otlp.max_body_bytes + 1))
        except BodyBudgetFull:
            await _send_answer(send, _busy("chat"))
            return
        token = _TRACE_KEY_TAGS.set(key.tags if key is not None else {})
        try:
            await self.otlp(scope, receive, send)
        finally:
            _TRACE_KEY_TAGS.reset(token)
            reservation.release()

    async def _models(self, path: str, headers: Mapping[bytes, bytes], send: Send) -> None:
        anthropic = b"anthropic-version" in headers
        wire: Wire = "messages" if anthropic else "chat"
        entries = served_models(self.config)
        if path != MODELS:  # GET /v1/models/{id}: the id may hold slashes (openrouter/…)
            wanted = path[len(MODELS) + 1 :]
            found = _model_entry(self.config, wanted)
            if found is None:
                message = f"model {wanted!r} is not served by this gateway"
                answer = error_response(wire, 404, message, code="model_not_found")
                await _send_answer(send, answer)
                return
            one = _anthropic_model(found) if anthropic else _openai_model(found)
            await _send_answer(send, (200, [JSON], json.dumps(one).encode()))
            return
        data: dict[str, Any]
        if anthropic:
            listed = [_anthropic_model(e) for e in entries]
            data = {
                "data": listed,
                "has_more": False,
                "first_id": listed[0]["id"] if listed else None,
                "last_id": listed[-1]["id"] if listed else None,
            }
        else:
            data = {"object": "list", "data": [_openai_model(e) for e in entries]}
        await _send_answer(send, (200, [JSON], json.dumps(data).encode()))

    async def _call(self, scope: Scope, receive: Receive, send: Send) -> None:
        wire = ROUTES[scope["path"]]
        started, t0 = dt.datetime.now(dt.UTC), time.perf_counter()
        outcome = Outcome()
        key: GatewayKey | None = scope["state"].get(KEY_STATE)
        model: str | None = None
        self._in_flight += 1
        reservation = Reservation(self.bodies)
        try:
            headers = _headers(scope)
            try:
                raw = await read_body(
                    receive,
                    headers,
                    reservation,
                    max_bytes=self.config.max_body_bytes,
                    idle_timeout_s=self.config.body_idle_timeout_s,
                )
            except BodyTooLarge:
                limit = self.config.max_body_bytes
                message = f"request body too large (the limit is {limit} bytes)"
                await _send_answer(send, error_response(wire, 413, message))
                outcome.status = 413
                return
            except BodyBudgetFull:
                outcome.status = 503
                await _send_answer(send, _busy(wire))
                return
            except BodyStalled:
                outcome.status = 408
                idle = self.config.body_idle_timeout_s
                message = f"the request body stopped arriving (nothing for {idle:g} s)"
                status, answer_headers, body = error_response(wire, 408, message)
                # The client is not sending: nothing more will come on this connection.
                closing = [*answer_headers, (b"connection", b"close")]
                await _send_answer(send, (status, closing, body))
                return
            except ClientGone:
                outcome.status = 499  # nginx's "client closed request": nothing was sent
                return
            try:
                tags = key.tags if key is not None else {}
                inbound = (
                    parse_responses(raw, headers, tags)
                    if scope["path"] == RESPONSES
                    else parse(wire, raw, headers, tags)
                )
                model = inbound.model
                chain = self.config.chain(inbound.model)
                if chain is None:
                    raise LookupError(inbound.model)
                bodies = bodies_for(inbound, chain) if scope["path"] != COUNT_TOKENS else []
            except (BadRequest, Untranslatable) as exc:
                outcome.status = 400
                await _send_answer(send, error_response(wire, 400, str(exc)))
                return
            except LookupError:
                outcome.status = 404
                message = _not_served(self.config, model)
                await _send_answer(send, error_response(wire, 404, message, code="model_not_found"))
                return
            if scope["path"] == COUNT_TOKENS:
                await self._count_tokens(inbound, chain[0], send, outcome)
                return
            if self.cache is not None and cacheable(inbound) and inbound.stream:
                call = self._cached_stream(inbound, chain, bodies, send, outcome)
            elif self.cache is not None and cacheable(inbound):
                call = self._cached(inbound, chain, bodies, send, outcome)
            else:
                call = self.caller.run(inbound, chain, bodies, send, outcome)
            await self._watched(call, receive)
        except BudgetExceeded as exc:
            outcome.status = 429
            await _send_answer(
                send,
                error_response(
                    wire, 429, str(exc), code="budget_exceeded", retry_after=_to_midnight()
                ),
            )
        except ProviderConfigurationError as exc:
            outcome.status = 502
            log.error("gateway: %s", exc)
            await _send_answer(
                send,
                error_response(
                    wire, 502, "the gateway cannot reach this model's provider (see its log)"
                ),
            )
        finally:
            reservation.release()
            self._in_flight -= 1
            log_access(scope, started, t0, outcome, key, model)

    async def _count_tokens(
        self, inbound: Inbound, target: Target, send: Send, outcome: Outcome
    ) -> None:
        """``POST /v1/messages/count_tokens``: Anthropic's own count when the model's first
        route is Anthropic (the route that would serve the call); otherwise a 400 naming
        the route, since an estimate for another provider's tokenizer would be a guess."""
        if target.wire != "messages":
            outcome.status = 400
            message = (
                f"model {inbound.model!r} is served first by {target.provider} "
                f"({target.model}), which has no token-counting endpoint: count_tokens is "
                "answered for models whose first route is Anthropic; for this one read "
                "the usage of an answer (or count with the provider's tokenizer locally)"
            )
            await _send_answer(send, error_response("messages", 400, message))
            return
        try:
            counted = await self.upstreams.count_tokens(target, inbound.body)
        except httpx.HTTPError as exc:
            outcome.status = 502
            log.warning("gateway: count_tokens at %s failed: %r", target.provider, exc)
            message = f"{target.provider} could not be reached to count tokens"
            await _send_answer(send, error_response("messages", 502, message))
            return
        outcome.status = counted.status
        if counted.error is None:
            await _send_answer(send, (counted.status, [JSON, NO_STORE], counted.body))
            return
        answer = error_response(
            "messages",
            counted.status,
            str(counted.error),
            code=counted.error.code,
            retry_after=counted.error.retry_after,
        )
        await _send_answer(send, answer)

    async def _cached(
        self,
        inbound: Inbound,
        chain: tuple[Target, ...],
        bodies: list[Mapping[str, Any]],
        send: Send,
        outcome: Outcome,
    ) -> None:
        """A whole answer through the response cache (see :mod:`ledger.gateway.cache`)."""
        assert self.cache is not None

        async def compute() -> Answer:
            capture = Capture()
            await self.caller.run(inbound, chain, bodies, capture.send, outcome)
            return capture.answer(outcome)

        value, hit = await self.cache.answer(inbound, chain, compute)
        outcome.status = value["status"]
        headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in value["headers"]]
        if hit:
            headers = [h for h in headers if h[0] != b"x-ledger-call-id"]
        headers.append((b"x-ledger-cache", b"hit" if hit else b"miss"))
        await send({"type": "http.response.start", "status": value["status"], "headers": headers})
        await send({"type": "http.response.body", "body": value["body"].encode()})

    async def _cached_stream(
        self,
        inbound: Inbound,
        chain: tuple[Target, ...],
        bodies: list[Mapping[str, Any]],
        send: Send,
        outcome: Outcome,
    ) -> None:
        """A stream replayed from the cache, else relayed live and stored if it ended
        normally (see :mod:`ledger.gateway.cache`)."""
        assert self.cache is not None
        stored = await self.cache.stored(inbound, chain)
        if stored is not None:
            outcome.status = stored["status"]
            headers = [
                (k.encode("latin-1"), v.encode("latin-1"))
                for k, v in stored["headers"]
                if k != "x-ledger-call-id"
            ]
            headers.append((b"x-ledger-cache", b"hit"))
            await send(
                {"type": "http.response.start", "status": outcome.status, "headers": headers}
            )
            await send({"type": "http.response.body", "body": stored["body"].encode()})
            return
        capture = Capture(send, limit=MAX_STREAM_BYTES)
        await self.caller.run(inbound, chain, bodies, capture.send, outcome)
        await self.cache.keep(inbound, capture.answer(outcome))

    async def _watched(self, call: Awaitable[None], receive: Receive) -> None:
        """Run ``call``, cancelling it if the client disconnects first."""
        task = asyncio.ensure_future(call)
        watcher = asyncio.ensure_future(_disconnect(receive))
        try:
            await asyncio.wait((task, watcher), return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not task.done():
                task.cancel()
            watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        if not task.cancelled() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def aclose(self) -> None:
        """Close the upstream connections and flush the ledger (rows reach the database)."""
        await self.upstreams.aclose()
        drain = getattr(self.upstreams.guard, "drain", None)
        if drain is not None:
            await drain()  # the last rows' spend reaches the shared budget totals
        if self.redis is not None:
            await self.redis.aclose()
            self.redis.close()
        flush = getattr(self.ledger, "flush", None)
        if callable(flush):
            await asyncio.to_thread(flush)


@dataclass(frozen=True, slots=True)
class ModelEntry:
    """One thing ``GET /v1/models`` lists: a public name (``passthrough``: False) or a
    pass-through prefix's ``<prefix>/<model>`` pattern, and who serves it."""

    id: str
    owned_by: str
    passthrough: bool = False


def served_models(config: GatewayConfig) -> list[ModelEntry]:
    """What the gateway serves: the public names, sorted, then one ``<prefix>/<model>``
    entry per pass-through prefix (any model id after the prefix goes to that provider)."""
    named = [ModelEntry(n, config.models[n][0].provider) for n in sorted(config.models)]
    return named + [ModelEntry(f"{p}/<model>", p, True) for p in config.passthrough]


def _model_entry(config: GatewayConfig, wanted: str) -> ModelEntry | None:
    """The entry for ``GET /v1/models/{wanted}``: a public name, or a pass-through id."""
    chain = config.chain(wanted)
    if chain is None:
        return None
    if wanted in config.models:
        return ModelEntry(wanted, chain[0].provider)
    return ModelEntry(wanted, chain[0].provider, True)


def _not_served(config: GatewayConfig, model: str | None) -> str:
    """The 404's message: what ``GET /v1/models`` lists, pass-through prefixes named."""
    if not config.passthrough:
        return f"model {model!r} is not served by this gateway (GET /v1/models lists them)"
    prefixes = ", ".join(f"'{p}/<model>'" for p in config.passthrough)
    return (
        f"model {model!r} is not served by this gateway (GET /v1/models lists the names; "
        f"{prefixes} pass any model of that provider through)"
    )


def _description(entry: ModelEntry) -> str:
    if not entry.passthrough:
        return entry.id
    prefix = entry.owned_by
    return f"{entry.id} (any {prefix} model id after '{prefix}/', passed through to {prefix})"


def _openai_model(entry: ModelEntry) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": entry.id,
        "object": "model",
        "created": 0,
        "owned_by": entry.owned_by,
    }
    if entry.passthrough:
        out["description"] = _description(entry)
    return out


def _anthropic_model(entry: ModelEntry) -> dict[str, Any]:
    return {
        "type": "model",
        "id": entry.id,
        "display_name": _description(entry),
        "created_at": "1970-01-01T00:00:00Z",
    }


def _receiver(recorder: Recorder) -> OTLPReceiver:
    """The OTLP receiver, recording through the gateway's own recorder (the budget guard
    counts spans' spend as it counts the gateway's calls)."""
    try:
        from ledger.otel.receiver import OTLPReceiver
    except ImportError as exc:
        raise ConfigurationError(
            f"otlp = true needs the OpenTelemetry packages ({exc.name} is missing): "
            "pip install 'ledger[otel]'"
        ) from None

    def record(event: UsageEvent) -> str:
        # Every row made through a key carries its tags, the key's winning (as for calls).
        key_tags = _TRACE_KEY_TAGS.get({})
        if key_tags:
            event.tags = {**(event.tags or {}), **key_tags}
        return recorder.record(event)

    return OTLPReceiver(record)


async def _disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


def _to_midnight() -> float:
    now = dt.datetime.now(dt.UTC)
    tomorrow = (now + dt.timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    return (tomorrow - now).total_seconds()


def create_app(
    config: GatewayConfig, ledger: Recorder | None = None, *, strict: bool | None = None
) -> GatewayApp:
    """The app for ``config``: rows to ``ledger`` (default: the process's ledger), with the
    budget guard when ``budgets = true`` and Redis backends when ``redis_url`` is set."""
    from ledger.store.ledger import default_ledger

    recorder = ledger if ledger is not None else default_ledger()
    local: BudgetGuard | None = None
    if config.budgets:
        from ledger.budgets import BudgetGuard
        from ledger.budgets import load_config as load_budgets

        local = BudgetGuard.from_ledger(load_budgets())
    guard: BudgetGuard | SharedBudgetGuard | None = local
    limiter: RateLimiter | None = None
    cache: ResponseCache[Answer] | None = None
    redis = None
    shared = config.rate_limit is not None or config.response_cache or guard is not None
    if config.redis_url and shared:
        from ledger.resilience import (
            RedisCacheStore,
            RedisConnections,
            RedisHealth,
            RedisSlidingWindowLimiter,
        )

        redis = RedisConnections(config.redis_url)
        health = RedisHealth()  # one outage warning for the limiter and the cache together
        if config.rate_limit is not None:
            limit, window = config.rate_limit
            limiter = RedisSlidingWindowLimiter(
                redis,
                limit,
                window,
                prefix=REDIS_PREFIX,
                health=health,
                fallback=SlidingWindowLimiter(limit, window),
            )
        if config.response_cache:
            store = RedisCacheStore(redis, prefix=REDIS_PREFIX, health=health)
            cache = ResponseCache(ttl_s=config.cache_ttl_s, shared=store)
        if local is not None:
            from ledger.budgets.shared import SharedBudgetGuard

            guard = SharedBudgetGuard(local, redis, prefix=f"{REDIS_PREFIX}budget:", health=health)
            guard.seed_from_local()
    return GatewayApp(
        config, recorder, guard=guard, limiter=limiter, cache=cache, redis=redis, strict=strict
    )


def from_environment() -> GatewayApp:
    """``uvicorn --factory ledger.gateway.app:from_environment``: the configuration file
    found from the working directory (or ``LEDGER_GATEWAY_FILE``)."""
    if os.environ.get(ACCESS_LOG_ENV) == "1":
        configure_access_log()
    config = load_config()
    configure_server(config)  # a worker of `ledger gateway --workers N`: its connections
    return create_app(config)
