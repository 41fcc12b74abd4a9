"""Spans of real attempts: a fallback through loopback providers into a real ledger, each
span naming its own route's model and provider, where it was sent and how it ended
(the fallback attempts Phoenix priced as the first route's model, issue 38)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ledger.cascade import Cascade, Route
from ledger.client import Client
from ledger.otel.export import OTelExporter
from ledger.providers import make_provider
from ledger.store.ledger import Ledger
from tests.llm_loopback import LoopbackLLM
from tests.test_cascade import KEY, MESSAGES, anthropic_ok, openai_error


@pytest.fixture
def mirrored(sqlite_url: str, tmp_path: Path) -> Iterator[tuple[Ledger, InMemorySpanExporter]]:
    spans = InMemorySpanExporter()
    exporter = OTelExporter(span_exporter=spans, metric_readers=[InMemoryMetricReader()])
    with Ledger(sqlite_url, journal_dir=tmp_path / "j", exporters=[exporter]) as ledger:
        yield ledger, spans
    exporter.close()


def test_a_fallback_attempt_s_span_names_its_own_route(
    mirrored: tuple[Ledger, InMemorySpanExporter],
) -> None:
    ledger, spans = mirrored
    with LoopbackLLM() as openai, LoopbackLLM() as anthropic:
        openai.queue(openai_error(500))
        anthropic.queue(anthropic_ok(120, 0, 30))
        providers = [
            make_provider("openai", api_key=KEY, base_url=openai.url),
            make_provider("anthropic", api_key=KEY, base_url=anthropic.url),
        ]
        chain = [Route("openai", "gpt-4o-mini"), Route("anthropic", "claude-haiku-4-5")]
        with Client(providers=providers, ledger=ledger, strict=True) as client:
            assert Cascade(client, chain).chat(MESSAGES).provider == "anthropic"
        assert ledger.flush(10)
        for exporter in ledger._exporters:
            assert isinstance(exporter, OTelExporter) and exporter.flush()
        servers = {"o": openai, "a": anthropic}
        ports = {name: int(server.url.rsplit(":", 1)[1]) for name, server in servers.items()}
    first, second = sorted(
        (dict(s.attributes or {}) for s in spans.get_finished_spans()),
        key=lambda a: int(a["ledger.attempt"]),  # type: ignore[arg-type]
    )
    expected: dict[str, Any] = {
        "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.provider.name": "openai",
        "server.address": "127.0.0.1",
        "server.port": ports["o"],
        "ledger.requested_model": "gpt-4o-mini",
        "error.type": "server_error",
    }
    assert {k: first.get(k) for k in expected} == expected
    assert "gen_ai.response.finish_reasons" not in first
    expected = {
        "gen_ai.request.model": "claude-haiku-4-5",
        "gen_ai.response.model": "claude-haiku-4-5-20251001",
        "gen_ai.provider.name": "anthropic",
        "gen_ai.response.finish_reasons": ("end_turn",),
        "server.address": "127.0.0.1",
        "server.port": ports["a"],
        "ledger.requested_provider": "openai",
        "ledger.requested_model": "gpt-4o-mini",
        "llm.model_name": "claude-haiku-4-5-20251001",
        "llm.provider": "anthropic",
    }
    assert {k: second.get(k) for k in expected} == expected
    assert second["llm.cost.total"] == second["ledger.cost_usd"] > 0
