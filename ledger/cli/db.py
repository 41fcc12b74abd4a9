"""``ledger db …``: create and migrate the ledger database."""

from __future__ import annotations

import click

from ledger.store.engine import display_url, make_engine
from ledger.store.migrate import current_revision, head_revision, upgrade


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
    """Print the database's schema revision next to the code's."""
    engine = make_engine()
    try:
        current = current_revision(engine)
    finally:
        engine.dispose()
    head = head_revision()
    state = "up to date" if current == head else "out of date: run `ledger db upgrade`"
    click.echo(f"{display_url(engine.url)}: revision {current or 'none'} (code: {head}), {state}")
