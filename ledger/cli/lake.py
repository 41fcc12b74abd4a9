"""``ledger lake derive TARGET``: the analytics state of a lake, so its views read aggregates."""

from __future__ import annotations

import time

import click

from ledger.lake.derive import derive as derive_state


@click.group()
def lake() -> None:
    """Work on a Parquet lake written by `ledger export`."""


@lake.command()
@click.argument("target")
def derive(target: str) -> None:
    """Fold TARGET's exported rows into state tables under TARGET/_state/.

    TARGET is the directory or object-store URI `ledger export` wrote. The
    state tables are the aggregates the local analytics file keeps; with them
    current, `ledger.lake.duck.connect(TARGET)` and `ledger.lake.spark` answer
    the heavy views from them instead of every row. Run it after each export:
    only rows the state does not reflect yet are folded in (unless they are a
    quarter of the lake or more: then the whole lake, which costs less), and
    with nothing new nothing is written. An interrupted run leaves the previous state in
    place. A lake with no exported rows is an error (exit 2).
    """
    started = time.perf_counter()
    result = derive_state(target, progress=lambda step: click.echo(step, err=True))
    if not result.new_rows:
        click.echo(f"nothing new: the state reflects all {result.total_rows:,} rows: {target}")
        return
    new = f"{result.new_rows:,} new row{'' if result.new_rows == 1 else 's'}"
    if not result.rebuilt:
        how = f"{new} folded in"
    elif result.new_rows == result.total_rows:
        how = f"{new}, the whole lake folded"
    else:  # a quarter of the lake or more costs less folded from scratch: say so
        how = f"{new}, the whole lake folded again"
    click.echo(
        f"{how}; the state reflects {result.total_rows:,} rows "
        f"({time.perf_counter() - started:.1f} s): {target}"
    )
