"""``ledger export TARGET``: append the ledger's new rows to a Parquet lake."""

from __future__ import annotations

import click
from rich.console import Console

from ledger.cli.report import open_analytics, progress_bar
from ledger.lake.export import export_lake


@click.command()
@click.argument("target")
def export(target: str) -> None:
    """Append the rows TARGET does not hold yet, as TARGET/date=YYYY-MM-DD/part-*.parquet.

    TARGET is a directory or an object-store URI (s3://bucket/prefix,
    gs://bucket/prefix). Only rows not exported before are written, and a
    manifest (TARGET/_ledger_manifest.json) records what the lake holds, so
    re-running writes nothing new and an interrupted run leaves no partial
    file. DuckDB, Spark, Trino and ClickHouse read it as one table partitioned
    by day; `ledger.lake.spark` runs the analytics views on it.
    """
    err = Console(stderr=True)
    with open_analytics(err) as analytics, progress_bar("exporting", err) as update:
        result = export_lake(analytics, target, progress=update)
    added = (
        f"{_count(result.new_rows, 'new row')} in {_count(result.new_files, 'file')}"
        if result.new_rows
        else "nothing new"
    )
    click.echo(f"{added}; the lake holds {_count(result.total_rows, 'row')}: {result.target}")
    if result.removed_uncommitted:
        click.echo(
            f"removed {result.removed_uncommitted} file(s) an interrupted export left uncommitted",
            err=True,
        )


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"
