"""``ledger reconcile``: the ledger's estimates against what the bill says."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import sys
from typing import Final

import click
import httpx
from rich.console import Console
from sqlalchemy.exc import SQLAlchemyError

from ledger.cli.budget import parse_when
from ledger.errors import ConfigurationError, ReconcileError
from ledger.reconcile.openrouter import (
    DEFAULT_BASE_URL,
    GenerationClient,
    ReconcileReport,
    reconcile_openrouter,
)
from ledger.store.engine import database_url, display_url, make_engine, sqlite_path
from ledger.store.migrate import current_revision, head_revision

EXIT_OK: Final = 0
EXIT_BAD: Final = 2


def _fail(message: str) -> None:
    click.echo(f"ledger reconcile: {message}", err=True)
    sys.exit(EXIT_BAD)


@click.group()
def reconcile() -> None:
    """Compare the ledger with what the providers billed."""


async def _run(
    url: str, key: str, since: dt.datetime | None, concurrency: int, timeout: float
) -> ReconcileReport:
    engine = make_engine(database_url())
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    try:
        async with httpx.AsyncClient(timeout=timeout, limits=limits) as http:
            client = GenerationClient(http, api_key=key, base_url=url)
            return await reconcile_openrouter(engine, client, since=since, concurrency=concurrency)
    finally:
        engine.dispose()


@reconcile.command("openrouter")
@click.option(
    "--since",
    default="7d",
    show_default=True,
    help="Rows started from: 30m, 24h, 7d back from now, an ISO date/time, or 'all'.",
)
@click.option(
    "--concurrency",
    type=click.IntRange(1, 256),
    default=16,
    show_default=True,
    help="Generations fetched at once.",
)
@click.option("--timeout", type=click.FloatRange(0.1, 600), default=30.0, show_default=True)
@click.option(
    "--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True
)
def openrouter(since: str, concurrency: int, timeout: float, fmt: str) -> None:
    """Fetch what OpenRouter billed each generation (GET /generation?id=…) and store it
    beside the estimate. Resumable: a rerun fetches only rows still unreconciled;
    generations OpenRouter does not have yet stay pending. Exit 0, 2 on an error."""
    start = parse_when(since, dt.datetime.now(dt.UTC))
    key = os.environ.get("OPENROUTER_API_KEY", "")
    if not key:
        _fail("OPENROUTER_API_KEY is not set")
    base = os.environ.get("OPENROUTER_BASE_URL") or DEFAULT_BASE_URL
    try:
        url = database_url()
    except ConfigurationError as exc:
        _fail(str(exc))
    path = sqlite_path(url)
    if path is not None and not path.exists():
        _fail(f"{display_url(url)}: no such ledger database")
    engine = make_engine(url)
    try:
        if current_revision(engine) != head_revision():
            _fail(f"{display_url(url)}: schema out of date; run `ledger db upgrade` first")
    finally:
        engine.dispose()
    try:
        report = asyncio.run(_run(base, key, start, concurrency, timeout))
    except ReconcileError as exc:
        _fail(str(exc))
    except SQLAlchemyError as exc:
        _fail(f"{display_url(url)}: {type(exc).__name__}: {str(exc).splitlines()[0]}")
    if fmt == "json":
        click.echo(json.dumps(report.as_dict(), indent=1))
    else:
        out = Console()
        out.print(
            f"{report.billed} row(s) reconciled of {report.examined}; {report.pending} not "
            f"billed yet (retried next run); {report.failed} failed"
        )
        out.print(
            f"estimated ${report.estimated_usd} vs billed ${report.billed_usd}: "
            f"drift {'+' if report.drift_usd >= 0 else ''}{report.drift_usd} USD"
        )
    sys.exit(EXIT_OK)
