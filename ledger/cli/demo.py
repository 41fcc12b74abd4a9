"""``ledger demo``: the main job on a fresh machine.

Until the simulator-driven workload lands, it migrates the default ledger and
prints what it holds.
"""

from __future__ import annotations

import click
from sqlalchemy import func, select

from ledger.schema import token_usage
from ledger.store.engine import display_url, make_engine
from ledger.store.migrate import upgrade


@click.command()
def demo() -> None:
    """Migrate the default ledger and show what it holds."""
    engine = make_engine()
    try:
        upgrade(engine)
        with engine.connect() as conn:
            rows, calls, first, last = conn.execute(
                select(
                    func.count(),
                    func.count(token_usage.c.call_id.distinct()),
                    func.min(token_usage.c.started_at),
                    func.max(token_usage.c.started_at),
                )
            ).one()
    finally:
        engine.dispose()
    click.echo(f"ledger at {display_url(engine.url)} (schema up to date)")
    click.echo(f"  {rows} attempt rows in {calls} calls" + (f", {first} .. {last}" if rows else ""))
