"""The gateway takes OTLP/HTTP traces too (``otlp = true``): one process, one port, both
front doors; driven by the OpenTelemetry SDK's own OTLP exporter over real HTTP."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.trace import SpanKind

from ledger.simulator import Simulator
from tests.gateway.conftest import KEY, OTHER_KEY, Served, sim_table
from tests.llm_loopback import Rows
from tests.otel.test_mapping import OPENAI_V2


class ResultsKept(OTLPSpanExporter):
    """The SDK's exporter, keeping what each export returned."""

    results: list[SpanExportResult]

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = super().export(spans)
        self.results.append(result)
        return result


def export_one_span(url: str, headers: dict[str, str]) -> list[SpanExportResult]:
    """One GenAI client span (openai-v2's spellings) sent by the SDK's OTLP exporter."""
    exporter = ResultsKept(endpoint=f"{url}/v1/traces", headers=headers, timeout=10)
    exporter.results = []
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("chat gpt-4o-mini", kind=SpanKind.CLIENT) as span:
        span.set_attributes(OPENAI_V2)
    provider.shutdown()
    return exporter.results


def test_spans_sent_to_the_gateway_become_rows_beside_its_calls(
    sim: tuple[Simulator, str], serve_gateway: Callable[..., Served], rows: Rows
) -> None:
    served = serve_gateway(sim_table(sim[1], otlp=True))
    results = export_one_span(served.url, {"authorization": f"Bearer {KEY}"})
    assert results == [SpanExportResult.SUCCESS]
    row = rows.only
    assert (row.provider, row.requested_model, row.model) == (
        "openai",
        "gpt-4o-mini",
        "gpt-4o-mini-2024-07-18",
    )
    assert (row.input_tokens, row.output_tokens, row.session_id) == (1200, 80, "s-1")
    # The same process still serves the LLM routes.
    answer = httpx.post(
        f"{served.url}/v1/chat/completions",
        json={"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]},
        headers={"authorization": f"Bearer {KEY}"},
        timeout=30,
    )
    assert answer.status_code == 200
    assert len(rows.wait(2)) == 2


def test_span_rows_carry_the_tags_of_the_key_that_sent_them(
    sim: tuple[Simulator, str], serve_gateway: Callable[..., Served], rows: Rows
) -> None:
    served = serve_gateway(sim_table(sim[1], otlp=True))
    assert export_one_span(served.url, {"authorization": f"Bearer {KEY}"}) == [
        SpanExportResult.SUCCESS
    ]
    assert export_one_span(served.url, {"x-api-key": OTHER_KEY}) == [SpanExportResult.SUCCESS]
    first, second = rows.wait(2)
    assert first.tags == {"team": "search"}
    assert second.tags == {"team": "ops"}


def test_traces_need_a_gateway_key_and_a_gateway_without_otlp_has_no_such_route(
    sim: tuple[Simulator, str], serve_gateway: Callable[..., Served], rows: Rows
) -> None:
    served = serve_gateway(sim_table(sim[1], otlp=True))
    assert export_one_span(served.url, {}) == [SpanExportResult.FAILURE]
    refused = httpx.post(f"{served.url}/v1/traces", content=b"{}", timeout=10)
    assert refused.status_code == 401
    assert rows.events == []
    plain = serve_gateway(sim_table(sim[1]))
    missing = httpx.post(
        f"{plain.url}/v1/traces",
        content=b"{}",
        headers={"authorization": f"Bearer {KEY}", "content-type": "application/json"},
        timeout=10,
    )
    assert missing.status_code == 404


@pytest.mark.parametrize("value", ["yes", 1])
def test_otlp_must_be_true_or_false(value: object) -> None:
    from ledger.gateway import GatewayConfigurationError, parse_config

    with pytest.raises(GatewayConfigurationError) as caught:
        parse_config(sim_table("http://127.0.0.1:9", otlp=value))
    assert caught.value.key == "tool.ledger.gateway.otlp"
