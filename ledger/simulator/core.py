"""The simulator's pure core: a parsed request in, a completion or a failure out.

No I/O and no waiting: the core decides everything about a request when it
arrives (route, faults, cache reads and writes, tokens, cost, timings) and
returns it as data; the wire modules render it in a provider's format and the
adapters (httpx transports, ASGI app) do the waiting on the simulator's clock
and the byte shuffling. Deterministic for a seed and a request sequence.
"""

from __future__ import annotations

import heapq
import math
import random
import threading
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Final

from ledger.simulator.admin_reports import ReportStore
from ledger.simulator.cachettl import FIVE_MINUTES_S
from ledger.simulator.catalog import Catalog, ModelPool, Service, UpstreamSpec, default_catalog
from ledger.simulator.clock import Clock, VirtualClock
from ledger.simulator.faults import FAILING_KINDS, Fault, FaultInjector, FaultKind
from ledger.simulator.generations import GenerationStore, RouterTry
from ledger.simulator.promptcache import CacheResult, Prompt, PromptCache, text_tokens
from ledger.simulator.routing import ProviderPrefs, Router, StickyKey
from ledger.simulator.structured import Shaped, Wanted, pieces_of, shape

_MTOK: Final = Decimal(1_000_000)
_ALNUM: Final = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
_WORDS: Final = (
    *("the", "a", "of", "to", "and", "in", "is", "for", "that", "on", "with", "as", "it"),
    *("cache", "route", "model", "agent", "token", "cost", "ledger", "session", "upstream"),
    *("call", "result", "plan", "step", "check", "value", "output", "input", "reply", "done"),
)
_WORDS_PER_PIECE: Final = 6
#: Time an upstream takes to fail before OpenRouter moves on, as a share of its TTFT.
_FAILED_ATTEMPT_SHARE: Final = 0.3
#: Seconds an upstream at capacity takes to refuse a request.
_REFUSAL_S: Final = 0.02


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """A chat request, whatever the wire format it came in."""

    service: Service
    model: str
    prompt: Prompt
    stream: bool = False
    max_tokens: int | None = None
    session_key: str | None = None
    provider: ProviderPrefs = field(default_factory=ProviderPrefs)
    account: str = "anonymous"
    #: The request asked OpenRouter for its router metadata (``X-OpenRouter-Metadata``).
    router_metadata: bool = False
    #: Tools and output format: whether the answer is a tool call or JSON, not free text.
    wanted: Wanted = field(default_factory=Wanted)
    #: The cache lifetime its ``cache_control`` markers ask for (:mod:`.cachettl`).
    cache_ttl_s: float = FIVE_MINUTES_S


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts (OpenAI conventions: reads and writes inside prompt_tokens) and charge."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    cache_write_tokens: int
    reasoning_tokens: int
    prompt_cost: Decimal
    completion_cost: Decimal
    #: Of ``cache_write_tokens``, those written with a 1-hour lifetime (billed at its rate).
    cache_write_1h_tokens: int = 0

    @property
    def uncached_tokens(self) -> int:
        return self.prompt_tokens - self.cached_tokens - self.cache_write_tokens

    @property
    def cost(self) -> Decimal:
        return self.prompt_cost + self.completion_cost


@dataclass(frozen=True, slots=True)
class Completion:
    """A served request. ``fault`` is a mid-stream error or malformed body to render.

    Routed (OpenRouter) completions say what the router did: ``tried`` every upstream it
    sent the request to, in order (the failures it fell back past, then the one that
    served), and ``endpoints`` the candidates it considered.

    ``tool``: the answer is a call of this tool, ``pieces`` the fragments of its JSON
    arguments (:mod:`ledger.simulator.structured`); None: ``pieces`` are the text.
    """

    ident: str
    created: int
    model: str
    upstream: str
    pieces: tuple[str, ...]
    usage: Usage
    ttft_s: float
    total_s: float
    fault: Fault | None = None
    tried: tuple[RouterTry, ...] = ()
    endpoints: tuple[str, ...] = ()
    tool: str | None = None


@dataclass(frozen=True, slots=True)
class Failure:
    """A request that got no completion; ``status`` 0 means the connection dropped."""

    kind: str
    status: int
    message: str
    latency_s: float
    retry_after_s: float | None = None
    upstream: str | None = None
    previous: tuple[tuple[str, int], ...] = ()


Outcome = Completion | Failure


def charge(
    spec: UpstreamSpec, prompt: int, read: int, write: int, output: int, *, write_1h: bool = False
) -> Usage:
    """The real charge of one served request on ``spec``, cache discounts included;
    ``write_1h``: its writes have a 1-hour lifetime (priced at the 1-hour rate)."""
    read_price = spec.cache_read_per_mtok if spec.cache_read_per_mtok is not None else Decimal(0)
    write_price = spec.cache_write_per_mtok
    reported_write = write if write_price is not None else 0
    long_price = spec.cache_write_1h_per_mtok
    long_write = reported_write if write_1h and long_price is not None else 0
    uncached = prompt - read - reported_write
    prompt_cost = (
        uncached * spec.input_per_mtok
        + read * read_price
        + (reported_write - long_write) * (write_price or Decimal(0))
        + long_write * (long_price or Decimal(0))
    ) / _MTOK
    reasoning = int(output * spec.reasoning_share)
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=output,
        cached_tokens=read,
        cache_write_tokens=reported_write,
        reasoning_tokens=reasoning,
        prompt_cost=prompt_cost,
        completion_cost=output * spec.output_per_mtok / _MTOK,
        cache_write_1h_tokens=long_write,
    )


_FAULT_STATUS: Final = {
    FaultKind.RATE_LIMIT: 429,
    FaultKind.SERVER_ERROR: 500,
    FaultKind.OVERLOADED: 529,
    FaultKind.CONNECTION_RESET: 0,
    FaultKind.MALFORMED_BODY: 502,
}


class Simulator:
    """OpenRouter, OpenAI and Anthropic stand-ins over one catalog, clock and seed."""

    def __init__(
        self,
        catalog: Catalog | None = None,
        *,
        clock: Clock | None = None,
        seed: int = 0,
        min_output_tokens: int = 16,
        max_output_tokens: int = 320,
    ) -> None:
        self.catalog = catalog or default_catalog()
        self.clock: Clock = clock if clock is not None else VirtualClock()
        self.rng = random.Random(seed)
        self.router = Router(self.rng)
        self.faults = FaultInjector(self.rng)
        self.min_output_tokens = min_output_tokens
        self.max_output_tokens = max_output_tokens
        self._caches: dict[tuple[str, str, str], PromptCache] = {}
        #: When each call in flight on an upstream ends (a heap per upstream with a capacity).
        self._in_flight: dict[tuple[str, str, str], list[float]] = {}
        self._lock = threading.Lock()
        #: OpenRouter generations served, for ``GET /api/v1/generation`` (lag and
        #: discrepancies are set on it).
        self.generations = GenerationStore(self.clock, seed=seed)
        #: What the OpenAI and Anthropic endpoints served, per day, for the admin cost and
        #: usage reports (``ledger reconcile openai|anthropic``; discrepancies set on it).
        self.reports = ReportStore(self.clock, seed=seed)

    # -- inspection (tests, demo) -----------------------------------------
    def cache(self, service: Service, model: str, upstream: str) -> PromptCache:
        """The prompt cache of one upstream of one model."""
        spec = self.catalog.pools(service)[model].upstream(upstream)
        return self._cache_for(service, model, spec)

    def pin(
        self, model: str, key: str, *, account: str = "anonymous", explicit: bool = True
    ) -> str | None:
        """The upstream an OpenRouter conversation is pinned to now, if any."""
        sticky = StickyKey(account, model, key, explicit)
        with self._lock:
            return self.router.pinned(sticky, self.clock.time())

    # -- the core ----------------------------------------------------------
    def complete(self, request: ChatRequest) -> Outcome:
        """Decide everything about ``request`` arriving now."""
        with self._lock:
            return self._complete(request, self.clock.time())

    def _complete(self, req: ChatRequest, now: float) -> Outcome:
        pool = self.catalog.pools(req.service).get(req.model)
        if pool is None:
            return Failure("not_found", 404, f"model {req.model!r} does not exist", 0.02)
        front = self.faults.take(req.service, req.model, now, streamed=req.stream)
        if front is not None and front.kind in FAILING_KINDS - {FaultKind.MALFORMED_BODY}:
            return self._fault_failure(front, req.service, 0.05)
        extra = (
            front.delay_s if front is not None and front.kind is FaultKind.SLOW_FIRST_BYTE else 0.0
        )
        carried = front if front is not None and front.kind in _RENDERED_KINDS else None
        if req.service == "openrouter":
            return self._route(req, pool, now, extra, carried)
        return self._direct(req, pool.upstreams[0], now, extra, carried)

    def _direct(
        self, req: ChatRequest, spec: UpstreamSpec, now: float, extra: float, carried: Fault | None
    ) -> Outcome:
        if self._full(req, spec, now):
            return self._failure(FaultKind.RATE_LIMIT, 429, None, _REFUSAL_S)
        if carried is None and spec.error_rate and self.rng.random() < spec.error_rate:
            if req.service == "anthropic":
                return self._failure(FaultKind.OVERLOADED, 529, None, spec.latency.ttft_median_s)
            return self._failure(FaultKind.SERVER_ERROR, 500, None, spec.latency.ttft_median_s)
        return self._serve(req, spec, now, extra, carried)

    def _route(
        self, req: ChatRequest, pool: ModelPool, now: float, extra: float, carried: Fault | None
    ) -> Outcome:
        sticky = self._sticky_key(req)
        pinned = self.router.pinned(sticky, now) if sticky is not None else None
        candidates = self.router.candidates(pool, req.provider, pinned, now)
        if not candidates:
            return Failure(
                "not_found", 404, "No allowed providers are available for the selected model.", 0.02
            )
        previous: list[tuple[str, int]] = []
        tried: list[RouterTry] = []
        last: Fault | None = None
        elapsed = extra
        for spec in candidates:
            fault = self.faults.take(
                "openrouter", req.model, now, upstream=spec, streamed=req.stream
            )
            if fault is not None and fault.kind in FAILING_KINDS:
                status = fault.status or _FAULT_STATUS[fault.kind]
            elif self._full(req, spec, now + elapsed):
                status = 429  # at capacity: OpenRouter tries the next upstream
            elif fault is None and spec.error_rate and self.rng.random() < spec.error_rate:
                status = 502
            else:
                if fault is not None and fault.kind is FaultKind.SLOW_FIRST_BYTE:
                    elapsed += fault.delay_s
                stream_fault = carried or (
                    fault if fault is not None and fault.kind in _RENDERED_KINDS else None
                )
                done = self._serve(req, spec, now, elapsed, stream_fault)
                tried.append(RouterTry(spec.name, 200, done.ttft_s - elapsed))
                done = replace(
                    done, tried=tuple(tried), endpoints=tuple(c.name for c in candidates)
                )
                self._after_route(req.model, sticky, spec, pinned, done, now)
                return done
            self.router.record_failure(req.model, spec.name, now + elapsed)
            previous.append((spec.slug, status))
            last = fault
            failed_s = spec.latency.ttft_median_s * _FAILED_ATTEMPT_SHARE
            tried.append(RouterTry(spec.name, status, failed_s))
            elapsed += failed_s
        return self._exhausted(candidates[-1], previous, last, elapsed)

    def _after_route(
        self,
        model: str,
        sticky: StickyKey | None,
        spec: UpstreamSpec,
        pinned: str | None,
        done: Completion,
        now: float,
    ) -> None:
        finished = now + done.total_s
        if done.fault is not None:  # the stream broke: an error, so no pin update
            if done.fault.upstream is not None:  # the upstream's own failure, not the front door's
                self.router.record_failure(model, spec.name, finished)
            return
        decoding_s = done.total_s - done.ttft_s
        self.router.record_served(
            model,
            spec.name,
            finished,
            ttft_s=done.ttft_s,
            tokens_per_s=done.usage.completion_tokens / decoding_s if decoding_s > 0 else 0.0,
        )
        self.router.record_success(
            sticky, spec, pinned_before=pinned, cache_hit=done.usage.cached_tokens > 0, now=finished
        )

    def _sticky_key(self, req: ChatRequest) -> StickyKey | None:
        if req.provider.order:
            return None  # provider.order disables sticky routing
        if req.session_key is not None:
            return StickyKey(req.account, req.model, req.session_key, True)
        return StickyKey(req.account, req.model, req.prompt.conversation_hash, False)

    def _exhausted(
        self,
        spec: UpstreamSpec,
        previous: list[tuple[str, int]],
        last: Fault | None,
        elapsed: float,
    ) -> Failure:
        status = previous[-1][1] if previous else 502
        if status == 0:
            status = 502  # OpenRouter answers even when the upstream connection dropped
        kind = "rate_limit" if status == 429 else "server_error"
        retry = last.retry_after_s if last is not None else None
        if status == 429 and retry is None:
            retry = 1.0
        return Failure(
            kind, status, "Provider returned error", elapsed, retry, spec.name, tuple(previous)
        )

    def _fault_failure(self, fault: Fault, service: Service, latency: float) -> Failure:
        status = fault.status or _FAULT_STATUS[fault.kind]
        if fault.kind is FaultKind.OVERLOADED and fault.status is None and service != "anthropic":
            status = 503  # 529 is Anthropic's own status
        return self._failure(fault.kind, status, None, latency, fault.retry_after_s)

    def _failure(
        self,
        kind: FaultKind,
        status: int,
        upstream: str | None,
        latency: float,
        retry_after_s: float | None = None,
    ) -> Failure:
        if kind is FaultKind.RATE_LIMIT and retry_after_s is None:
            retry_after_s = 1.0
        message = {
            FaultKind.RATE_LIMIT: "Rate limit exceeded",
            FaultKind.OVERLOADED: "Overloaded",
            FaultKind.CONNECTION_RESET: "Connection reset by peer",
        }.get(kind, "The server had an error while processing your request.")
        return Failure(kind.value, status, message, latency, retry_after_s, upstream)

    def _full(self, req: ChatRequest, spec: UpstreamSpec, now: float) -> bool:
        """Whether ``spec`` already serves ``capacity`` calls at ``now`` (the demo's loop
        runs calls in the order they start, so every call that began earlier is known)."""
        if spec.capacity is None:
            return False
        ends = self._in_flight.setdefault((req.service, req.model, spec.name), [])
        while ends and ends[0] <= now:
            heapq.heappop(ends)
        return len(ends) >= spec.capacity

    def _cache_for(self, service: str, model: str, spec: UpstreamSpec) -> PromptCache:
        key = (service, model, spec.name)
        cache = self._caches.get(key)
        if cache is None:
            cache = PromptCache(min_tokens=spec.min_cacheable_tokens, ttl_s=spec.cache_ttl_s)
            self._caches[key] = cache
        return cache

    def _serve(
        self, req: ChatRequest, spec: UpstreamSpec, now: float, extra: float, fault: Fault | None
    ) -> Completion:
        caching = spec.has_cache and (req.prompt.cache_control or not spec.requires_cache_control)
        # the request's lifetime where the upstream offers a choice of them (Anthropic's ttl)
        long_ttl = spec.cache_write_1h_per_mtok is not None and req.cache_ttl_s > FIVE_MINUTES_S
        ttl_s = req.cache_ttl_s if spec.cache_write_1h_per_mtok is not None else None
        used = (
            self._cache_for(req.service, req.model, spec).use(req.prompt, now + extra, ttl_s)
            if caching
            else CacheResult(0, 0)
        )
        shaped = None if req.wanted.plain else shape(req.wanted)
        if shaped is None:
            output = self.rng.randint(self.min_output_tokens, self.max_output_tokens)
            if req.max_tokens is not None:
                output = max(1, min(output, req.max_tokens))
        else:
            shaped, output = _capped(shaped, req.max_tokens)
        usage = charge(
            spec, req.prompt.tokens, used.read_tokens, used.write_tokens, output, write_1h=long_ttl
        )
        lat = spec.latency
        ttft = extra + lat.ttft_median_s * math.exp(lat.ttft_sigma * self.rng.gauss(0.0, 1.0))
        if shaped is None:
            words = self.rng.choices(_WORDS, k=output)
            pieces = tuple(
                (" " if i else "") + " ".join(words[i : i + _WORDS_PER_PIECE])
                for i in range(0, output, _WORDS_PER_PIECE)
            )
        else:
            pieces = pieces_of(shaped.text, self.rng)
        total_s = ttft + output / lat.tokens_per_s
        if spec.capacity is not None:
            heapq.heappush(self._in_flight[(req.service, req.model, spec.name)], now + total_s)
        return Completion(
            ident="".join(self.rng.choices(_ALNUM, k=24)),
            created=int(now),
            model=spec.reported_model or req.model,
            upstream=spec.name,
            pieces=pieces,
            usage=usage,
            ttft_s=ttft,
            total_s=total_s,
            fault=fault,
            tool=shaped.tool if shaped is not None else None,
        )


def _capped(shaped: Shaped, max_tokens: int | None) -> tuple[Shaped, int]:
    """A tool call or JSON document and its output tokens, cut at ``max_tokens`` as a
    model's output is (the caller sees the finish reason say so)."""
    tokens = max(1, text_tokens(shaped.text))
    if max_tokens is None or tokens <= max_tokens:
        return shaped, tokens
    return replace(shaped, text=shaped.text[: max_tokens * 4]), max_tokens


_RENDERED_KINDS: Final = frozenset({FaultKind.MIDSTREAM_ERROR, FaultKind.MALFORMED_BODY})
