"""``ledger report``: the verdicts at a glance, then stickiness, cache hits and cost tables.

The report opens with one header line (ledger, time span, rows, spend) and one
line per model's provider.order verdict; the tables follow, grouped by agent
and model when the terminal is too narrow for them (:mod:`ledger.cli.tables`).

Also home of the pieces ``ledger sql`` and ``ledger export`` share: opening the
analytics with a progress bar that appears only when a sync takes a while, and
the stdout console (:func:`terminal`).
"""

from __future__ import annotations

import datetime as dt
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Final

import click
import pandas as pd  # type: ignore[import-untyped]
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from ledger.analytics import Analytics
from ledger.analytics.read import verdict_words as words
from ledger.analytics.read.verdict import Verdict, from_row
from ledger.cli.cache_report import cache_section
from ledger.cli.tables import VERDICT_STYLE, VERDICT_WORDS, cell, print_frame, safe
from ledger.store.engine import database_url, display_url

#: A sync or export shorter than this shows no progress bar.
PROGRESS_DELAY_S: Final = 0.5


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


#: Short headers for the report's columns; ``ledger sql`` shows the views' own names.
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
    "cost_usd": "cost",
    "pinned_upstream": "pinned",
    "best_upstream": "best",
}
STICKINESS_COLUMNS: Final = (
    "actor_id", "requested_model", "key_sent", "sessions", "calls", "switches",
    "idle_releases", "stickiness", "pinned_session_share", "avg_distinct_upstreams",
)  # fmt: skip
CACHE_COLUMNS: Final = (
    "actor_id", "requested_model", "key_sent", "calls", "input_tokens", "cache_read_tokens",
    "token_hit_rate", "call_hit_rate", "response_cache_hits",
)  # fmt: skip
AGENT_MODEL: Final = ("actor_id", "requested_model")


def terminal() -> Console:
    """stdout's console: the terminal's width, ``COLUMNS`` when set; piped into a pager
    from a terminal (``ledger report | less``), that terminal's width, read from stderr;
    else 160 (captured output has no width to honour)."""
    if sys.stdout.isatty() or os.environ.get("COLUMNS", "").isdigit():
        return Console()
    try:
        return Console(width=os.get_terminal_size(sys.stderr.fileno()).columns)
    except (OSError, ValueError):  # no terminal at all: cron, CI, a captured run
        return Console(width=160)


def report_body(out: Console, analytics: Analytics, where: str) -> None:
    """The whole report: one header line, one line per verdict, then the tables."""
    verdicts = verdict_order(analytics.provider_order_verdict())
    header(out, analytics, where)
    verdict_lines(out, verdicts)
    out.print()
    stickiness = analytics.agent_stickiness().sort_values(
        ["actor_id", "requested_model", "key_sent"], ascending=[True, True, False]
    )
    print_frame(out, "Sticky routing per agent (with and without the session key)",
                stickiness, STICKINESS_COLUMNS, headers=HEADERS, group_by=AGENT_MODEL)  # fmt: skip
    cache = analytics.cache_hits_by_agent().sort_values(
        ["actor_id", "requested_model", "key_sent"], ascending=[True, True, False]
    )
    print_frame(out, "Prompt-cache hits per agent", cache, CACHE_COLUMNS, headers=HEADERS,
                group_by=AGENT_MODEL)  # fmt: skip
    costs = analytics.cost_attribution().sort_values(
        ["cost_usd", "requested_provider", "responding_provider", "requested_model"],
        ascending=[False, True, True, True],
    )
    names = ["requested_provider", "responding_provider", "requested_model"]
    print_frame(out, "Cost by responding provider", costs, [*names, "calls", "cost_usd"],
                headers=HEADERS, group_by=["requested_model"])  # fmt: skip
    print_frame(out, "Fallbacks", costs[costs["fallback_calls"] > 0],
                [*names, "calls", "fallback_calls"], headers=HEADERS,
                group_by=["requested_model"])  # fmt: skip
    print_frame(out, "provider.order verdicts", verdicts,
                ["requested_model", "verdict", "pinned_upstream", "best_upstream"],
                headers=HEADERS, group_by=["requested_model"])  # fmt: skip
    # A reason is a sentence of figures: as a paragraph it stays readable at 80 columns.
    for verdict in typed(verdicts):
        paste = verdict.recommendation
        paste = f"\nprovider: {safe(paste)}" if paste else ""
        out.print(
            Text.assemble(
                (safe(verdict.requested_model), "bold"), ": ", safe(words.reason(verdict)), paste
            )
        )
        out.print()
    switch_cost_line(out, analytics)
    cache_section(out, analytics)


def switch_cost_line(out: Console, analytics: Analytics) -> None:
    """What stickiness failures cost: cache reads lost after switches and idle releases."""
    switching = analytics.switch_cost_totals()
    cost = "unpriced" if switching.cost_usd is None else f"${switching.cost_usd:,.4f}"
    out.print(
        f"Stickiness failures: {switching.switches:,} switches and "
        f"{switching.idle_releases:,} idle releases lost "
        f"{switching.cache_read_tokens_lost:,} cache-read tokens ({cost}; "
        "see the switch_costs view)",
        highlight=False,
        markup=False,
    )


def typed(verdicts: pd.DataFrame) -> list[Verdict]:
    return [from_row(row) for row in verdicts.to_dict("records")]


def verdict_order(verdicts: pd.DataFrame) -> pd.DataFrame:
    """Warranted first, then not warranted, insufficient data, does not apply; by model."""
    rank = {name: i for i, name in enumerate(VERDICT_WORDS)}
    return (
        verdicts.assign(_rank=verdicts["verdict"].map(lambda v: rank.get(str(v), len(rank))))
        .sort_values(["_rank", "requested_model"])
        .drop(columns="_rank")
        .reset_index(drop=True)
    )


def header(out: Console, analytics: Analytics, where: str) -> None:
    options = analytics.ledger_options()
    spend = analytics.overview_totals()["spend_usd"]
    # no rows: nothing spent; rows none of which is priced: unknown
    spent = cell(spend, "cost_usd") if spend is not None else "unknown" if options.rows else "$0"
    span = "no rows yet"
    if options.first_at is not None and options.last_at is not None:
        first, last = (t.astimezone(dt.UTC) for t in (options.first_at, options.last_at))
        end = f"{last:%H:%M}" if last.date() == first.date() else f"{last:%Y-%m-%d %H:%M}"
        span = f"{first:%Y-%m-%d %H:%M} → {end} UTC"
    out.print(
        Text.assemble(
            ("ledger ", "bold"), safe(where), f" · {span} · {options.rows:,} rows · ",
            f"{spent} spend",
        )
    )  # fmt: skip


def verdict_lines(out: Console, verdicts: pd.DataFrame) -> None:
    """``model: verdict — headline`` per model (the headline when the view has one), and
    under a warranted one the ``provider`` setting to paste."""
    if verdicts.empty:
        out.print("provider.order verdicts: no model yet")
        return
    out.print(Text("provider.order verdicts:", style="bold"))
    # A grid, not indented text: a headline wrapped at 80 columns continues under
    # its own first word instead of at column 0, where it read as another verdict.
    lines = Table.grid()
    lines.add_column(width=4, no_wrap=True)
    lines.add_column()
    for verdict in typed(verdicts):
        kind = verdict.verdict
        line = Text()
        line.append(safe(verdict.requested_model), style="bold")
        line.append(": ")
        line.append(VERDICT_WORDS.get(kind, safe(kind)), style=VERDICT_STYLE.get(kind))
        line.append(f" — {safe(words.headline(verdict))}")
        lines.add_row("  • ", line)
        paste = verdict.recommendation
        if paste:  # what to paste, where the answer is read
            lines.add_row("", Text(f'paste: "provider": {safe(paste)}', style="bold"))
    out.print(lines)


@click.command()
@click.option("--rebuild", is_flag=True, help="Copy the whole ledger again before reporting.")
def report(rebuild: bool) -> None:
    """A header line, one line per provider.order verdict, then stickiness, cache-hit,
    cost and fallback tables (grouped by agent and model when the terminal is narrow)."""
    out = terminal()
    with open_analytics(Console(stderr=True), rebuild=rebuild) as analytics:
        report_body(out, analytics, display_url(database_url()))
