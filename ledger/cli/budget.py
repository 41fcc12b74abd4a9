"""``ledger budget check`` (the CI cost gate) and ``ledger budget status`` (today's burn).

``check`` exits 0 when every budget holds, 1 when one is exceeded, 2 when the
budgets file or an option is bad or the ledger cannot be read (missing,
unmigrated, unreachable): a broken ledger must never read as overspend. With
``--format json`` every outcome, errors included, is one JSON document on stdout.

With ``--notify URL`` it also posts a webhook for each budget that crossed its
warning or its limit today (once per budget, threshold and day); a webhook that
fails is reported on stderr and never changes the exit code. ``watch`` does the
notifying on a timer, for deployments without cron.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import sys
import time
from pathlib import Path
from typing import Final, NoReturn

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ledger.analytics.read.api import Analytics
from ledger.analytics.read.spend import known_agents
from ledger.budgets.alerts import crossings, headline
from ledger.budgets.config import BudgetConfig, load_config
from ledger.budgets.evaluation import CheckReport, evaluate, measured_usd, usd
from ledger.budgets.notify import DEFAULT_RETRIES, Delivery, notify, webhook_host
from ledger.budgets.status import BudgetStatus, budget_status
from ledger.cli.report import open_analytics
from ledger.cli.tables import counted, house_table, stdout_console
from ledger.errors import ConfigurationError, DatabaseError, LedgerError
from ledger.shown import one_line
from ledger.store.engine import database_url, make_engine
from ledger.store.migrate import check_schema

EXIT_OK: Final = 0
EXIT_EXCEEDED: Final = 1
EXIT_BAD: Final = 2
_DURATION: Final = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhdw])$")
_UNITS: Final = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_when(text: str, now: dt.datetime) -> dt.datetime | None:
    """``24h``/``30m``/``7d`` back from ``now``, an ISO date or time (UTC when no zone),
    or ``all`` (None: no bound)."""
    text = text.strip()
    if text.lower() == "all":
        return None
    if match := _DURATION.match(text.lower()):
        return now - dt.timedelta(**{_UNITS[match.group(2)]: float(match.group(1))})
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(
            f"{text!r}: expected a duration (30m, 24h, 7d), an ISO date/time, or 'all'"
        ) from None
    return when if when.tzinfo is not None else when.replace(tzinfo=dt.UTC)


def parse_tags(pairs: tuple[str, ...]) -> dict[str, str]:
    tags = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{pair!r}: expected KEY=VALUE", param_hint="--tag")
        tags[key] = value
    return tags


def _config(path: Path | None) -> BudgetConfig:
    return load_config(path)


def _bad(command: str, fmt: str, exc: Exception) -> NoReturn:
    """End with exit status 2: the reason on stderr, and as JSON on stdout when asked."""
    message = exc.format_message() if isinstance(exc, click.ClickException) else str(exc)
    click.echo(f"ledger budget {command}: {message}", err=True)
    if fmt == "json":
        error = {"type": type(exc).__name__, "message": message}
        # The report's own keys too, so a gate reading "ok"/"exceeded" sees a failure.
        click.echo(json.dumps({"ok": False, "error": error, "exceeded": [], "results": []}))
    sys.exit(EXIT_BAD)


def _check_table(report: CheckReport) -> Table:
    table = house_table("Budgets")
    for name, justify in (
        ("budget", "left"),
        ("limit", "right"),
        ("actual", "right"),
        ("headroom", "right"),
        ("", "left"),
    ):
        table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    table.add_column("reason")  # the one column that wraps: at words, never mid-word
    for r in report.results:
        status = "[bold red]EXCEEDED[/]" if r.exceeded else "[green]ok[/]"
        headroom = r.headroom_usd
        table.add_row(
            f"{r.budget} {r.metric}",
            usd(r.limit_usd),
            measured_usd(r.actual_usd, r.unknown_cost_rows),
            "–" if headroom is None else usd(headroom),
            status,
            Text(one_line(r.reason)),
        )
    return table


@click.group()
def budget() -> None:
    """Spend limits from [tool.ledger.budgets] (pyproject.toml) or [budgets] (ledger.toml)."""


_CONFIG_OPTION = click.option(
    "--config",
    "config_path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="The budgets file (default: LEDGER_BUDGETS_FILE, else the nearest ledger.toml "
    "or pyproject.toml).",
)
_FORMAT_OPTION = click.option(
    "--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True
)


_NOTIFY_OPTION = click.option(
    "--notify",
    "notify_url",
    metavar="URL",
    default=None,
    help="Post a Slack-compatible webhook for each budget past its warn_at or its limit "
    "today (once per budget, threshold and day).",
)
_RETRIES_OPTION = click.option(
    "--retries",
    type=click.IntRange(min=0),
    default=DEFAULT_RETRIES,
    show_default=True,
    help="Retries of a webhook that fails with 5xx, 429 or a network error (backoff 1 s, 2 s...).",
)


def _printable(text: str) -> str:
    """Ledger strings are data: no control character reaches the terminal."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def send_alerts(
    analytics: Analytics, config: BudgetConfig, at: dt.datetime, url: str, retries: int
) -> list[Delivery]:
    """Today's crossings as of ``at``, each posted to ``url`` unless sent before."""
    found = crossings(budget_status(analytics, config, at=at), config, at)
    if not found:
        return []
    engine = make_engine(database_url())
    try:
        check_schema(engine)
        return notify(engine, found, url, retries=retries)
    finally:
        engine.dispose()


def report_deliveries(deliveries: list[Delivery], url: str) -> None:
    for d in deliveries:
        what = _printable(headline(d.crossing))
        if d.outcome == "sent":
            click.echo(f"alert sent to {webhook_host(url)}: {what}", err=True)
        elif d.failed:
            click.echo(
                f"alert NOT delivered to {webhook_host(url)} after {d.attempts} attempt(s) "
                f"({_printable(d.error or 'unknown error')}): {what}",
                err=True,
            )


@budget.command()
@click.option(
    "--since",
    default="24h",
    show_default=True,
    help="Window start: 30m, 24h, 7d back from now, an ISO date/time, or 'all'.",
)
@click.option("--until", default=None, help="Window end (exclusive), same forms; default now.")
@click.option(
    "--tag",
    "tags",
    multiple=True,
    metavar="KEY=VALUE",
    help="Only rows carrying this tag (repeatable), e.g. run=ci-123.",
)
@_FORMAT_OPTION
@_CONFIG_OPTION
@_NOTIFY_OPTION
@_RETRIES_OPTION
def check(
    since: str,
    until: str | None,
    tags: tuple[str, ...],
    fmt: str,
    config_path: Path | None,
    notify_url: str | None,
    retries: int,
) -> None:
    """Check every budget over a window; exit 0 if all hold, 1 if one is exceeded, 2 on error."""
    now = dt.datetime.now(dt.UTC)
    try:
        start = parse_when(since, now)
        end = now if until is None else parse_when(until, now)
        wanted = parse_tags(tags)
        config = _config(config_path)
        with open_analytics(Console(stderr=True)) as analytics:
            config.check_agents(known_agents(analytics))
            report = evaluate(analytics, config, start=start, end=end, tags=wanted)
            deliveries = _alerts_for_check(analytics, config, end or now, notify_url, retries)
    except (click.BadParameter, LedgerError) as exc:
        _bad("check", fmt, exc)
    if notify_url is not None:
        report_deliveries(deliveries, notify_url)
    if fmt == "json":
        click.echo(json.dumps(report.as_dict(), indent=1))
    else:
        out = stdout_console()
        for r in report.exceeded:
            # a reason names its agent or model: ledger text, never markup or raw controls
            out.print(
                Text.assemble(
                    ("EXCEEDED", "bold red"), one_line(f" {r.budget} ({r.metric}): {r.reason}")
                )
            )
        out.print(_check_table(report))
        unknown = max((r.unknown_cost_rows for r in report.results), default=0)
        if unknown:
            # as each reason says: not counted in "actual", which is a floor, not the spend
            out.print(
                f"[yellow]{counted(unknown, 'row')} of unknown cost in scope, not counted in "
                "actual: the spend is at least actual (unknown, not free).[/]"
            )
    # sys.exit, not ctx.exit: the ``ledger`` entry point runs click with
    # standalone_mode=False, where ctx.exit's code is returned and lost.
    sys.exit(EXIT_OK if report.ok else EXIT_EXCEEDED)


def _alerts_for_check(
    analytics: Analytics, config: BudgetConfig, at: dt.datetime, url: str | None, retries: int
) -> list[Delivery]:
    """Alerts beside ``check``: trouble keeping their state is reported, never the exit code."""
    if url is None:
        return []
    try:
        return send_alerts(analytics, config, at, url, retries)
    except DatabaseError as exc:
        click.echo(f"ledger budget check: alerts not sent: {exc}", err=True)
        return []


def _status_table(lines: list[BudgetStatus], day: dt.date) -> Table:
    table = house_table(f"Budgets today ({day} UTC), closest to the limit first")
    for name in ("budget", "subject", "limit", "spent", "projected", "used"):
        left = name in ("budget", "subject")
        table.add_column(name, justify="left" if left else "right", no_wrap=name != "subject")
    for s in lines:
        used = "∞" if s.used == float("inf") else f"{100 * s.used:.0f}%"
        style = "bold red" if s.used > 1 else "yellow" if s.used > 0.8 else ""
        table.add_row(
            f"{s.budget} {s.metric}",
            Text(one_line(s.subject or "–")),  # an agent or a model: ledger text
            usd(s.limit_usd),
            measured_usd(s.spent_usd, s.unknown_cost_rows),
            "–" if s.projected_usd is None else usd(s.projected_usd),
            f"[{style}]{used}[/]" if style else used,
        )
    return table


@budget.command()
@click.option(
    "--at",
    "at_text",
    default=None,
    help="The moment to report as of (ISO date/time, UTC if no zone); default now.",
)
@_FORMAT_OPTION
@_CONFIG_OPTION
def status(at_text: str | None, fmt: str, config_path: Path | None) -> None:
    """Today's spend against each budget, the projected end-of-day spend, the closest first."""
    now = dt.datetime.now(dt.UTC)
    try:
        at = (parse_when(at_text, now) if at_text else None) or now
        config = _config(config_path)
        with open_analytics(Console(stderr=True)) as analytics:
            lines = budget_status(analytics, config, at=at)
    except (click.BadParameter, LedgerError) as exc:
        _bad("status", fmt, exc)
    if fmt == "json":
        body = {"at": at.isoformat(), "budgets": [s.as_dict() for s in lines]}
        click.echo(json.dumps(body, indent=1))
    elif not lines:
        click.echo(f"No spend today ({at.date()} UTC) under any budget.")
    else:
        stdout_console().print(_status_table(lines, at.astimezone(dt.UTC).date()))


@budget.command()
@click.option(
    "--every",
    default="5m",
    show_default=True,
    help="Time between checks: 30s, 5m, 1h.",
)
@click.option(
    "--notify",
    "notify_url",
    metavar="URL",
    required=True,
    help="The Slack-compatible webhook to post each crossing to (once per budget, "
    "threshold and day).",
)
@click.option(
    "--max-runs",
    type=click.IntRange(min=1),
    default=None,
    help="Stop after this many checks (default: run until interrupted).",
)
@_RETRIES_OPTION
@_CONFIG_OPTION
def watch(
    every: str, notify_url: str, max_runs: int | None, retries: int, config_path: Path | None
) -> None:
    """Check today's spend on a timer and post an alert when a budget crosses its warn_at
    or its limit: `ledger budget check --notify` for deployments without cron."""
    match = _DURATION.match(every.strip().lower())
    if match is None or float(match.group(1)) <= 0:
        raise click.BadParameter(f"{every!r}: expected a duration such as 30s, 5m or 1h")
    interval = dt.timedelta(**{_UNITS[match.group(2)]: float(match.group(1))}).total_seconds()
    runs = 0
    while True:
        try:
            config = _config(config_path)
            with open_analytics(Console(stderr=True)) as analytics:
                now = dt.datetime.now(dt.UTC)
                deliveries = send_alerts(analytics, config, now, notify_url, retries)
            report_deliveries(deliveries, notify_url)
        except ConfigurationError as exc:
            click.echo(f"ledger budget watch: {exc}", err=True)
            sys.exit(EXIT_BAD)
        except LedgerError as exc:  # a database outage must not end the watch
            click.echo(f"ledger budget watch: {exc}; trying again in {every}", err=True)
        runs += 1
        if max_runs is not None and runs >= max_runs:
            return
        time.sleep(interval)
