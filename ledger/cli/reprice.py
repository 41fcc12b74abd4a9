"""``ledger reprice``: recompute the computed costs of past rows after a price change."""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path
from typing import Final

import click
from rich.table import Table
from rich.text import Text
from sqlalchemy.exc import SQLAlchemyError

from ledger.cli.budget import parse_when
from ledger.cli.tables import counted, house_table, safe, stdout_console
from ledger.errors import LedgerError
from ledger.price_overrides import load_prices
from ledger.reprice import RepriceReport
from ledger.reprice import reprice as reprice_rows
from ledger.store.engine import display_url, make_engine
from ledger.store.migrate import check_ledger

EXIT_OK: Final = 0
EXIT_BAD: Final = 2


def _fail(message: str) -> None:
    click.echo(f"ledger reprice: {message}", err=True)
    sys.exit(EXIT_BAD)


def _usd(value: object) -> str:
    return "–" if value is None else f"${value}"


def _table(report: RepriceReport) -> Table:
    table = house_table("Rows whose computed cost changed")
    for name in ("id", "started_at (UTC)", "provider", "model", "old", "new"):
        right = name in ("id", "old", "new")
        table.add_column(name, justify="right" if right else "left", no_wrap=right)
    for c in report.changes:
        table.add_row(
            str(c.id),
            c.started_at.strftime("%Y-%m-%d %H:%M:%S"),
            Text(safe(c.provider)),  # ledger text: no markup, no raw control characters
            Text(safe(c.model)),
            f"{_usd(c.old_usd)} {c.old_source or 'unknown'}",
            f"{_usd(c.new_usd)} {c.new_source or 'unknown'}",
        )
    return table


@click.command("reprice")
@click.option(
    "--since",
    required=True,
    help="Rows started from: 30m, 24h, 7d back from now, an ISO date/time, or 'all'.",
)
@click.option("--until", default=None, help="Rows started before (same forms); default now.")
@click.option(
    "--prices",
    "prices_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Price-override file (default: LEDGER_PRICES_FILE, else the nearest ledger.toml "
    "or pyproject.toml with price overrides).",
)
@click.option("--dry-run", is_flag=True, help="Report what would change; write nothing.")
@click.option(
    "--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True
)
def reprice(
    since: str, until: str | None, prices_path: Path | None, dry_run: bool, fmt: str
) -> None:
    """Recompute computed costs of past rows (overrides, then genai-prices) and report
    exactly the rows changed. Provider-reported and billed costs are never touched.
    Exit 0, or 2 on a bad price file or database."""
    now = dt.datetime.now(dt.UTC)
    start = parse_when(since, now)
    end = now if until is None else parse_when(until, now)
    try:
        prices = load_prices(prices_path)
        url = check_ledger()  # the one check: missing, unreachable or old, with its fix
    except LedgerError as exc:
        _fail(str(exc))
    engine = make_engine(url)
    try:
        report = reprice_rows(engine, prices, since=start, until=end, write=not dry_run)
    except SQLAlchemyError as exc:
        _fail(f"{display_url(url)}: {type(exc).__name__}: {str(exc).splitlines()[0]}")
    finally:
        engine.dispose()
    if fmt == "json":
        body = {
            "examined": report.examined,
            "changed": len(report.changes),
            "written": report.written,
            "delta_usd": str(report.delta_usd),
            "rows": [c.as_dict() for c in report.changes],
        }
        click.echo(json.dumps(body, indent=1))
    else:
        out = stdout_console()
        if report.changes:
            out.print(_table(report))
        verb = "changed" if report.written else "would change (dry run, nothing written)"
        out.print(
            f"{len(report.changes):,} of {counted(report.examined, 'computed-cost row')} {verb}; "
            f"total {'+' if report.delta_usd >= 0 else ''}{report.delta_usd} USD",
            markup=False,
        )
    sys.exit(EXIT_OK)
