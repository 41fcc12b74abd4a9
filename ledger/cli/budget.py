"""``ledger budget check`` (the CI cost gate) and ``ledger budget status`` (today's burn).

``check`` exits 0 when every budget holds, 1 when one is exceeded, 2 when the
budgets file or an option is bad or the ledger cannot be read (missing,
unmigrated, unreachable): a broken ledger must never read as overspend. With
``--format json`` every outcome, errors included, is one JSON document on stdout.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import sys
from pathlib import Path
from typing import Final, NoReturn

import click
from rich.console import Console
from rich.table import Table

from ledger.analytics.spend import known_agents
from ledger.budgets.config import BudgetConfig, load_config
from ledger.budgets.evaluation import CheckReport, evaluate, usd
from ledger.budgets.status import BudgetStatus, budget_status
from ledger.cli.report import open_analytics
from ledger.errors import LedgerError

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
    table = Table(title="Budgets", title_justify="left", header_style="bold")
    for name, justify in (
        ("budget", "left"),
        ("limit", "right"),
        ("actual", "right"),
        ("headroom", "right"),
        ("", "left"),
        ("reason", "left"),
    ):
        table.add_column(name, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for r in report.results:
        status = "[bold red]EXCEEDED[/]" if r.exceeded else "[green]ok[/]"
        headroom = r.headroom_usd
        table.add_row(
            f"{r.budget} {r.metric}",
            usd(r.limit_usd),
            usd(r.actual_usd),
            "–" if headroom is None else usd(headroom),
            status,
            r.reason,
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
def check(
    since: str,
    until: str | None,
    tags: tuple[str, ...],
    fmt: str,
    config_path: Path | None,
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
    except (click.BadParameter, LedgerError) as exc:
        _bad("check", fmt, exc)
    if fmt == "json":
        click.echo(json.dumps(report.as_dict(), indent=1))
    else:
        out = Console()
        for r in report.exceeded:
            out.print(f"[bold red]EXCEEDED[/] {r.budget} ({r.metric}): {r.reason}")
        out.print(_check_table(report))
        unknown = max((r.unknown_cost_rows for r in report.results), default=0)
        if unknown:
            out.print(f"[yellow]{unknown} row(s) of unknown cost in scope: counted, not free.[/]")
    # sys.exit, not ctx.exit: the ``ledger`` entry point runs click with
    # standalone_mode=False, where ctx.exit's code is returned and lost.
    sys.exit(EXIT_OK if report.ok else EXIT_EXCEEDED)


def _status_table(lines: list[BudgetStatus], day: dt.date) -> Table:
    table = Table(
        title=f"Budgets today ({day} UTC), closest to the limit first",
        title_justify="left",
        header_style="bold",
    )
    for name in ("budget", "subject", "limit", "spent", "projected", "used"):
        table.add_column(name, justify="left" if name in ("budget", "subject") else "right")
    for s in lines:
        used = "∞" if s.used == float("inf") else f"{100 * s.used:.0f}%"
        style = "bold red" if s.used > 1 else "yellow" if s.used > 0.8 else ""
        table.add_row(
            f"{s.budget} {s.metric}",
            s.subject or "–",
            usd(s.limit_usd),
            usd(s.spent_usd),
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
        Console().print(_status_table(lines, at.astimezone(dt.UTC).date()))
