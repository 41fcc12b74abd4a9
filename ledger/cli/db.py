"""``ledger db …``: create and migrate the ledger database."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Final

import click
from sqlalchemy import Engine

from ledger.cli.db_scale import (
    maintain_command,
    not_partitioned_advice,
    partition_command,
    retention_command,
)
from ledger.errors import LedgerMissing, SchemaOutOfDate
from ledger.store import held, partitions
from ledger.store.engine import database_url, display_url, make_engine
from ledger.store.ledger import journal_dir_for
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
        awaiting_partition = engine.dialect.name == "postgresql" and not _partitioned(engine)
    finally:
        engine.dispose()
    where = display_url(engine.url)
    if before == after:
        click.echo(f"{where}: already at revision {after}")
    else:
        click.echo(f"{where}: migrated {before or 'empty'} -> {after}")
    if awaiting_partition and after == head_revision():
        click.echo(not_partitioned_advice(where))


def _partitioned(engine: Engine) -> bool:
    with engine.connect() as conn:
        return partitions.is_partitioned(conn.connection.driver_connection)


db.add_command(partition_command)
db.add_command(maintain_command)
db.add_command(retention_command)


@db.command("status")
@click.option(
    "--journal-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Journal directory (default: the one the ledger database uses).",
)
def status_command(journal_dir: Path | None) -> None:
    """Print the database's schema revision next to the code's, and what the journal holds.

    Exits 0 when it is up to date, 1 when it is out of date or missing
    (`ledger db upgrade` fixes both), 2 when the database cannot be reached.
    Creates nothing. The journal line counts events that running processes
    hold only in memory (their journal's disk refused them): a kill loses those.
    """
    # Read first: it matters most when the database is the part that fails.
    journal_lines = held_lines(journal_dir or journal_dir_for(database_url()))
    try:
        code = _schema_status()
    finally:
        for line in journal_lines:
            click.echo(line)
    sys.exit(code)


def _schema_status() -> int:
    head = head_revision()
    try:
        url = check_ledger()
    except LedgerMissing as exc:
        click.echo(f"{exc.path}: no ledger database (code: {head}); run `{UPGRADE_COMMAND}`")
        return EXIT_OUT_OF_DATE
    except SchemaOutOfDate as exc:
        click.echo(
            f"{exc.where}: revision {exc.current or 'none'} (code: {head}), "
            f"out of date: run `{UPGRADE_COMMAND}`"
        )
        return EXIT_OUT_OF_DATE
    click.echo(f"{display_url(url)}: revision {head} (code: {head}), up to date")
    return EXIT_CURRENT


def held_lines(directory: Path) -> list[str]:
    """What ``ledger db status`` says about events held only in memory (see ledger.store.held)."""
    found = list(held.read_all(directory))
    lines = [
        f"journal {directory}: {h.held_in_memory} event(s) held only in memory by running "
        f"process {h.pid}{_since(h)} (its journal cannot be written: they reach the "
        "database once it takes them; killing the process loses them)"
        for h in found
        if h.alive and h.held_in_memory
    ]
    lines += [
        f"journal {directory}: process {h.pid} ended holding {h.held_in_memory} event(s) "
        "only in memory: they were lost"
        for h in found
        if not h.alive and h.held_in_memory
    ]
    return lines or [f"journal {directory}: no event held only in memory"]


def _since(found: held.Held) -> str:
    return "" if found.since is None else f" since {found.since:%Y-%m-%d %H:%M:%S} UTC"
