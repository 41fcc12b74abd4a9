"""``ledger report``: stickiness, cache hits, cost attribution and verdicts as terminal tables.

Also home of the pieces ``ledger sql`` and ``ledger export`` share: opening the
analytics with a progress bar that appears only when a sync takes a while.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from decimal import Decimal
from typing import Any, Final

import click
import pandas as pd  # type: ignore[import-untyped]
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ledger.analytics import Analytics

#: A sync or export shorter than this shows no progress bar.
PROGRESS_DELAY_S: Final = 0.5

VERDICT_STYLE: Final = {"warranted": "bold red", "not_warranted": "green"}


@contextmanager
def progress_bar(label: str, console: Console) -> Iterator[Callable[[int, int], None]]:
    """A ``progress(done, total)`` callback drawing a bar once PROGRESS_DELAY_S has passed.

    Only on a terminal: a bar is for a person watching. Drawn into a pipe, a
    file or a test's captured output, rich leaves blank lines and control codes
    among the command's data, and whether it does depends on how long the sync
    took. The bar never redirects stdout either, so data written while it is
    up goes straight to stdout.
    """
    started = time.monotonic()
    progress: Progress | None = None
    task: Any = None
    drawn = console.is_terminal and not console.is_dumb_terminal

    def update(done: int, total: int) -> None:
        nonlocal progress, task
        if not drawn:
            return
        if progress is None:
            if time.monotonic() - started < PROGRESS_DELAY_S:
                return
            progress = Progress(
                TextColumn(label),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=console,
                transient=True,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            progress.start()
            task = progress.add_task(label, total=total)
        progress.update(task, completed=done, total=total)

    try:
        yield update
    finally:
        if progress is not None:
            progress.stop()


def open_analytics(console: Console, *, rebuild: bool = False) -> Analytics:
    """The default ledger's analytics, synced, with a progress bar on stderr if slow."""
    with progress_bar("syncing the ledger", console) as update:
        analytics = Analytics(sync=False, allow_memory=True)
        try:
            analytics.refresh(full=rebuild, progress=update)
        except BaseException:
            analytics.close()
            raise
    return analytics


def _cell(value: Any, column: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NaT:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, Decimal):
        return f"${value:,.4f}"
    if isinstance(value, float):
        if column.endswith(("rate", "share", "stickiness")):
            return f"{100 * value:.1f}%"
        return f"{value:,.2f}"
    return str(value)


#: Short headers for the report's columns, so its tables fit an 80-column terminal;
#: ``ledger sql`` shows the views' own column names.
HEADERS: Final[dict[str, str]] = {
    "actor_id": "agent",
    "requested_model": "model",
    "requested_provider": "asked",
    "responding_provider": "answered",
    "key_sent": "key",
    "idle_releases": "idle rel.",
    "pinned_session_share": "pinned",
    "avg_distinct_upstreams": "upstr./sess.",
    "input_tokens": "input tok",
    "cache_read_tokens": "cached tok",
    "token_hit_rate": "tok hit",
    "call_hit_rate": "call hit",
    "response_cache_hits": "resp. cache",
    "fallback_calls": "fallbacks",
    "pinned_upstream": "pinned",
    "best_upstream": "best",
}


def frame_table(
    title: str,
    frame: pd.DataFrame,
    columns: Sequence[str] | None = None,
    headers: Mapping[str, str] | None = None,
) -> Table:
    """A rich table of ``frame`` (or of its ``columns``), numbers right-aligned;
    ``headers`` relabels columns."""
    shown = list(columns) if columns is not None else list(frame.columns)
    table = Table(title=title, title_justify="left", header_style="bold")
    for name in shown:
        numeric = pd.api.types.is_numeric_dtype(frame[name]) and frame[name].dtype != bool
        label = headers.get(name, name) if headers else name
        table.add_column(
            label, justify="right" if numeric else "left", overflow="fold", no_wrap=numeric
        )
    for row in frame[shown].itertuples(index=False):
        cells = [_cell(v, c) for v, c in zip(row, shown, strict=True)]
        if "verdict" in shown:
            verdict = cells[shown.index("verdict")]
            cells[shown.index("verdict")] = f"[{VERDICT_STYLE.get(verdict, 'yellow')}]{verdict}[/]"
        table.add_row(*cells)
    return table


def _print(console: Console, title: str, frame: pd.DataFrame, columns: Sequence[str]) -> None:
    if frame.empty:
        console.print(f"[bold]{title}[/]: no rows yet")
    else:
        console.print(frame_table(title, frame, columns, HEADERS))


@click.command()
@click.option("--rebuild", is_flag=True, help="Copy the whole ledger again before reporting.")
def report(rebuild: bool) -> None:
    """Per-agent stickiness, cache-hit rates, cost attribution and provider.order verdicts."""
    # Piped or captured output has no terminal width to honour: give the tables room.
    out = Console() if sys.stdout.isatty() else Console(width=160)
    with open_analytics(Console(stderr=True), rebuild=rebuild) as analytics:
        _print(
            out,
            "Sticky routing per agent (with and without the session key)",
            analytics.agent_stickiness().sort_values(["actor_id", "requested_model", "key_sent"]),
            [
                "actor_id",
                "requested_model",
                "key_sent",
                "sessions",
                "calls",
                "switches",
                "idle_releases",
                "stickiness",
                "pinned_session_share",
                "avg_distinct_upstreams",
            ],
        )
        _print(
            out,
            "Prompt-cache hits per agent",
            analytics.cache_hits_by_agent(),
            [
                "actor_id",
                "requested_model",
                "key_sent",
                "calls",
                "input_tokens",
                "cache_read_tokens",
                "token_hit_rate",
                "call_hit_rate",
                "response_cache_hits",
            ],
        )
        costs = analytics.cost_attribution().sort_values("cost_usd", ascending=False)
        _print(
            out,
            "Cost by responding provider",
            costs,
            ["requested_provider", "responding_provider", "requested_model", "calls", "cost_usd"],
        )
        _print(
            out,
            "Fallbacks",
            costs[costs["fallback_calls"] > 0],
            [
                "requested_provider",
                "responding_provider",
                "requested_model",
                "calls",
                "fallback_calls",
            ],
        )
        verdicts = analytics.provider_order_verdict()
        _print(
            out,
            "provider.order verdicts",
            verdicts,
            ["requested_model", "verdict", "pinned_upstream", "best_upstream"],
        )
        # A reason is a sentence of figures: as a paragraph it stays readable at 80 columns.
        for model, reason in zip(verdicts["requested_model"], verdicts["reason"], strict=True):
            out.print(f"[bold]{model}[/]: {reason}\n", highlight=False)
