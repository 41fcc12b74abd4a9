"""The exporter: each recorded attempt as a GenAI span and histogram points, off the
caller's thread, never at the cost of a row."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest
from opentelemetry import trace
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from ledger.events import UsageEvent
from ledger.exporters import ENV_OTEL_ENDPOINT, Exporter
from ledger.otel.export import DURATION_BUCKETS, TOKEN_BUCKETS, OTelExporter, nanoseconds
from ledger.otel.serve import serve_in_thread
from ledger.simulator.server import free_port
from ledger.store.ledger import Ledger
from tests.analytics.builders import migrated_sqlite
from tests.otel.helpers import T0, events, full_event, points, rows_by_event

Pair = tuple[OTelExporter, InMemorySpanExporter, InMemoryMetricReader]


@pytest.fixture
def memory() -> Iterator[Pair]:
    spans, reader = InMemorySpanExporter(), InMemoryMetricReader()
    exporter = OTelExporter(span_exporter=spans, metric_readers=[reader])
    yield exporter, spans, reader
    exporter.close()


def test_a_full_attempt_becomes_one_client_span_attribute_by_attribute(memory: Pair) -> None:
    exporter, spans, _ = memory
    # A fallback attempt: the chain asked anthropic/claude-sonnet-4 first, this route
    # asked OpenRouter for deepseek/deepseek-chat.
    event = full_event(
        requested_provider="anthropic",
        requested_model="claude-sonnet-4",
        attempt_model="deepseek/deepseek-chat",
        base_url="https://openrouter.ai/api/v1",
        finish_reason="stop",
    )
    exporter.submit(event)
    assert exporter.flush()
    (span,) = spans.get_finished_spans()
    assert span.name == "chat deepseek/deepseek-chat"
    assert span.kind is SpanKind.CLIENT
    assert span.start_time == nanoseconds(T0) == 1_796_040_000_123_456_000
    assert span.end_time == span.start_time + 812_500_000
    assert span.status.status_code is StatusCode.UNSET
    assert span.parent is None
    assert dict(span.attributes or {}) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openrouter",
        "gen_ai.request.model": "deepseek/deepseek-chat",
        "gen_ai.response.model": "deepseek/deepseek-chat-v3",
        "gen_ai.response.id": "gen-123",
        "gen_ai.response.finish_reasons": ("stop",),
        "gen_ai.usage.input_tokens": 2048,
        "gen_ai.usage.output_tokens": 180,
        "gen_ai.usage.cache_read.input_tokens": 1920,
        "gen_ai.usage.cache_creation.input_tokens": 64,
        "gen_ai.usage.reasoning.output_tokens": 40,
        "gen_ai.conversation.id": "s-1",
        "gen_ai.agent.id": "planner",
        "http.response.status_code": 200,
        "server.address": "openrouter.ai",
        "server.port": 443,
        "ledger.event_id": event.event_id,
        "ledger.call_id": event.call_id,
        "ledger.attempt": 2,
        "ledger.requested_provider": "anthropic",
        "ledger.requested_model": "claude-sonnet-4",
        "ledger.upstream": "DeepInfra",
        "ledger.cost_usd": 0.0003125,
        "ledger.cost_source": "provider",
        "ledger.session_key_sent": True,
        "ledger.response_cache_hit": False,
        "ledger.streamed": True,
        "ledger.usage_reported": True,
        "ledger.ttft_ms": 120.25,
        "ledger.routing.sort": "price",
        "ledger.routing.order": "DeepInfra,Novita",
        "openinference.span.kind": "LLM",
        "llm.model_name": "deepseek/deepseek-chat-v3",
        "llm.provider": "openrouter",
        "llm.token_count.prompt": 2048,
        "llm.token_count.completion": 180,
        "llm.token_count.total": 2228,
        "llm.token_count.prompt_details.cache_read": 1920,
        "llm.token_count.prompt_details.cache_write": 64,
        "llm.token_count.completion_details.reasoning": 40,
        "llm.cost.total": 0.0003125,
    }
    assert span.resource.attributes["service.name"] == "ledger"


def test_the_session_key_itself_never_leaves_the_ledger(memory: Pair) -> None:
    exporter, spans, _ = memory
    exporter.submit(full_event(session_key="secret-sticky-key"))
    assert exporter.flush()
    (span,) = spans.get_finished_spans()
    assert "secret-sticky-key" not in repr(dict(span.attributes or {}))


def test_a_failed_attempt_has_error_status_and_error_type_and_no_absent_values(
    memory: Pair,
) -> None:
    exporter, spans, _ = memory
    event = full_event(
        status="error",
        error_type="rate_limited",
        http_status=429,
        model=None,
        generation_id=None,
        upstream=None,
        cost_usd=None,
        cost_source=None,
        latency_ms=None,
        ttft_ms=None,
        input_tokens=0,
        output_tokens=0,
        cache_read_tokens=0,
        cache_write_tokens=0,
        reasoning_tokens=0,
        session_key=None,
    )
    exporter.submit(event)
    assert exporter.flush()
    (span,) = spans.get_finished_spans()
    attributes = dict(span.attributes or {})
    assert span.status.status_code is StatusCode.ERROR
    assert attributes["error.type"] == "rate_limited"
    assert attributes["http.response.status_code"] == 429
    assert attributes["ledger.session_key_sent"] is False
    for absent in ("gen_ai.response.model", "gen_ai.response.id", "ledger.cost_usd"):
        assert absent not in attributes
    assert span.end_time == span.start_time  # no latency known


def test_histograms_follow_the_genai_metric_conventions(memory: Pair) -> None:
    exporter, _, reader = memory
    exporter.submit(full_event())
    exporter.submit(full_event(input_tokens=100, cache_read_tokens=0, cache_write_tokens=0))
    exporter.submit(full_event(status="error", error_type="timeout", latency_ms=30_000.0))
    assert exporter.flush()
    found = points(reader)
    tokens = {
        (p.attributes["gen_ai.token.type"], p.attributes.get("error.type")): p
        for p in found["gen_ai.client.token.usage"]
    }
    assert tokens["input", None].sum == 2048 + 100 and tokens["input", None].count == 2
    assert tokens["output", None].sum == 2 * 180
    assert tokens["input", "timeout"].sum == 2048
    assert tuple(tokens["input", None].explicit_bounds) == TOKEN_BUCKETS
    assert dict(tokens["output", None].attributes) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openrouter",
        "gen_ai.request.model": "deepseek/deepseek-chat",
        "gen_ai.response.model": "deepseek/deepseek-chat-v3",
        "gen_ai.token.type": "output",
    }
    durations = found["gen_ai.client.operation.duration"]
    by_error = {p.attributes.get("error.type"): p for p in durations}
    assert by_error[None].sum == pytest.approx(2 * 0.8125)
    assert by_error["timeout"].sum == pytest.approx(30.0)
    assert tuple(by_error[None].explicit_bounds) == DURATION_BUCKETS


def test_a_response_cache_hit_records_no_token_usage(memory: Pair) -> None:
    exporter, spans, reader = memory
    exporter.submit(full_event(attempt=0, response_cache_hit=True, latency_ms=1.0))
    assert exporter.flush()
    assert dict(spans.get_finished_spans()[0].attributes or {})["ledger.response_cache_hit"]
    assert "gen_ai.client.token.usage" not in points(reader)


@pytest.mark.parametrize(
    ("provider", "semconv", "openinference"),
    [
        ("gemini", "gcp.gemini", "google"),
        ("azure_openai", "azure.ai.openai", "azure"),
        ("mistral", "mistral_ai", "mistralai"),
        ("anthropic", "anthropic", "anthropic"),
        ("openrouter", "openrouter", "openrouter"),
    ],
)
def test_each_provider_is_named_as_each_convention_names_it(
    memory: Pair, provider: str, semconv: str, openinference: str
) -> None:
    exporter, spans, _ = memory
    exporter.submit(full_event(provider=provider, requested_provider="openai"))
    assert exporter.flush()
    attributes = dict(spans.get_finished_spans()[0].attributes or {})
    assert attributes["gen_ai.provider.name"] == semconv
    assert attributes["llm.provider"] == openinference
    assert attributes["ledger.requested_provider"] == "openai"


@pytest.mark.parametrize(
    ("base_url", "address", "port"),
    [
        ("http://127.0.0.1:8787/api/v1", "127.0.0.1", 8787),
        ("https://api.anthropic.com", "api.anthropic.com", 443),
        ("http://[::1]:9000/v1", "::1", 9000),
    ],
)
def test_server_address_and_port_come_from_the_attempt_s_base_url(
    memory: Pair, base_url: str, address: str, port: int
) -> None:
    exporter, spans, reader = memory
    exporter.submit(full_event(base_url=base_url))
    assert exporter.flush()
    attributes = dict(spans.get_finished_spans()[0].attributes or {})
    assert (attributes["server.address"], attributes["server.port"]) == (address, port)
    (duration,) = points(reader)["gen_ai.client.operation.duration"]
    assert duration.attributes["server.address"] == address


def test_a_row_read_back_from_the_database_names_the_call_s_model(memory: Pair) -> None:
    exporter, spans, _ = memory
    exporter.submit(full_event(finish_reason=None, base_url=None))  # what the table holds
    assert exporter.flush()
    attributes = dict(spans.get_finished_spans()[0].attributes or {})
    assert attributes["gen_ai.request.model"] == "deepseek/deepseek-chat"
    for absent in ("server.address", "server.port", "gen_ai.response.finish_reasons"):
        assert absent not in attributes


def test_an_attempt_recorded_inside_an_application_span_is_its_child(memory: Pair) -> None:
    exporter, spans, _ = memory
    app = TracerProvider().get_tracer("app")
    with app.start_as_current_span("handle request") as parent:
        exporter.submit(full_event())
    assert exporter.flush()
    (span,) = spans.get_finished_spans()
    assert span.parent is not None
    assert span.parent.span_id == parent.get_span_context().span_id
    assert span.context is not None
    assert span.context.trace_id == parent.get_span_context().trace_id
    assert trace.get_current_span() is trace.INVALID_SPAN


def test_ledger_mirrors_every_recorded_row(ledger_url: str, tmp_path: Path, memory: Pair) -> None:
    exporter, spans, _ = memory
    assert isinstance(exporter, Exporter)
    with Ledger(ledger_url, journal_dir=tmp_path / "j", exporters=[exporter]) as ledger:
        ids = [ledger.record(e) for e in events(25)]
        assert ledger.flush()
        assert exporter.flush()
    exported = {dict(s.attributes or {})["ledger.event_id"] for s in spans.get_finished_spans()}
    assert exported == set(ids) == set(rows_by_event(ledger_url))


class _Broken:
    def __init__(self) -> None:
        self.closed = False

    def submit(self, event: object) -> None:
        raise RuntimeError("mirror bug")

    def close(self, timeout: float = 5.0) -> None:
        self.closed = True


def test_a_failing_exporter_costs_one_warning_and_no_row(
    sqlite_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    broken = _Broken()
    with (
        caplog.at_level(logging.WARNING, logger="ledger"),
        Ledger(sqlite_url, journal_dir=tmp_path / "j", exporters=[broken]) as ledger,
    ):
        for e in events(10):
            ledger.record(e)
        assert ledger.flush()
    assert len(rows_by_event(sqlite_url)) == 10
    assert [r.getMessage() for r in caplog.records].count(
        f"ledger: exporter {broken!r} failed; rows are unaffected"
    ) == 1
    assert broken.closed


def test_an_unreachable_collector_costs_one_warning_and_no_row(
    sqlite_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    exporter = OTelExporter.to_endpoint(dead, timeout_s=1.0)
    with (
        caplog.at_level(logging.DEBUG),
        Ledger(sqlite_url, journal_dir=tmp_path / "j", exporters=[exporter]) as ledger,
    ):
        for batch in range(3):
            for e in events(20):
                ledger.record(e.replace(event_id=f"{batch:08d}{e.event_id[8:]}"))
            exporter.flush(timeout=30)
        assert ledger.flush()
    assert len(rows_by_event(sqlite_url)) == 60
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.name for r in warnings] == ["ledger.otel.export"], [r.getMessage() for r in warnings]
    assert dead in warnings[0].getMessage()
    assert exporter.reporting.failures >= 1


def test_the_environment_switches_the_exporter_on(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_OTEL_ENDPOINT, f"http://127.0.0.1:{free_port()}")
    with Ledger(sqlite_url, journal_dir=tmp_path / "j") as ledger:
        (exporter,) = ledger._exporters
        assert isinstance(exporter, OTelExporter)
    monkeypatch.delenv(ENV_OTEL_ENDPOINT)
    with Ledger(sqlite_url, journal_dir=tmp_path / "j") as ledger:
        assert ledger._exporters == ()


def test_a_closed_exporter_drops_quietly_after_one_warning(
    memory: Pair, caplog: pytest.LogCaptureFixture
) -> None:
    exporter, spans, _ = memory
    exporter.close()
    with caplog.at_level(logging.WARNING):
        exporter.submit(full_event())
        exporter.submit(full_event())
    assert exporter.dropped == 2
    assert len(caplog.records) == 1
    assert spans.get_finished_spans() == ()


# -- against a real OTLP/HTTP receiver: the ledger's own ------------------------------

#: Columns the spans do not carry: the key itself (only whether one was sent), and labels.
NOT_EXPORTED = ("session_key", "paused", "locale", "tags")


def comparable(rows: dict[str, dict[str, object]]) -> dict[str, dict[str, object]]:
    return {k: {c: v for c, v in r.items() if c not in NOT_EXPORTED} for k, r in rows.items()}


def varied_events() -> list[UsageEvent]:
    return [
        *events(10),
        full_event(
            status="error",
            error_type="server_error",
            http_status=502,
            cost_usd=None,
            cost_source=None,
            model=None,
            input_tokens=0,
            output_tokens=0,
            cache_read_tokens=0,
            cache_write_tokens=0,
            reasoning_tokens=0,
        ),
        full_event(attempt=0, response_cache_hit=True, latency_ms=1.0, cost_usd=Decimal(0)),
        full_event(
            provider="anthropic",
            requested_provider="anthropic",
            upstream=None,
            cost_source="computed",
            session_id=None,
            actor_id=None,
        ),
    ]


def test_spans_sent_to_a_real_otlp_receiver_come_back_as_the_same_rows(
    ledger_url: str, tmp_path: Path
) -> None:
    source_url = migrated_sqlite(tmp_path / "source.db")
    with (
        Ledger(ledger_url, journal_dir=tmp_path / "sink", exporters=()) as sink,
        serve_in_thread(sink) as (receiver_url, receiver),
    ):
        exporter = OTelExporter.to_endpoint(receiver_url)
        with Ledger(source_url, journal_dir=tmp_path / "source", exporters=[exporter]) as source:
            for event in varied_events():
                source.record(event)
            assert source.flush()
            assert exporter.flush(timeout=60)
        assert sink.flush(timeout=60)
        assert receiver.stats.recorded == 13 and not receiver.stats.rejected
    original, received = rows_by_event(source_url), rows_by_event(ledger_url)
    assert len(original) == 13
    mismatched = {
        (key, column, value, comparable(received)[key].get(column))
        for key, row in comparable(original).items()
        for column, value in row.items()
        if comparable(received)[key].get(column) != value
    }
    assert not mismatched


class _TracesOnly(BaseHTTPRequestHandler):
    """A collector like Arize Phoenix: takes traces, answers 405 to metrics."""

    posts: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.posts.append(self.path)
        self.send_response(200 if self.path == "/v1/traces" else 405)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_a_collector_refusing_metrics_is_named_once_and_then_spared(
    caplog: pytest.LogCaptureFixture,
) -> None:
    _TracesOnly.posts = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _TracesOnly)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    exporter = OTelExporter.to_endpoint(url, timeout_s=2.0, metric_interval_ms=60_000)
    try:
        with caplog.at_level(logging.DEBUG):
            for batch in events(3):
                exporter.submit(batch)
                exporter.flush(timeout=10)
    finally:
        exporter.close()
        server.shutdown()
        server.server_close()
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert url in warnings[0] and "HTTP 405 on /v1/metrics" in warnings[0]
    assert "metrics=False" in warnings[0]
    assert _TracesOnly.posts.count("/v1/metrics") == 1  # no metrics endpoint: no more tries
    assert _TracesOnly.posts.count("/v1/traces") >= 3


def test_metrics_can_be_left_out_for_a_traces_only_collector(
    caplog: pytest.LogCaptureFixture,
) -> None:
    _TracesOnly.posts = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _TracesOnly)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    exporter = OTelExporter.to_endpoint(url, metrics=False)
    try:
        with caplog.at_level(logging.WARNING):
            exporter.submit(full_event())
            assert exporter.flush(timeout=10)
    finally:
        exporter.close()
        server.shutdown()
        server.server_close()
    assert _TracesOnly.posts == ["/v1/traces"]
    assert not caplog.records
