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
``ledger.requested_model``     string  first model of the chain asked for (the row's
                                       ``requested_model``; ``gen_ai.request.model`` is the
                                       attempt's own)
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

``gen_ai.request.model`` and ``gen_ai.provider.name`` are the *attempt's*: a
fallback attempt names its own route's model and provider, not the chain's
first. ``server.address``/``server.port`` come from the base URL the attempt
was sent to, ``gen_ai.response.finish_reasons`` from the response; all three
are absent for a row read back from the database (the table does not hold them).

Beside the ``gen_ai.*`` names each span carries the OpenInference ones
(:data:`OPENINFERENCE_ATTRIBUTES`, Arize's conventions, what Phoenix reads):
``openinference.span.kind`` = ``LLM``, ``llm.model_name`` (the model that served,
else the one asked for: the one to price), ``llm.provider`` (OpenInference's
provider values), ``llm.token_count.*`` (the ledger's counts, cache reads and
writes inside ``prompt`` as in both conventions) and ``llm.cost.total``, the
ledger's own cost in USD (absent when unknown). Phoenix prices spans itself
(its price table times ``llm.token_count.*``, matched on ``llm.model_name`` and
``llm.provider``) and shows ``llm.cost.total`` as an attribute; see the README.

:func:`span_attributes` is pure: an event in, a flat attribute dict out.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Final
from urllib.parse import urlsplit

from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv._incubating.metrics import gen_ai_metrics
from opentelemetry.semconv.attributes import error_attributes, http_attributes, server_attributes
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
SERVER_ADDRESS: Final = server_attributes.SERVER_ADDRESS
SERVER_PORT: Final = server_attributes.SERVER_PORT
FINISH_REASONS: Final = gen_ai.GEN_AI_RESPONSE_FINISH_REASONS

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
    SERVER_ADDRESS,
    SERVER_PORT,
    FINISH_REASONS,
)

EVENT_ID: Final = "ledger.event_id"
CALL_ID: Final = "ledger.call_id"
ATTEMPT: Final = "ledger.attempt"
REQUESTED_PROVIDER: Final = "ledger.requested_provider"
REQUESTED_MODEL: Final = "ledger.requested_model"
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
    REQUESTED_MODEL,
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

#: Our provider names -> semconv's well-known ``gen_ai.provider.name`` values, where they
#: differ (``tests/otel/test_attributes.py`` checks each against semconv's list).
#: ``azure`` is what the receiver once stored for ``azure.ai.openai``.
PROVIDER_NAMES: Final = {
    "azure_openai": "azure.ai.openai",
    "azure": "azure.ai.openai",
    "gemini": "gcp.gemini",
    "mistral": "mistral_ai",
}
#: And back, for the receiver.
PROVIDERS_BY_NAME: Final = {
    "azure.ai.openai": "azure_openai",
    "gcp.gemini": "gemini",
    "mistral_ai": "mistral",
}

# -- OpenInference (https://github.com/Arize-ai/openinference, spec/semantic_conventions.md)
OI_SPAN_KIND: Final = "openinference.span.kind"
OI_MODEL_NAME: Final = "llm.model_name"
OI_PROVIDER: Final = "llm.provider"
OI_PROMPT_TOKENS: Final = "llm.token_count.prompt"
OI_COMPLETION_TOKENS: Final = "llm.token_count.completion"
OI_TOTAL_TOKENS: Final = "llm.token_count.total"
OI_CACHE_READ_TOKENS: Final = "llm.token_count.prompt_details.cache_read"
OI_CACHE_WRITE_TOKENS: Final = "llm.token_count.prompt_details.cache_write"
OI_REASONING_TOKENS: Final = "llm.token_count.completion_details.reasoning"
OI_COST_TOTAL: Final = "llm.cost.total"

OPENINFERENCE_ATTRIBUTES: Final = (
    OI_SPAN_KIND,
    OI_MODEL_NAME,
    OI_PROVIDER,
    OI_PROMPT_TOKENS,
    OI_COMPLETION_TOKENS,
    OI_TOTAL_TOKENS,
    OI_CACHE_READ_TOKENS,
    OI_CACHE_WRITE_TOKENS,
    OI_REASONING_TOKENS,
    OI_COST_TOTAL,
)
#: Our provider names -> OpenInference's well-known ``llm.provider`` values, where they
#: differ (others, ``openrouter`` among them, are sent as they are: the spec allows it).
OI_PROVIDERS: Final = {
    "azure_openai": "azure",
    "gemini": "google",
    "mistral": "mistralai",
}


def provider_name(provider: str) -> str:
    """``gen_ai.provider.name`` for one of our provider names."""
    return PROVIDER_NAMES.get(provider, provider)


def attempt_model(event: UsageEvent) -> str:
    """The model this attempt asked for: its route's (a fallback's own), else the call's."""
    return event.attempt_model or event.requested_model


@lru_cache(maxsize=256)
def server_of(base_url: str) -> tuple[str | None, int | None]:
    """``(server.address, server.port)`` of a base URL, the port from the scheme when absent."""
    try:
        parts = urlsplit(base_url)
        port = parts.port
    except ValueError:  # an unparsable port: the host is still worth naming
        return None, None
    if port is None:
        port = {"https": 443, "http": 80}.get(parts.scheme)
    return parts.hostname or None, port


def span_name(event: UsageEvent) -> str:
    """``{operation} {model}``, as the GenAI span conventions name a client span."""
    return f"{OPERATION} {attempt_model(event)}"


def metric_attributes(event: UsageEvent) -> dict[str, AttributeValue]:
    """The low-cardinality attributes both GenAI client histograms carry."""
    attributes: dict[str, AttributeValue] = {
        OPERATION_NAME: OPERATION,
        PROVIDER_NAME: provider_name(event.provider),
        REQUEST_MODEL: attempt_model(event),
    }
    if event.model is not None:
        attributes[RESPONSE_MODEL] = event.model
    if event.status == "error":
        attributes[ERROR_TYPE] = event.error_type or "_OTHER"
    if event.base_url is not None:
        address, port = server_of(event.base_url)
        if address is not None:
            attributes[SERVER_ADDRESS] = address
        if port is not None:
            attributes[SERVER_PORT] = port
    return attributes


def openinference_attributes(event: UsageEvent) -> dict[str, AttributeValue]:
    """The OpenInference attributes of the attempt's span (see the module docstring)."""
    attributes: dict[str, AttributeValue] = {
        OI_SPAN_KIND: "LLM",
        OI_MODEL_NAME: event.model or attempt_model(event),
        OI_PROVIDER: OI_PROVIDERS.get(event.provider, event.provider),
        OI_PROMPT_TOKENS: event.input_tokens,
        OI_COMPLETION_TOKENS: event.output_tokens,
        OI_TOTAL_TOKENS: event.input_tokens + event.output_tokens,
        OI_CACHE_READ_TOKENS: event.cache_read_tokens,
        OI_CACHE_WRITE_TOKENS: event.cache_write_tokens,
        OI_REASONING_TOKENS: event.reasoning_tokens,
    }
    if event.cost_usd is not None:
        attributes[OI_COST_TOTAL] = float(event.cost_usd)
    return attributes


def span_attributes(event: UsageEvent) -> dict[str, AttributeValue]:
    """Every attribute of the attempt's span: absent values are left out, never empty."""
    attributes = metric_attributes(event)
    optional: dict[str, AttributeValue | None] = {
        RESPONSE_ID: event.generation_id,
        CONVERSATION_ID: event.session_id,
        AGENT_ID: event.actor_id,
        HTTP_STATUS: event.http_status,
        FINISH_REASONS: None if event.finish_reason is None else (event.finish_reason,),
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
            REQUESTED_MODEL: event.requested_model,
            SESSION_KEY_SENT: event.session_key is not None,
            RESPONSE_CACHE_HIT: event.response_cache_hit,
            STREAMED: event.streamed,
            USAGE_REPORTED: event.usage_reported,
        }
    )
    attributes.update(openinference_attributes(event))
    return attributes
