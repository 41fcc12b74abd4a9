"""``ledger sync``: bring the analytics copy up to date, rebuild it, or check it."""

from __future__ import annotations

import json
from typing import Any

import click
from rich.console import Console

from ledger.analytics import Analytics, SyncResult, Verification
from ledger.cli.report import progress_bar


def _text(value: Any) -> str:
    """A ledger value for the terminal: JSON-quoted strings, so no control character
    or markup from the ledger reaches it."""
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, tuple):
        return " / ".join(_text(v) for v in value) if value else "all rows"
    return "–" if value is None else str(value)


def describe(result: SyncResult) -> str:
    what = "rebuilt" if result.rebuilt else "synced"
    line = (
        f"{what}: {result.rows_added:,} added, {result.rows_updated:,} updated, "
        f"{result.rows_deleted:,} deleted; {result.rows_total:,} rows in the copy "
        f"({result.seconds:.2f} s)"
    )
    if result.gaps_open:
        line += f"; {result.gaps_open:,} change-log gaps awaiting transactions still open"
    if result.gaps_expired:
        line += f"; {result.gaps_expired:,} gaps given up on (see --verify)"
    return line


def report_verification(out: Console, check: Verification) -> None:
    out.print(
        f"checked {check.rows_ledger:,} ledger rows against {check.rows_copy:,} copied, "
        f"{check.model_days:,} model-days, {check.sessions:,} sessions",
        markup=False,
        highlight=False,
    )
    if check.ok:
        out.print("the copy matches the ledger", markup=False, highlight=False)
        return
    out.print(f"{len(check.differences):,} differences:", markup=False, highlight=False)
    for d in check.differences:
        out.print(
            f"  {d.check} [{_text(d.key)}]: ledger {_text(d.ledger)}, copy {_text(d.copy)}",
            markup=False,
            highlight=False,
        )
    out.print("`ledger sync --full` rebuilds the copy", markup=False, highlight=False)


@click.command()
@click.option("--full", is_flag=True, help="Copy the whole ledger again.")
@click.option(
    "--verify",
    "check",
    is_flag=True,
    help="Then compare the copy with the ledger; exit 1 if any figure differs.",
)
def sync(full: bool, check: bool) -> None:
    """Bring the analytics copy (a DuckDB file) up to date with the ledger.

    Reads what changed since the last sync (inserts, updates, deletes). With
    --verify, compares row counts, sums per model and day and rows per session
    with the ledger and lists every difference.
    """
    out = Console(highlight=False, soft_wrap=True)  # long keys stay on one line
    analytics = Analytics(sync=False)
    with analytics:
        with progress_bar("syncing the ledger", Console(stderr=True)) as update:
            result = analytics.refresh(full=full, progress=update)
        out.print(describe(result), markup=False)
        if check:
            verification = analytics.verify()
            report_verification(out, verification)
            if not verification.ok:
                raise SystemExit(1)
