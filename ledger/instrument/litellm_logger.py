"""A LiteLLM callback that writes one ledger row per LiteLLM attempt, for every provider.

::

    import litellm
    from ledger.instrument.litellm_logger import LedgerLogger

    litellm.callbacks = [LedgerLogger()]                    # or LedgerLogger(ledger=url)
    with ledger.context(session_id="s-42", actor_id="planner"):
        litellm.completion(model="openrouter/openai/gpt-4o-mini", messages=[...])

Rows come from LiteLLM's own ``StandardLoggingPayload`` (``kwargs["standard_logging_object"]``),
so they work for providers and transports the HTTP meter never sees (LiteLLM's
OpenRouter handler ignores ``client_session``; its aiohttp transport is not httpx).
The row's tokens are LiteLLM's normalised usage (``prompt_tokens`` counts cache reads
and writes, as the ledger does); the cost is the provider's when the usage carries
one (OpenRouter's ``usage.cost``), else the ledger's own price table, else LiteLLM's
``response_cost``. The ledger context is read when LiteLLM is about to call the
provider (in the caller's thread or task) and kept for that call, because LiteLLM
reports a finished stream from a worker thread that does not carry it. There too,
for a provider with sticky sessions (OpenRouter), the callback puts the ledger's
sticky key ``<prefix>:<session>:<actor>`` in the request (ADR 0221) unless the
caller sent a ``session_id`` of their own, and the row records the key sent. A call
that reached no server (refused connection, failed DNS lookup) is a ``transport``
error without an HTTP status, though LiteLLM reports it with code 500.

What LiteLLM does not report, the rows cannot hold: neither the retries inside the
provider SDK LiteLLM drives (``max_retries``) nor, in the version tested, the failed
attempts of its own ``num_retries`` reach callbacks, so a retried call is one row (the
attempt that answered); a call that fails for good is one error row. Rows reported
under one LiteLLM ``trace_id`` (its fallbacks) share a ``call_id`` as attempts 1, 2….
Do not also meter the same client with :func:`ledger.httpx_client`: each call would
be recorded twice.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any, Final

from litellm.integrations.custom_logger import CustomLogger

from ledger.attempt import LazyRecorder, clean
from ledger.errors import ProviderConfigurationError
from ledger.events import ErrorType, Recorder, UsageEvent, new_id
from ledger.instrument.context import Context, current
from ledger.pricing import attempt_cost
from ledger.providers import make_provider
from ledger.providers.base import Provider, Usage
from ledger.session_key import DEFAULT_PREFIX, session_key

log = logging.getLogger("ledger.instrument")

#: LiteLLM call types that are one model completion (embeddings, images… are not).
CALL_TYPES: Final = frozenset(
    {
        "completion",
        "acompletion",
        "text_completion",
        "atext_completion",
        "responses",
        "aresponses",
        "anthropic_messages",
    }
)
#: LiteLLM's provider names that differ from the ledger's.
_PROVIDERS: Final = {"text-completion-openai": "openai"}
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_KEPT: Final = 4096  # calls whose context/attempt count is held at once (bounded)


def _int(value: Any) -> int:
    return value if type(value) is int and value >= 0 else 0


def _obj(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def usage_of(payload: Mapping[str, Any]) -> Usage:
    """The payload's usage normalised to the ledger's columns (cache reads included)."""
    meta = _obj(payload.get("metadata"))
    hidden = _obj(payload.get("hidden_params"))
    raw = _obj(meta.get("usage_object")) or _obj(hidden.get("usage_object"))
    prompt = _obj(raw.get("prompt_tokens_details"))
    completion = _obj(raw.get("completion_tokens_details"))
    cache_read = _int(prompt.get("cached_tokens")) or _int(raw.get("cache_read_input_tokens"))
    cache_write = _int(raw.get("cache_creation_input_tokens")) or _int(
        prompt.get("cache_write_tokens")
    )
    return Usage(
        input_tokens=_int(payload.get("prompt_tokens")),
        output_tokens=_int(payload.get("completion_tokens")),
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
        reasoning_tokens=_int(completion.get("reasoning_tokens")),
    )


def _reported_cost(payload: Mapping[str, Any]) -> Decimal | None:
    """The provider's own figure (OpenRouter's ``usage.cost``), when the usage carries it."""
    meta = _obj(payload.get("metadata"))
    raw = _obj(meta.get("usage_object")) or _obj(
        _obj(payload.get("hidden_params")).get("usage_object")
    )
    cost = raw.get("cost")
    if isinstance(cost, bool) or not isinstance(cost, int | float | str):
        return None
    try:
        value = Decimal(str(cost))
    except InvalidOperation:
        return None
    return value if value.is_finite() and value >= 0 else None


#: LiteLLM's exception classes for a request that got no HTTP answer. LiteLLM gives an
#: ``APIConnectionError`` ``error_code`` 500 (refused connection, failed DNS lookup,
#: reset), which read as a status would file a transport failure as a provider's 500.
_NO_ANSWER: Final[dict[str, ErrorType]] = {
    "APIConnectionError": "transport",
    "Timeout": "timeout",
}


def _error(payload: Mapping[str, Any]) -> tuple[ErrorType, int | None]:
    info = _obj(payload.get("error_information"))
    no_answer = _NO_ANSWER.get(str(info.get("error_class") or ""))
    if no_answer is not None:
        return no_answer, None
    code = info.get("error_code")
    status = int(code) if isinstance(code, str) and code.isdigit() else None
    if status == 429:
        return "rate_limited", status
    if status is not None and status >= 500:
        return "server_error", status
    if status == 408 or "Timeout" in str(info.get("error_class") or ""):
        return "timeout", status
    if status is not None and 400 <= status < 500:
        return "client_error", status
    return "transport", status


def event_of(
    payload: Mapping[str, Any],
    ctx: Context,
    *,
    call_id: str,
    attempt: int,
    streamed: bool,
    session_key: str | None = None,
) -> UsageEvent:
    """The ledger row for one LiteLLM ``StandardLoggingPayload`` (pure)."""
    ok = payload.get("status") == "success"
    name = str(payload.get("custom_llm_provider") or "unknown")
    provider = _PROVIDERS.get(name, name)
    response = _obj(payload.get("response"))
    hidden = _obj(payload.get("hidden_params"))
    requested = str(payload.get("model") or "unknown")
    served = response.get("model") if isinstance(response.get("model"), str) else None
    start = payload.get("startTime")
    end = payload.get("endTime")
    first = payload.get("completionStartTime")
    started_at = (
        dt.datetime.fromtimestamp(start, dt.UTC)
        if isinstance(start, int | float)
        else dt.datetime.now(dt.UTC)
    )
    latency = (
        (end - start) * 1000
        if isinstance(end, int | float) and isinstance(start, int | float)
        else None
    )
    ttft = None
    if streamed and ok and isinstance(first, int | float) and isinstance(start, int | float):
        ttft = max(0.0, (first - start) * 1000)
    usage = usage_of(payload) if ok else Usage()
    error_type, http_status = (None, 200) if ok else _error(payload)
    cost = _cost(payload, usage, provider, served or requested, started_at) if ok else (None, None)
    upstream = hidden.get("upstream_provider") or response.get("provider")
    generation = response.get("id") if ok else None
    return UsageEvent(
        event_id=_uuid(payload.get("litellm_call_id")) or new_id(),
        call_id=call_id,
        attempt=attempt,
        started_at=started_at,
        latency_ms=latency if latency is None or latency >= 0 else None,
        ttft_ms=ttft,
        requested_provider=clean(provider, "requested_provider") or "unknown",
        requested_model=clean(requested, "requested_model") or "unknown",
        provider=clean(provider, "provider") or "unknown",
        model=clean(served, "model") if served else None,
        upstream=clean(upstream, "upstream") if isinstance(upstream, str) else None,
        generation_id=clean(generation, "generation_id") if isinstance(generation, str) else None,
        status="ok" if ok else "error",
        error_type=error_type,
        http_status=http_status,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
        reasoning_tokens=usage.reasoning_tokens,
        usage_reported=ok and usage.input_tokens + usage.output_tokens > 0,
        cost_usd=cost[0],
        cost_source=cost[1],  # type: ignore[arg-type]
        response_cache_hit=payload.get("cache_hit") is True,
        streamed=streamed,
        session_id=ctx.session_id,
        actor_id=ctx.actor_id,
        session_key=clean(session_key, "session_key") if session_key else None,
        locale=ctx.locale,
        tags=dict(ctx.tags) if ctx.tags is not None else None,
    )


def _uuid(value: Any) -> str | None:
    return value if isinstance(value, str) and _UUID.fullmatch(value) else None


def _cost(
    payload: Mapping[str, Any], usage: Usage, provider: str, model: str, at: dt.datetime
) -> tuple[Decimal | None, str | None]:
    """The provider's figure, else the ledger's price table, else LiteLLM's own."""
    provider_id = None
    try:
        provider_id = make_provider(provider, api_key="never-sent").prices_provider_id
    except Exception:  # a provider the ledger has no module for: LiteLLM's figure below
        provider_id = None
    reported = _reported_cost(payload)
    cost = attempt_cost(
        usage=usage,
        model=model,
        reported=reported,
        provider=provider,
        provider_id=provider_id,
        at=at,
    )
    if cost.usd is not None:
        return cost.usd, cost.source
    litellm_cost = payload.get("response_cost")
    if (
        isinstance(litellm_cost, int | float)
        and not isinstance(litellm_cost, bool)
        and litellm_cost > 0
    ):
        return Decimal(str(litellm_cost)), "computed"
    return None, None


class LedgerLogger(CustomLogger):
    """LiteLLM's ``CustomLogger``: every completion attempt becomes a ledger row.

    ``ledger``: a :class:`~ledger.events.Recorder`, a database URL, or None for the
    process's default ledger (opened on the first row).
    """

    def __init__(
        self, *, ledger: Recorder | str | None = None, session_prefix: str = DEFAULT_PREFIX
    ) -> None:
        super().__init__()
        self._sink = LazyRecorder(ledger)
        self._prefix = session_prefix
        self._lock = threading.Lock()
        #: litellm_call_id -> (context, sticky key sent), set before the provider is called.
        self._calls: OrderedDict[str, tuple[Context, str | None]] = OrderedDict()
        #: trace_id -> attempts seen, so LiteLLM's retries are attempts 2, 3… of one call.
        self._attempts: OrderedDict[str, int] = OrderedDict()
        #: LiteLLM provider name -> the ledger's provider module (None: the ledger has none).
        self._providers: dict[str, Provider | None] = {}
        self._complained = False

    # LiteLLM calls this in the caller's thread/task, before the request leaves.
    def log_pre_api_call(self, model: Any, messages: Any, kwargs: Any) -> None:
        details = _obj(kwargs)
        call = details.get("litellm_call_id")
        if not isinstance(call, str):
            return
        ctx = current()
        key = self._sticky_key(details, ctx)
        with self._lock:
            self._calls[call] = (ctx, key)
            while len(self._calls) > _KEPT:
                self._calls.popitem(last=False)

    def _sticky_key(self, details: Mapping[str, Any], ctx: Context) -> str | None:
        """The sticky key the request carries (ADR 0221): the caller's own (``extra_body``),
        else, for a provider with sticky sessions and a ledger context naming a session,
        ``<prefix>:<session>:<actor>``, put in the request body here.

        The body is the dict LiteLLM hands its loggers as ``complete_input_dict`` and
        sends right after (``llm_http_handler``: the same object, serialised after
        ``pre_call``); ``tests/instrument/test_litellm_logger.py`` checks on the wire
        that the key arrives, plain, streamed and async, so a LiteLLM that copies the
        body first fails there, not silently."""
        name = str(details.get("custom_llm_provider") or "")
        provider = self._provider(_PROVIDERS.get(name, name))
        body = _obj(details.get("additional_args")).get("complete_input_dict")
        if provider is not None and provider.capabilities.sticky_session and isinstance(body, dict):
            sent = provider.sent_session_key(body)
            if sent is None and ctx.session_id:
                sent = session_key(ctx.session_id, ctx.actor_id, prefix=self._prefix)
                provider.place_session_key(body, sent)
            return sent if isinstance(sent, str) else None
        key = _obj(details.get("extra_body")).get("session_id")
        return key if isinstance(key, str) else None

    def _provider(self, name: str) -> Provider | None:
        if name not in self._providers:
            try:
                self._providers[name] = make_provider(name, api_key="never-sent")
            except ProviderConfigurationError:  # no module for it, or no default base URL
                self._providers[name] = None
        return self._providers[name]

    def log_success_event(
        self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        self._log(kwargs)

    def log_failure_event(
        self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        self._log(kwargs)

    async def async_log_success_event(
        self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        self._log(kwargs)

    async def async_log_failure_event(
        self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        self._log(kwargs)

    def _log(self, kwargs: Any) -> None:
        try:
            self._record(_obj(kwargs))
        except Exception as exc:  # the ledger is never the LLM call's problem
            if not self._complained:
                self._complained = True
                log.warning(
                    "ledger: could not record a LiteLLM call (logged once): %s", exc, exc_info=exc
                )

    def _record(self, kwargs: Mapping[str, Any]) -> None:
        payload = _obj(kwargs.get("standard_logging_object"))
        if not payload or payload.get("call_type") not in CALL_TYPES:
            return
        call = payload.get("litellm_call_id")
        trace = _uuid(payload.get("trace_id"))
        with self._lock:
            found = self._calls.pop(call, None) if isinstance(call, str) else None
            attempt = 1
            if trace is not None:
                attempt = self._attempts.get(trace, 0) + 1
                self._attempts[trace] = attempt
                self._attempts.move_to_end(trace)
                while len(self._attempts) > _KEPT:
                    self._attempts.popitem(last=False)
        ctx, key = found if found is not None else (current(), None)
        # The failure payload says stream=None even for a streamed request: ask the call.
        streamed = payload.get("stream") is True or kwargs.get("stream") is True
        event = event_of(
            payload,
            ctx,
            call_id=trace or new_id(),
            attempt=attempt,
            streamed=streamed,
            session_key=key,
        )
        self._sink.get().record(event)


__all__ = ["CALL_TYPES", "LedgerLogger", "event_of", "usage_of"]
