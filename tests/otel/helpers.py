"""Events and readers shared by the OpenTelemetry tests."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from sqlalchemy import select

from ledger.events import UsageEvent
from ledger.schema import token_usage
from ledger.store.engine import make_engine

T0 = dt.datetime(2026, 11, 30, 12, 0, 0, 123456, tzinfo=dt.UTC)


def full_event(**changes: Any) -> UsageEvent:
    """An attempt with every column set."""
    event = UsageEvent(
        started_at=T0,
        requested_provider="openrouter",
        requested_model="deepseek/deepseek-chat",
        provider="openrouter",
        model="deepseek/deepseek-chat-v3",
        upstream="DeepInfra",
        generation_id="gen-123",
        routing_sort="price",
        routing_order="DeepInfra,Novita",
        status="ok",
        session_id="s-1",
        actor_id="planner",
        session_key="ledger:s-1:planner",
        latency_ms=812.5,
        ttft_ms=120.25,
        http_status=200,
        input_tokens=2048,
        output_tokens=180,
        cache_read_tokens=1920,
        cache_write_tokens=64,
        reasoning_tokens=40,
        cost_usd=Decimal("0.0003125"),
        cost_source="provider",
        streamed=True,
        attempt=2,
    )
    return event.replace(**changes)


def points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    """Metric name -> its data points."""
    out: dict[str, list[Any]] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data is not None else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                out.setdefault(metric.name, []).extend(metric.data.data_points)
    return out


def rows_by_event(url: str) -> dict[str, dict[str, Any]]:
    """Every row of a ledger, without ``id``, by event id."""
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            result = conn.execute(select(token_usage)).mappings().all()
    finally:
        engine.dispose()
    return {r["event_id"]: {k: v for k, v in r.items() if k != "id"} for r in result}


def wait_for(predicate: Any, timeout: float = 60.0) -> bool:
    """Poll ``predicate`` until true or ``timeout`` (generous: CI is a busy machine)."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())


def events(n: int) -> Iterator[UsageEvent]:
    for i in range(n):
        yield full_event(
            started_at=T0 + dt.timedelta(seconds=i), session_id=f"s-{i % 3}", input_tokens=2048 + i
        )
