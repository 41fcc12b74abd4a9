"""One attempt at one provider, as the gateway makes it: the request built by the
providers (sticky key, routing, model) from the client's own body, the bytes sent by
one pooled ``httpx.AsyncClient``, and the response observed by the metering
transport's :class:`~ledger.instrument.meter.Exchange`, so the row is written by the
same parsers and the same row builder as every other front door.

The client's body goes upstream as sent (re-encoded, same JSON) except: ``model``
becomes the route's model; OpenRouter gets the ADR-0221 key in ``session_id``
(:func:`ledger.attempt.prepare` puts it only where ``sticky_session`` is declared);
a stream asks for usage (``stream_options.include_usage``) where the provider
accepts it, because the row needs it (the client still gets only what it asked
for, see :mod:`ledger.gateway.relay`); OpenRouter's request asks for usage
accounting as the client would. Upstreams are asked for ``identity`` encoding so
the relay passes bytes on as they come.
"""

from __future__ import annotations

import json
import os
import socket
import urllib.request
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final, Protocol

import httpx

from ledger.attempt import (
    Attempt,
    AttemptJournal,
    Call,
    Filing,
    PolicyHolder,
    Prepared,
    http_failure,
    prepare,
)
from ledger.errors import ProviderError
from ledger.events import Recorder, UsageEvent
from ledger.gateway.config import GatewayConfig, Target
from ledger.gateway.http1 import Http1Pool, Timeouts
from ledger.gateway.inbound import Inbound
from ledger.instrument.meter import Exchange, Meter
from ledger.providers import Provider, make_provider
from ledger.providers.base import ChatRequest

if TYPE_CHECKING:
    from ledger.budgets.guard import BudgetGuard
    from ledger.budgets.shared import SharedBudgetGuard

    Guard = BudgetGuard | SharedBudgetGuard

#: httpx's timeout family: an attempt that timed out is recorded as ``timeout``.
TIMEOUTS: Final = (httpx.TimeoutException,)


class UpstreamResponse(Protocol):
    """What the relay reads of an upstream answer (:class:`~ledger.gateway.http1.Http1Response`
    or an ``httpx.Response``)."""

    @property
    def status_code(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    def aiter_raw(self) -> AsyncIterator[bytes]: ...

    async def aread(self) -> bytes: ...

    async def aclose(self) -> None: ...


def _httpx_client(config: GatewayConfig) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        timeout=httpx.Timeout(config.timeout_s, connect=10.0),
        # TCP_NODELAY: the request's header and body writes must not wait on Nagle
        # for the server's delayed ACK (a 40 ms stall per call on loopback).
        transport=httpx.AsyncHTTPTransport(
            limits=httpx.Limits(max_connections=1000, max_keepalive_connections=200),
            socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
        ),
    )


@dataclass(frozen=True, slots=True)
class Counted:
    """A token count's answer: the provider's status and body, and its error (redacted)
    when the status is not 2xx."""

    status: int
    body: bytes
    error: ProviderError | None


class GuardedRecorder:
    """The ledger, with the budget guard told of every row (as the client does)."""

    def __init__(self, ledger: Recorder, guard: Guard | None) -> None:
        self.ledger = ledger
        self.guard = guard

    def record(self, event: UsageEvent) -> str:
        if self.guard is not None:
            self.guard.observe(event)  # the spend happened whether or not the ledger took it
        return self.ledger.record(event)

    def begin_attempt(self, event: UsageEvent) -> None:
        """Journal an attempt's start, when the ledger journals (a Ledger does)."""
        if isinstance(self.ledger, AttemptJournal):
            self.ledger.begin_attempt(event)


class Upstreams:
    """The providers, the HTTP pool and the meter of one gateway process."""

    def __init__(
        self,
        config: GatewayConfig,
        ledger: Recorder,
        *,
        guard: Guard | None = None,
        http: httpx.AsyncClient | None = None,
        strict: bool | None = None,
    ) -> None:
        self.config = config
        #: Consulted before each attempt is sent, told of every row (as the client does).
        self.guard = guard
        # The lean HTTP/1.1 pool (see ledger.gateway.http1) unless the caller gives an httpx
        # client or the environment names a proxy, which only httpx honours.
        self.http: httpx.AsyncClient | None = http
        if http is None and urllib.request.getproxies():
            self.http = _httpx_client(config)
        self.pool = Http1Pool(Timeouts(connect=10.0, read=config.timeout_s))
        # The gateway forwards what its client sent: no sticky key of the meter's own.
        #: Where rows go: the ledger, the budget guard told of each (OTLP spans' rows too).
        self.recorder = GuardedRecorder(ledger, guard)
        # The gateway's own prepare applies the routing policies (the meter sees none).
        self.meter = Meter(ledger=self.recorder, strict=strict, sticky_key=False, policies=False)
        #: The routing policies in the ledger's database (ledger.policies), if it has any.
        self.policies = ledger.policies if isinstance(ledger, PolicyHolder) else None
        self._providers: dict[str, Provider] = {}

    def provider(self, name: str) -> Provider:
        """The provider ``name``, built once with the configured URL and key (else its
        environment variables); ``ProviderConfigurationError`` when it has no key."""
        found = self._providers.get(name)
        if found is None:
            settings = self.config.providers.get(name)
            options: dict[str, Any] = {}
            if settings is not None and settings.base_url:
                options["base_url"] = settings.base_url
            if settings is not None and settings.api_key_env:
                options["api_key"] = os.environ.get(settings.api_key_env)
            found = self._providers[name] = make_provider(name, **options)
        return found

    def prepare(
        self, inbound: Inbound, target: Target, body: Mapping[str, Any], filing: Filing
    ) -> Prepared:
        """The attempt's request (``body`` in the target's wire format); ``ValueError``
        for what the ledger could not record, nothing sent."""
        provider = self.provider(target.provider)
        rest = {k: v for k, v in body.items() if k not in ("model", "messages")}
        asks_usage = provider.sends_stream_options
        if inbound.stream and asks_usage:
            options = rest.get("stream_options")
            options = dict(options) if isinstance(options, dict) else {}
            rest["stream_options"] = {**options, "include_usage": True}
        ident = inbound.identity
        call = Call(
            messages=body.get("messages") or (),
            session_id=ident.session_id,
            actor_id=ident.actor_id,
            locale=ident.locale,
            tags=ident.tags,
            extra_body=rest,
            paused=ident.paused,
        )
        attempt = Attempt(
            provider,
            target.model,
            filing.call_id,
            filing.attempt,
            filing.requested_provider,
            filing.requested_model,
        )
        policy = None
        if self.policies is not None and provider.capabilities.provider_routing:
            policy = self.policies.policy_for(target.model)
        prep = prepare(
            call,
            attempt,
            stream=inbound.stream,
            session_prefix=self.config.session_prefix,
            policy=policy,
        )
        # The worst case the budget guard reserves reads the caller's output limit; it
        # travels in the body (extra_body), so the Call learns it only now.
        limit = body.get("max_completion_tokens") or body.get("max_tokens")
        if isinstance(limit, int) and not isinstance(limit, bool):
            prep.call = replace(call, max_tokens=limit)
        return prep

    def exchange(self, prep: Prepared, endpoint: str) -> Exchange:
        """The meter's record of this attempt, started now."""
        return Exchange(
            self.meter, prep, TIMEOUTS, "messages" if endpoint == "messages" else "chat"
        )

    async def send(self, prep: Prepared, exchange: Exchange) -> UpstreamResponse | None:
        """Send; the response with its body unread, or None after recording a transport
        failure (``exchange.error`` says which)."""
        headers = {**prep.headers, "accept-encoding": "identity"}
        response: UpstreamResponse
        try:
            if self.http is None:
                response = await self.pool.send(prep.method, prep.url, headers, prep.content)
            else:
                request = self.http.build_request(
                    prep.method, prep.url, headers=headers, content=prep.content
                )
                response = await self.http.send(request, stream=True)
        except httpx.HTTPError as exc:
            exchange.failed(exc)
            return None
        exchange.respond(response.status_code, response.headers)
        return response

    async def count_tokens(self, target: Target, body: Mapping[str, Any]) -> Counted:
        """Anthropic's own count for ``body`` (``POST /v1/messages/count_tokens``, beside
        ``/v1/messages`` at the provider's base URL, with its key and version headers).

        Not metered: the endpoint is free and makes no row. ``httpx.HTTPError`` when the
        provider could not be reached."""
        provider = self.provider(target.provider)
        built = provider.build_request(ChatRequest(model=target.model, messages=()))
        url = built.url + "/count_tokens"
        headers = {**built.headers, "accept-encoding": "identity"}
        content = json.dumps({**body, "model": target.model}, ensure_ascii=False).encode()
        response: UpstreamResponse
        if self.http is None:
            response = await self.pool.send("POST", url, headers, content)
        else:
            request = self.http.build_request("POST", url, headers=headers, content=content)
            response = await self.http.send(request, stream=True)
        try:
            answer = await response.aread()
        finally:
            await response.aclose()
        if 200 <= response.status_code < 300:
            return Counted(response.status_code, answer, None)
        error = http_failure(
            provider,
            response.status_code,
            provider.parse_error(response.status_code, answer),
            response.headers,
        )
        return Counted(response.status_code, answer, error)

    async def aclose(self) -> None:
        await self.pool.aclose()
        if self.http is not None:
            await self.http.aclose()
