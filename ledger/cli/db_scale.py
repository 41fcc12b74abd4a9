"""``ledger db partition | maintain | retention``: a PostgreSQL ledger past one table."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import click

from ledger.store import partitions, repartition, retention
from ledger.store.engine import display_url, make_engine
from ledger.store.migrate import check_ledger

PARTITION_COMMAND = "ledger db partition"


def not_partitioned_advice(url_text: str) -> str:
    return (
        f"{url_text}: token_usage is not partitioned (it held rows when migrated); "
        f"convert it online with `{PARTITION_COMMAND}`"
    )


@click.command("partition")
@click.option(
    "--batch",
    type=click.IntRange(min=1),
    default=repartition.COPY_BATCH,
    show_default=True,
    help="Rows copied per transaction.",
)
def partition_command(batch: int) -> None:
    """Convert a PostgreSQL ledger's token_usage to monthly partitions, online.

    Writers keep writing throughout: rows are copied in batches while triggers
    mirror every new write, then the tables swap names in one short
    transaction. The old table is kept as token_usage_unpartitioned; drop it
    once you have checked the new one. Safe to run again after an interruption.
    """
    url = check_ledger()
    engine = make_engine(url)
    where = display_url(url)
    if engine.dialect.name != "postgresql":
        engine.dispose()
        raise click.UsageError(f"{where}: partitioning is for PostgreSQL; SQLite keeps one table")

    def progress(done: int, high: int) -> None:
        click.echo(f"copied ids up to {done:,} of {high:,}", err=True)

    try:
        result = repartition.partition(
            engine, dt.datetime.now(dt.UTC), batch=batch, progress=progress
        )
    finally:
        engine.dispose()
    if result.already:
        click.echo(f"{where}: token_usage is already partitioned")
        return
    click.echo(
        f"{where}: token_usage partitioned by month ({result.copied:,} row(s) copied, "
        f"{result.months} month partition(s) created); the old table is "
        f"{repartition.OLD}: drop it when satisfied"
    )


@click.command("maintain")
@click.option(
    "--ahead",
    type=click.IntRange(min=0, max=120),
    default=partitions.MONTHS_AHEAD,
    show_default=True,
    help="Months to create beyond the current one.",
)
def maintain_command(ahead: int) -> None:
    """Create the coming months' partitions and move rows out of the default partition.

    The writer does this too as it writes; run it from cron so that partitions
    exist before the first row of a month arrives. No-op on SQLite.
    """
    url = check_ledger()
    engine = make_engine(url)
    where = display_url(url)
    try:
        if engine.dialect.name != "postgresql":
            click.echo(f"{where}: SQLite ledger, nothing to maintain")
            return
        raw = engine.raw_connection()
        try:
            pg: Any = raw.driver_connection
            pg.rollback()
            if not partitions.is_partitioned(pg):
                click.echo(not_partitioned_advice(where))
                return
            created = partitions.maintain(pg, dt.datetime.now(dt.UTC), ahead)
        finally:
            raw.close()
    finally:
        engine.dispose()
    for c in created:
        click.echo(
            f"created {partitions.partition_name(c.month)}"
            + (
                f" ({c.moved_from_default:,} row(s) moved from the default)"
                if c.moved_from_default
                else ""
            )
        )
    click.echo(f"{where}: {len(created)} partition(s) created")


@click.command("retention")
@click.option("--keep", required=True, help="How much history to keep, in days: e.g. 400d.")
@click.option("--dry-run", is_flag=True, help="Show what would be removed; change nothing.")
def retention_command(keep: str, dry_run: bool) -> None:
    """Remove rows older than --keep (PostgreSQL: whole month partitions).

    On a partitioned PostgreSQL ledger only months that end before the cutoff
    are dropped, so at least --keep stays (up to a month more). Elsewhere the
    rows started before the cutoff are deleted in batches.
    """
    try:
        period = retention.parse_keep(keep)
    except retention.BadRetention as exc:
        raise click.BadParameter(str(exc), param_hint="--keep") from None
    url = check_ledger()
    engine = make_engine(url)
    now = dt.datetime.now(dt.UTC)
    try:
        if dry_run:
            result = retention.plan(engine, period, now)
        else:
            result = retention.apply(engine, period, now)
    finally:
        engine.dispose()
    verb = "would remove" if dry_run else "removed"
    click.echo(
        f"{display_url(url)}: {verb} {result.rows:,} row(s) started before "
        f"{result.cutoff:%Y-%m-%d %H:%M:%S} UTC, spend {_usd(result.spend)} ({result.method})"
    )
    for name in result.partitions:
        click.echo(f"  {'would drop' if dry_run else 'dropped'} partition {name}")


def _usd(value: Decimal) -> str:
    return f"${value:,.6f}"
