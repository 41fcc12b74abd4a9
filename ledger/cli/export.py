"""``ledger export DIR``: the ledger as Parquet, one folder per UTC day."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console

from ledger.cli.report import open_analytics, progress_bar


@click.command()
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
def export(directory: Path) -> None:
    """Write every ledger row to DIRECTORY/day=YYYY-MM-DD/data.parquet.

    Readable as one partitioned table by DuckDB, Spark, Trino or ClickHouse;
    re-running replaces each day's file.
    """
    err = Console(stderr=True)
    with open_analytics(err) as analytics, progress_bar("exporting", err) as update:
        result = analytics.export(directory, progress=update)
    click.echo(f"{result.rows} rows in {result.days} day partitions under {result.directory}")
