"""``ledger otel export``: replay the ledger's history to an OpenTelemetry collector."""

from __future__ import annotations

import datetime as dt
import sys
import time

import click

from ledger.cli.budget import parse_when
from ledger.errors import ConfigurationError, DatabaseError
from ledger.store.engine import database_url, make_engine
from ledger.store.migrate import check_schema


@click.group()
def otel() -> None:
    """OpenTelemetry: send the ledger's rows as GenAI spans and metrics."""


@otel.command("export")
@click.option(
    "--since",
    required=True,
    help="Oldest row to send: 30m, 24h, 7d back from now, an ISO date/time, or 'all'.",
)
@click.option("--until", default=None, help="Stop before this time (same forms); default now.")
@click.option(
    "--endpoint",
    required=True,
    help="OTLP/HTTP base URL of the collector, e.g. http://localhost:4318.",
)
@click.option(
    "--timeout", type=float, default=30.0, show_default=True, help="Seconds to send, in all."
)
def export(since: str, until: str | None, endpoint: str, timeout: float) -> None:
    """Send every row started in [--since, --until) as a GenAI span and metric points."""
    try:
        from ledger.otel.export import OTelExporter
        from ledger.otel.history import events_between
    except ImportError as exc:
        raise ConfigurationError(
            f"ledger otel needs the otel extra (pip install 'ledger[otel]'): {exc}"
        ) from None
    now = dt.datetime.now(dt.UTC)
    start, end = parse_when(since, now), (now if until is None else parse_when(until, now))
    engine = make_engine(database_url())
    deadline = time.monotonic() + timeout
    # Spans, then metrics: each exporter retries until its own timeout, whatever the
    # SDK's flush was given, so the two share --timeout.
    exporter = OTelExporter.to_endpoint(endpoint, timeout_s=min(timeout / 2, 10.0))
    try:
        check_schema(engine)
        sent = exporter.export_all(events_between(engine, start, end))
        delivered = exporter.flush(timeout)
    except DatabaseError as exc:
        click.echo(f"ledger otel export: {exc}", err=True)
        sys.exit(2)
    finally:
        # What is left of --timeout: the flush sent everything it could, and a closing
        # export to a collector that is down would wait its own timeout once more. Not
        # under half a second: the SDK's MeterProvider.shutdown raises on a spent deadline.
        exporter.close(timeout=max(0.5, deadline - time.monotonic()))
        engine.dispose()
    if not delivered or exporter.reporting.failures:
        click.echo(f"ledger otel export: {sent} row(s) built, not all reached {endpoint}", err=True)
        sys.exit(1)
    click.echo(f"{sent} row(s) sent to {endpoint} as GenAI spans")
