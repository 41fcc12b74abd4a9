"""The official openai SDK instrumented with ``opentelemetry-instrumentation-openai-v2``,
calling the simulator, exporting OTLP/HTTP to the receiver: the rows equal what the
metering transport records for the same calls."""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
from opentelemetry.sdk.trace import Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

import ledger
from ledger.otel.serve import serve_in_thread
from ledger.simulator import Simulator, VirtualClock
from ledger.simulator import serve_in_thread as serve_simulator
from ledger.store.ledger import Ledger
from tests.instrument.conftest import Rows
from tests.otel.helpers import rows_by_event

SYSTEM = "You are a careful code-review agent with a long tool contract. " * 120
CONVERSATION: contextvars.ContextVar[str | None] = contextvars.ContextVar("conv", default=None)
COMPARED = (
    "requested_model",
    "model",
    "session_id",
    "input_tokens",
    "output_tokens",
)


class ConversationId(SpanProcessor):
    """What an application does to tag its GenAI spans with the conversation they belong to."""

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        if (conversation := CONVERSATION.get()) is not None:
            span.set_attribute("gen_ai.conversation.id", conversation)


def workload(client: openai.OpenAI) -> None:
    """Two conversations, repeated prompts (prompt-cache reads), one streamed call."""
    for conversation, model in (("conv-a", "gpt-4o-mini"), ("conv-b", "gpt-4o-mini")):
        token = CONVERSATION.set(conversation)
        try:
            with ledger.context(session_id=conversation):
                for turn in range(3):
                    messages: Any = [
                        {"role": "system", "content": SYSTEM},
                        {"role": "user", "content": f"review change {turn}"},
                    ]
                    client.chat.completions.create(model=model, messages=messages)
                stream = client.chat.completions.create(
                    model=model,
                    messages=[
                        {"role": "system", "content": SYSTEM},
                        {"role": "user", "content": "s"},
                    ],
                    stream=True,
                    stream_options={"include_usage": True},
                )
                for _ in stream:
                    pass
        finally:
            CONVERSATION.reset(token)


@pytest.fixture
def simulators() -> Iterator[tuple[str, str]]:
    """Two identical simulators (same seed): one per side, so prompt caches start equal."""
    with (
        serve_simulator(Simulator(clock=VirtualClock(), seed=5)) as first,
        serve_simulator(Simulator(clock=VirtualClock(), seed=5)) as second,
    ):
        yield first + "/v1", second + "/v1"


def metered_rows(base: str) -> list[dict[str, Any]]:
    rows = Rows()
    http = ledger.httpx_client(ledger=rows, providers={base: "openai"})
    with openai.OpenAI(api_key="sk-test", base_url=base, http_client=http, max_retries=0) as c:
        workload(c)
    return [{k: getattr(e, k) for k in (*COMPARED, "cache_read_tokens")} for e in rows.events]


def test_openai_v2_spans_become_the_rows_the_metering_transport_records(
    simulators: tuple[str, str], ledger_url: str, tmp_path: Path
) -> None:
    metered_base, otel_base = simulators
    expected = metered_rows(metered_base)
    assert len(expected) == 8 and any(r["cache_read_tokens"] for r in expected)
    with (
        Ledger(ledger_url, journal_dir=tmp_path / "journal", exporters=()) as sink,
        serve_in_thread(sink) as (receiver_url, receiver),
    ):
        provider = TracerProvider()
        provider.add_span_processor(ConversationId())
        provider.add_span_processor(
            BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{receiver_url}/v1/traces"))
        )
        instrumentor = OpenAIInstrumentor()
        instrumentor.instrument(tracer_provider=provider)
        try:
            with openai.OpenAI(api_key="sk-test", base_url=otel_base, max_retries=0) as c:
                workload(c)
        finally:
            instrumentor.uninstrument()
        assert provider.force_flush(60_000)
        provider.shutdown()
        assert sink.flush(timeout=60)
        assert receiver.stats.recorded == 8, receiver.stats.as_dict()
    rows = sorted(rows_by_event(ledger_url).values(), key=lambda r: r["started_at"])
    got = [{k: r[k] for k in COMPARED} for r in rows]
    assert got == [{k: r[k] for k in COMPARED} for r in expected]
    for row in rows:
        assert row["provider"] == "openai" and row["status"] == "ok"
        assert row["cost_source"] == "computed" and row["cost_usd"] > 0
        assert row["generation_id"].startswith("chatcmpl-")
        # openai-v2 2.4b0 puts no cached-token count on chat spans: what is not there is 0.
        assert row["cache_read_tokens"] == 0
