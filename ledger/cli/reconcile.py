"""``ledger reconcile``: the ledger's estimates against what the bill says."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Final, NoReturn

import click
import httpx
import pandas as pd  # type: ignore[import-untyped]
from rich.text import Text
from sqlalchemy.engine import URL
from sqlalchemy.exc import SQLAlchemyError

from ledger.cli.budget import parse_when
from ledger.cli.tables import counted, print_frame, safe, stdout_console
from ledger.errors import LedgerError, ReconcileError
from ledger.reconcile.admin import ANTHROPIC, OPENAI, Limits, ReportSource
from ledger.reconcile.bounds import Deadline
from ledger.reconcile.drift import DriftReport, Tolerance, check_bill
from ledger.reconcile.openrouter import (
    DEFAULT_BASE_URL,
    NOT_FOUND_AFTER,
    GenerationClient,
    Plausibility,
    ReconcileReport,
    reconcile_openrouter,
)
from ledger.store.engine import database_url, display_url, make_engine
from ledger.store.migrate import check_ledger

EXIT_OK: Final = 0
#: openrouter: rows failed, were held back or left by the deadline (the rest is stored);
#: openai/anthropic: drift beyond the tolerance.
EXIT_INCOMPLETE: Final = 1
EXIT_BAD: Final = 2


def _fail(message: str) -> NoReturn:
    click.echo(f"ledger reconcile: {message}", err=True)
    sys.exit(EXIT_BAD)


def _checked_ledger() -> URL:
    """The ledger's URL once the one ledger check passes (else exit 2, its fix named)."""
    try:
        return check_ledger()
    except LedgerError as exc:
        _fail(str(exc))


@click.group()
def reconcile() -> None:
    """Compare the ledger with what the providers billed."""


@dataclass(frozen=True, slots=True)
class _OpenRouterRun:
    since: dt.datetime | None
    concurrency: int
    timeout: float
    deadline_s: float
    refetch: bool
    max_ratio: float


async def _run(url: str, key: str, run: _OpenRouterRun) -> ReconcileReport:
    deadline = Deadline.after(run.deadline_s)  # from the first request, not the option parse
    engine = make_engine(database_url())
    pool = httpx.Limits(max_connections=run.concurrency, max_keepalive_connections=run.concurrency)
    ratio = Decimal(str(run.max_ratio)) if run.max_ratio else None
    try:
        async with httpx.AsyncClient(timeout=run.timeout, limits=pool) as http:
            client = GenerationClient(http, api_key=key, base_url=url, timeout=run.timeout)
            return await reconcile_openrouter(
                engine,
                client,
                since=run.since,
                concurrency=run.concurrency,
                refetch=run.refetch,
                plausibility=Plausibility(max_ratio=ratio),
                deadline=deadline,
            )
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
@click.option(
    "--timeout",
    type=click.FloatRange(0.1, 600),
    default=30.0,
    show_default=True,
    help="Seconds one request may take, connect to last byte (then retried).",
)
@click.option(
    "--deadline",
    type=click.FloatRange(1, 7 * 86400),
    default=3600.0,
    show_default=True,
    help="Seconds the whole run may take; rows not fetched by then are left for a rerun.",
)
@click.option(
    "--refetch",
    is_flag=True,
    help="Also fetch rows already billed in the --since window and replace their bill.",
)
@click.option(
    "--max-ratio",
    type=click.FloatRange(0),
    default=100.0,
    show_default=True,
    help="Hold back a bill more than this many times the estimate, or under 1/this of it "
    "(when the larger is $0.01 or more); 0 stores every bill.",
)
@click.option(
    "--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True
)
def openrouter(
    since: str,
    concurrency: int,
    timeout: float,
    deadline: float,
    refetch: bool,
    max_ratio: float,
    fmt: str,
) -> None:
    """Fetch what OpenRouter billed each generation (GET /generation?id=…) and store it
    beside the estimate. Resumable: a rerun fetches only rows still unreconciled
    (--refetch: billed ones too, replacing their bill); generations OpenRouter does not
    have yet stay pending. Exit 0 when every row was billed or is pending, 1 when any
    failed, was held back as implausible or was left by the deadline, 2 on an error."""
    if 0 < max_ratio < 1:  # 1/x below x would hold back every bill
        _fail(f"--max-ratio {max_ratio:g}: give 1 or more (100: a hundredfold), or 0 for no check")
    start = parse_when(since, dt.datetime.now(dt.UTC))
    key = os.environ.get("OPENROUTER_API_KEY", "")
    if not key:
        _fail("OPENROUTER_API_KEY is not set")
    base = os.environ.get("OPENROUTER_BASE_URL") or DEFAULT_BASE_URL
    _checked_ledger()
    run = _OpenRouterRun(start, concurrency, timeout, deadline, refetch, max_ratio)
    try:
        report = asyncio.run(_run(base, key, run))
    except ReconcileError as exc:
        _fail(str(exc))
    except SQLAlchemyError as exc:
        _fail(f"{display_url(database_url())}: {type(exc).__name__}: {str(exc).splitlines()[0]}")
    if fmt == "json":
        click.echo(json.dumps(report.as_dict(), indent=1))
    else:
        _print_openrouter(report, run, base)
    sys.exit(EXIT_OK if report.complete else EXIT_INCOMPLETE)


def _print_openrouter(report: ReconcileReport, run: _OpenRouterRun, base: str) -> None:
    out = stdout_console()
    out.print(
        Text(
            f"{report.billed:,} of {counted(report.examined, 'row')} reconciled; "
            f"{report.pending:,} not billed yet (asked again next run); {report.failed:,} failed"
        )
    )
    if report.unknown:
        hours = NOT_FOUND_AFTER.total_seconds() / 3600
        out.print(
            Text(
                f"{counted(report.unknown, 'row')} unknown to {safe(base)}, though started over "
                f"{hours:g} h ago: made through another account, base URL or simulator run, "
                "they will never be billed there (for the demo's rows: `ledger simulate "
                "--bills FILE`, as the demo's next steps say)"
            )
        )
    if report.held_back:
        out.print(
            Text(
                f"{report.held_back} bill(s) held back as implausible (beyond {run.max_ratio:g}x "
                "the estimate either way), not stored: check them, then rerun with a larger "
                "--max-ratio to store them"
            )
        )
        for held in report.implausible:
            out.print(
                Text(
                    f"  {safe(held['generation_id'])}: estimated "
                    f"{_usd(Decimal(held['estimated_usd']))}, billed "
                    f"{_usd(Decimal(held['billed_usd']))}"
                )
            )
    if report.unfinished:
        out.print(
            Text(
                f"{report.unfinished} row(s) not fetched before the --deadline of "
                f"{run.deadline_s:g} s: a rerun resumes"
            )
        )
    for error in report.errors:
        out.print(Text(f"  failed: {safe(error)}"))
    if report.failed > len(report.errors):
        out.print(Text(f"  … and {report.failed - len(report.errors)} more failure(s)"))
    out.print(
        Text(
            f"estimated {_usd(report.estimated_usd)} vs billed {_usd(report.billed_usd)}: "
            f"drift {_usd(report.drift_usd, signed=True)}"
        )
    )


def _usd(amount: Decimal, *, signed: bool = False) -> str:
    """Every digit there is, none that is not: ``$0.0123``, ``+$0``, never ``0E-10``."""
    sign = "-" if amount < 0 else "+" if signed else ""
    return f"{sign}${format(abs(amount).normalize(), ',f')}"


EXIT_DRIFT: Final = EXIT_INCOMPLETE
_DRIFT_COLUMNS: Final = (
    "day",
    "model",
    "status",
    "ledger_usd",
    "billed_usd",
    "drift_usd",
    "drift_pct",
    "ledger_rows",
    "billed_requests",
    "ledger_input_tokens",
    "billed_input_tokens",
)
_DRIFT_HEADERS: Final = {
    "ledger_usd": "ledger $",
    "billed_usd": "billed $",
    "drift_usd": "drift $",
    "drift_pct": "drift %",
    "ledger_rows": "rows",
    "billed_requests": "billed calls",
    "ledger_input_tokens": "ledger in tok",
    "billed_input_tokens": "billed in tok",
}
#: Said with every report: what an aggregate bill can and cannot do.
_AGGREGATE_NOTE: Final = (
    "The reports are per day and model, not per call: they check the ledger's totals "
    "but cannot fill a row's billed_cost_usd (only `ledger reconcile openrouter` can)."
)


def _admin_key(source: ReportSource) -> str:
    for name in source.key_env:
        if key := os.environ.get(name, "").strip():
            return key
    _fail(f"{source.key_env[0]} is not set: {source.key_help}")


def _print_drift(report: DriftReport) -> None:
    out = stdout_console()
    records = [line.as_dict() for line in report.lines]
    for record in records:
        for column in ("ledger_usd", "billed_usd", "drift_usd"):
            record[column] = Decimal(record[column])
        pct = record["drift_pct"]
        record["drift_pct"] = None if pct is None else f"{pct:+.1f}%"
    # object columns: an unknown count stays "–", never a float NaN
    frame = pd.DataFrame(records, columns=_DRIFT_COLUMNS, dtype=object)
    title = f"{report.provider}: ledger vs bill per day and model"
    print_frame(out, title, frame, _DRIFT_COLUMNS, headers=_DRIFT_HEADERS, group_by=("day",))
    drift = report.billed_usd - report.ledger_usd
    out.print(
        Text(
            f"ledger {_usd(report.ledger_usd)} vs billed {_usd(report.billed_usd)}: drift "
            f"{_usd(drift, signed=True)}; billed but not in the ledger "
            f"{_usd(report.unledgered_usd)}; {len(report.exceeded)} line(s) beyond "
            f"{report.tolerance.pct}% (floor {_usd(report.tolerance.min_usd)})"
        )
    )
    unpriced = sum(line.unpriced_rows for line in report.lines)
    if unpriced:
        out.print(
            Text(
                f"{unpriced:,} ledger row(s) of unknown cost are counted in rows but not in "
                "ledger $: their days show more drift than the ledger's prices explain."
            )
        )
    out.print(Text(_AGGREGATE_NOTE, style="dim"))


def _report_command(
    source: ReportSource,
    since: str,
    until: str,
    tolerance: Decimal,
    min_usd: Decimal,
    fmt: str,
    limits: tuple[float, float],
) -> NoReturn:
    now = dt.datetime.now(dt.UTC)
    begin = parse_when(since, now)
    if begin is None:
        _fail("--since must be a bound (a duration or a date): the reports need a start")
    start = begin.astimezone(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    end = now if until.strip().lower() == "now" else (parse_when(until, now) or now)
    if end <= start:
        _fail(f"--until {until!r} is not after --since {since!r}")
    key = _admin_key(source)
    base = os.environ.get(source.base_env) or source.default_base
    url = _checked_ledger()
    timeout, deadline_s = limits
    deadline = Deadline.after(deadline_s)
    engine = make_engine(url)
    try:
        with httpx.Client(timeout=timeout) as http:
            report = check_bill(
                engine,
                http,
                source,
                key=key,
                base_url=base,
                start=start,
                end=end,
                tolerance=Tolerance(tolerance, min_usd),
                limits=Limits(timeout, deadline),
            )
    except ReconcileError as exc:
        _fail(str(exc))
    except httpx.InvalidURL as exc:
        _fail(f"{source.base_env} or the default base URL is unusable: {exc}")
    except SQLAlchemyError as exc:
        _fail(f"{display_url(url)}: {type(exc).__name__}: {str(exc).splitlines()[0]}")
    finally:
        engine.dispose()
    if fmt == "json":
        click.echo(json.dumps({**report.as_dict(), "note": _AGGREGATE_NOTE}, indent=1))
    else:
        _print_drift(report)
    sys.exit(EXIT_DRIFT if report.exceeded else EXIT_OK)


def _report_options(func: Callable[..., None]) -> Callable[..., None]:
    options = (
        click.option(
            "--since",
            default="30d",
            show_default=True,
            help="From the UTC day of: 7d/24h back from now or an ISO date.",
        ),
        click.option(
            "--until", default="now", show_default=True, help="Up to (exclusive): as --since."
        ),
        click.option(
            "--tolerance",
            type=click.FloatRange(0, 1000),
            default=5.0,
            show_default=True,
            help="Drift allowed per day and model, in % of the billed cost.",
        ),
        click.option(
            "--min-usd",
            type=click.FloatRange(0),
            default=0.01,
            show_default=True,
            help="Drift always allowed per day and model, in USD (rounding on small days).",
        ),
        click.option(
            "--format",
            "fmt",
            type=click.Choice(["table", "json"]),
            default="table",
            show_default=True,
        ),
        click.option("--json", "as_json", is_flag=True, help="Same as --format json."),
        click.option(
            "--timeout",
            type=click.FloatRange(0.1, 600),
            default=60.0,
            show_default=True,
            help="Seconds one request may take, connect to last byte (then retried).",
        ),
        click.option(
            "--deadline",
            type=click.FloatRange(1, 86400),
            default=300.0,
            show_default=True,
            help="Seconds the whole run may take (every page and retry); exit 2 beyond it.",
        ),
    )
    for option in reversed(options):
        func = option(func)
    return func


def _run_report(
    source: ReportSource,
    since: str,
    until: str,
    tolerance: float,
    min_usd: float,
    fmt: str,
    as_json: bool,
    limits: tuple[float, float],
) -> NoReturn:
    _report_command(
        source,
        since,
        until,
        Decimal(str(tolerance)),
        Decimal(str(min_usd)),
        "json" if as_json else fmt,
        limits,
    )


@reconcile.command("openai")
@_report_options
def openai(
    since: str,
    until: str,
    tolerance: float,
    min_usd: float,
    fmt: str,
    as_json: bool,
    timeout: float,
    deadline: float,
) -> None:
    """Compare the ledger's OpenAI totals per day and model with the organisation's cost
    and usage reports (GET /v1/organization/costs, /usage/completions; OPENAI_ADMIN_KEY).
    Read only. Exit 0 within tolerance, 1 beyond it, 2 on an error (--deadline passed too)."""
    _run_report(OPENAI, since, until, tolerance, min_usd, fmt, as_json, (timeout, deadline))


@reconcile.command("anthropic")
@_report_options
def anthropic(
    since: str,
    until: str,
    tolerance: float,
    min_usd: float,
    fmt: str,
    as_json: bool,
    timeout: float,
    deadline: float,
) -> None:
    """Compare the ledger's Anthropic totals per day and model with the Admin API's cost
    and usage reports (/v1/organizations/cost_report, /usage_report/messages;
    ANTHROPIC_ADMIN_KEY). Read only. Exit 0 within tolerance, 1 beyond it, 2 on an error
    (--deadline passed too)."""
    _run_report(ANTHROPIC, since, until, tolerance, min_usd, fmt, as_json, (timeout, deadline))
