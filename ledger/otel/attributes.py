"""The attribute names the ledger speaks in OpenTelemetry, and one event's attributes.

Standard names come from the OpenTelemetry GenAI semantic conventions, taken
from the installed ``opentelemetry-semantic-conventions`` package so a rename
upstream fails our tests rather than our users' dashboards
(``tests/otel/test_attributes.py`` checks each one and its stability). Every
``gen_ai.*`` name is still *development* in semconv (``_incubating``);
``error.type`` and ``http.response.status_code`` are *stable*.

What the conventions lack lives under ``ledger.*`` (:data:`LEDGER_ATTRIBUTES`):

=============================  ======  =================================================
``ledger.event_id``            string  the row's idempotency key
``ledger.call_id``             string  groups the attempts of one call
``ledger.attempt``             int     1..n in cascade order; 0 = response cache
``ledger.requested_provider``  string  first provider of the chain asked for
``ledger.upstream``            string  who served it behind an aggregator
``ledger.cost_usd``            double  what the attempt cost (absent when unknown)
``ledger.cost_source``         string  ``provider``, ``computed`` or ``incomplete``
``ledger.session_key_sent``    bool    a sticky session key was sent (never the key)
``ledger.response_cache_hit``  bool    served from the response cache
``ledger.streamed``            bool    the attempt used SSE streaming
``ledger.usage_reported``      bool    the token counts are the provider's report
``ledger.ttft_ms``             double  send -> first token
``ledger.routing.sort``        string  OpenRouter ``provider.sort`` sent
``ledger.routing.order``       string  OpenRouter ``provider.order`` sent, comma-joined
=============================  ======  =================================================

:func:`span_attributes` is pure: an event in, a flat attribute dict out.
"""

from __future__ import annotations

from typing import Final

from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv._incubating.metrics import gen_ai_metrics
from opentelemetry.semconv.attributes import error_attributes, http_attributes
from opentelemetry.util.types import AttributeValue

from ledger.events import UsageEvent

OPERATION_NAME: Final = gen_ai.GEN_AI_OPERATION_NAME
PROVIDER_NAME: Final = gen_ai.GEN_AI_PROVIDER_NAME
REQUEST_MODEL: Final = gen_ai.GEN_AI_REQUEST_MODEL
RESPONSE_MODEL: Final = gen_ai.GEN_AI_RESPONSE_MODEL
RESPONSE_ID: Final = gen_ai.GEN_AI_RESPONSE_ID
INPUT_TOKENS: Final = gen_ai.GEN_AI_USAGE_INPUT_TOKENS
OUTPUT_TOKENS: Final = gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS
CACHE_READ_TOKENS: Final = gen_ai.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS
CACHE_CREATION_TOKENS: Final = gen_ai.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS
REASONING_TOKENS: Final = gen_ai.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS
CONVERSATION_ID: Final = gen_ai.GEN_AI_CONVERSATION_ID
AGENT_ID: Final = gen_ai.GEN_AI_AGENT_ID
TOKEN_TYPE: Final = gen_ai.GEN_AI_TOKEN_TYPE
ERROR_TYPE: Final = error_attributes.ERROR_TYPE
HTTP_STATUS: Final = http_attributes.HTTP_RESPONSE_STATUS_CODE

TOKEN_USAGE_METRIC: Final = gen_ai_metrics.GEN_AI_CLIENT_TOKEN_USAGE
DURATION_METRIC: Final = gen_ai_metrics.GEN_AI_CLIENT_OPERATION_DURATION

#: Every standard name the exporter writes (the test checks each against semconv).
STANDARD_ATTRIBUTES: Final = (
    OPERATION_NAME,
    PROVIDER_NAME,
    REQUEST_MODEL,
    RESPONSE_MODEL,
    RESPONSE_ID,
    INPUT_TOKENS,
    OUTPUT_TOKENS,
    CACHE_READ_TOKENS,
    CACHE_CREATION_TOKENS,
    REASONING_TOKENS,
    CONVERSATION_ID,
    AGENT_ID,
    TOKEN_TYPE,
    ERROR_TYPE,
    HTTP_STATUS,
)

EVENT_ID: Final = "ledger.event_id"
CALL_ID: Final = "ledger.call_id"
ATTEMPT: Final = "ledger.attempt"
REQUESTED_PROVIDER: Final = "ledger.requested_provider"
UPSTREAM: Final = "ledger.upstream"
COST_USD: Final = "ledger.cost_usd"
COST_SOURCE: Final = "ledger.cost_source"
SESSION_KEY_SENT: Final = "ledger.session_key_sent"
RESPONSE_CACHE_HIT: Final = "ledger.response_cache_hit"
STREAMED: Final = "ledger.streamed"
USAGE_REPORTED: Final = "ledger.usage_reported"
TTFT_MS: Final = "ledger.ttft_ms"
ROUTING_SORT: Final = "ledger.routing.sort"
ROUTING_ORDER: Final = "ledger.routing.order"

LEDGER_ATTRIBUTES: Final = (
    EVENT_ID,
    CALL_ID,
    ATTEMPT,
    REQUESTED_PROVIDER,
    UPSTREAM,
    COST_USD,
    COST_SOURCE,
    SESSION_KEY_SENT,
    RESPONSE_CACHE_HIT,
    STREAMED,
    USAGE_REPORTED,
    TTFT_MS,
    ROUTING_SORT,
    ROUTING_ORDER,
)

#: Every recorded attempt is a chat call (the client and the metering transport meter chat).
OPERATION: Final = "chat"

#: Our provider names -> semconv's well-known ``gen_ai.provider.name`` values, where they differ.
PROVIDER_NAMES: Final = {
    "gemini": "gcp.gemini",
    "azure": "azure.ai.openai",
    "mistral": "mistral_ai",
}
#: And back, for the receiver.
PROVIDERS_BY_NAME: Final = {v: k for k, v in PROVIDER_NAMES.items()}


def provider_name(provider: str) -> str:
    """``gen_ai.provider.name`` for one of our provider names."""
    return PROVIDER_NAMES.get(provider, provider)


def span_name(event: UsageEvent) -> str:
    """``{operation} {model}``, as the GenAI span conventions name a client span."""
    return f"{OPERATION} {event.requested_model}"


def metric_attributes(event: UsageEvent) -> dict[str, AttributeValue]:
    """The low-cardinality attributes both GenAI client histograms carry."""
    attributes: dict[str, AttributeValue] = {
        OPERATION_NAME: OPERATION,
        PROVIDER_NAME: provider_name(event.provider),
        REQUEST_MODEL: event.requested_model,
    }
    if event.model is not None:
        attributes[RESPONSE_MODEL] = event.model
    if event.status == "error":
        attributes[ERROR_TYPE] = event.error_type or "_OTHER"
    return attributes


def span_attributes(event: UsageEvent) -> dict[str, AttributeValue]:
    """Every attribute of the attempt's span: absent values are left out, never empty."""
    attributes = metric_attributes(event)
    optional: dict[str, AttributeValue | None] = {
        RESPONSE_ID: event.generation_id,
        CONVERSATION_ID: event.session_id,
        AGENT_ID: event.actor_id,
        HTTP_STATUS: event.http_status,
        UPSTREAM: event.upstream,
        COST_USD: None if event.cost_usd is None else float(event.cost_usd),
        COST_SOURCE: event.cost_source,
        TTFT_MS: event.ttft_ms,
        ROUTING_SORT: event.routing_sort,
        ROUTING_ORDER: event.routing_order,
    }
    attributes.update({k: v for k, v in optional.items() if v is not None})
    attributes.update(
        {
            INPUT_TOKENS: event.input_tokens,
            OUTPUT_TOKENS: event.output_tokens,
            CACHE_READ_TOKENS: event.cache_read_tokens,
            CACHE_CREATION_TOKENS: event.cache_write_tokens,
            REASONING_TOKENS: event.reasoning_tokens,
            EVENT_ID: event.event_id,
            CALL_ID: event.call_id,
            ATTEMPT: event.attempt,
            REQUESTED_PROVIDER: event.requested_provider,
            SESSION_KEY_SENT: event.session_key is not None,
            RESPONSE_CACHE_HIT: event.response_cache_hit,
            STREAMED: event.streamed,
            USAGE_REPORTED: event.usage_reported,
        }
    )
    return attributes
