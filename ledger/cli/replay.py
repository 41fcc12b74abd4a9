"""``ledger replay``: write journaled events that never reached the database."""

from __future__ import annotations

from pathlib import Path

import click

from ledger.store.engine import database_url, display_url
from ledger.store.ledger import journal_dir_for
from ledger.store.ledger import replay as replay_journal


@click.command()
@click.option(
    "--journal-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Journal directory (default: the one the ledger database uses).",
)
def replay(journal_dir: Path | None) -> None:
    """Write events that crashed or killed processes left in the journal.

    Running ledgers are not disturbed: their journal segments are locked and
    skipped. Replaying twice never duplicates a row.
    """
    url = database_url()
    directory = journal_dir or journal_dir_for(url)
    result = replay_journal(url, journal_dir=directory)
    refused = f", {result.dead_lettered} refused (see dead-letter-*.jsonl)"
    click.echo(
        f"replayed {result.events} event(s) from {directory} into {display_url(url)}: "
        f"{result.inserted} inserted, {result.already_present} already present"
        f"{refused if result.dead_lettered else ''}"
    )
