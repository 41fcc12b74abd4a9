"""``ledger db …``: create and migrate the ledger database."""

from __future__ import annotations

import sys
from typing import Final

import click

from ledger.errors import LedgerMissing, SchemaOutOfDate
from ledger.store.engine import display_url, make_engine
from ledger.store.migrate import (
    UPGRADE_COMMAND,
    check_ledger,
    current_revision,
    head_revision,
    upgrade,
)

#: ``ledger db status``: the schema is at the code's revision / it is not (or there is none).
EXIT_CURRENT: Final = 0
EXIT_OUT_OF_DATE: Final = 1


@click.group()
def db() -> None:
    """Create, migrate and inspect the ledger database."""


@db.command("upgrade")
@click.option("--revision", default="head", show_default=True, help="Alembic target revision.")
def upgrade_command(revision: str) -> None:
    """Create the ledger database or migrate it to the latest schema."""
    engine = make_engine()
    try:
        before = current_revision(engine)
        upgrade(engine, revision)
        after = current_revision(engine)
    finally:
        engine.dispose()
    where = display_url(engine.url)
    if before == after:
        click.echo(f"{where}: already at revision {after}")
    else:
        click.echo(f"{where}: migrated {before or 'empty'} -> {after}")


@db.command("status")
def status_command() -> None:
    """Print the database's schema revision next to the code's.

    Exits 0 when it is up to date, 1 when it is out of date or missing
    (`ledger db upgrade` fixes both), 2 when the database cannot be reached.
    Creates nothing.
    """
    head = head_revision()
    try:
        url = check_ledger()
    except LedgerMissing as exc:
        click.echo(f"{exc.path}: no ledger database (code: {head}); run `{UPGRADE_COMMAND}`")
        sys.exit(EXIT_OUT_OF_DATE)
    except SchemaOutOfDate as exc:
        click.echo(
            f"{exc.where}: revision {exc.current or 'none'} (code: {head}), "
            f"out of date: run `{UPGRADE_COMMAND}`"
        )
        sys.exit(EXIT_OUT_OF_DATE)
    click.echo(f"{display_url(url)}: revision {head} (code: {head}), up to date")
    sys.exit(EXIT_CURRENT)
