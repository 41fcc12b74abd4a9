"""``ledger demo``: a simulated multi-agent workload into the default ledger, then the report.

Migrates the default ledger (LEDGER_DATABASE_URL, else ./ledger.db), runs
:mod:`ledger.demo` (the real client against the in-process simulator, on its
virtual clock), prints what it did and ``ledger report``'s tables, a short
summary read from the analytics, then opens the dashboard.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import os
import shlex
import shutil
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any, Final

import click
import pandas as pd  # type: ignore[import-untyped]
import sqlalchemy as sa
from rich.console import Console
from sqlalchemy.engine import URL

from ledger.analytics import Analytics, Filters
from ledger.analytics.read import verdict_words as words
from ledger.cli.policy import DEFAULT_HOLDOUT, print_effect
from ledger.cli.report import open_analytics, report
from ledger.cli.tables import print_frame, safe
from ledger.demo import DEFAULT_CALLS, DemoStats, next_start, run_demo
from ledger.demo.workload import WORSE_UPSTREAM
from ledger.policies import active_policies, all_policies, start_policy
from ledger.schema import token_usage
from ledger.store.engine import database_url, display_url, make_engine
from ledger.store.migrate import upgrade


def ledger_command(cwd: Path | None = None) -> str:
    """How to type ``ledger`` here: ``ledger`` when the shell finds this installation's
    command, else its path (``.venv/bin/ledger`` after ``python3 dev.py demo``)."""
    here = Path(sys.executable).parent / Path(sys.argv[0]).name
    mine = here if here.name.startswith("ledger") else Path(sys.executable).parent / "ledger"
    found = shutil.which("ledger")
    if found is not None and Path(found).resolve() == mine.resolve():
        return "ledger"
    try:
        return str(mine.relative_to(cwd or Path.cwd()))
    except ValueError:
        return str(mine)


def count_rows(url: URL) -> int:
    engine = make_engine(url)
    try:
        with engine.connect() as con:
            return int(
                con.execute(sa.select(sa.func.count()).select_from(token_usage)).scalar_one()
            )
    finally:
        engine.dispose()


def empty_ledger(url: URL) -> int:
    """Delete every row of ``token_usage`` (``--fresh``); the number deleted."""
    engine = make_engine(url)
    try:
        with engine.begin() as con:
            return int(con.execute(sa.delete(token_usage)).rowcount or 0)
    finally:
        engine.dispose()


def bills_path(url: URL) -> Path:
    """Where the demo keeps what its simulated OpenRouter billed (``ledger simulate
    --bills`` reads it): beside an SQLite ledger file, as its journal and analytics copy
    are; for a server database, in the working directory."""
    database = url.database or ""
    if url.get_backend_name() == "sqlite" and database and database != ":memory:":
        return Path(database + ".openrouter-bills.jsonl")
    return Path("ledger-demo.openrouter-bills.jsonl")


def _migrate(url: URL) -> None:
    engine = make_engine(url)
    try:
        upgrade(engine)
    finally:
        engine.dispose()


def _money(value: Decimal) -> str:
    return f"${value:,.2f}"


def print_stats(console: Console, stats: DemoStats) -> None:
    """What the run did, from its own tally."""
    span = (stats.last_at - stats.first_at) if stats.first_at and stats.last_at else None
    span = dt.timedelta(seconds=round(span.total_seconds())) if span is not None else None
    rate = stats.calls / stats.wall_s if stats.wall_s else 0.0
    console.print(
        f"[bold]{stats.calls:,} calls[/] ({stats.attempts:,} attempts) in {stats.wall_s:.1f} s "
        f"({rate:,.0f} calls/s), covering {span} of simulated time "
        f"({stats.first_at:%Y-%m-%d %H:%M} .. {stats.last_at:%H:%M} UTC)"
    )
    agents = ", ".join(f"{name} {n:,}" for name, n in sorted(stats.calls_by_agent.items()))
    console.print(f"  agents: {agents}")
    console.print(
        f"  {stats.sessions:,} sessions ({stats.keyed_sessions:,} on OpenRouter sending the "
        f"sticky key), {stats.streamed:,} streamed calls, {stats.idle_gaps:,} idle gaps and "
        f"{stats.approval_waits:,} approval waits"
    )
    console.print(
        f"  {stats.fallbacks:,} calls fell back to another provider, {stats.failed_calls:,} "
        f"failed on every route, {stats.failed_attempts:,} failed attempts in all; "
        f"{stats.response_cache_hits:,} help-widget questions answered from the response cache"
    )
    console.print(
        f"  spend {_money(stats.spend_usd)} ({stats.unknown_cost_attempts:,} attempts of "
        "unknown cost: the failed ones)\n"
    )


def _rate(value: Any) -> str:
    return "–" if value is None or pd.isna(value) else f"{100 * float(value):.1f}%"


def stickiness_lines(frame: pd.DataFrame) -> list[str]:
    """``agent (model): X with the key, Y without``, from the agent_stickiness view."""
    lines = []
    for (actor, model), group in frame.groupby(["actor_id", "requested_model"], dropna=False):
        by_key = {bool(row.key_sent): row.stickiness for row in group.itertuples()}
        if True in by_key:
            text = f"{_rate(by_key.get(True))} with the key, {_rate(by_key.get(False))} without"
        else:
            text = f"{_rate(by_key.get(False))} (no sticky key: a direct provider)"
        lines.append(f"  {safe(actor)} ({safe(model)}): {text}")
    return lines


def print_summary(console: Console, stats: DemoStats, analytics: Analytics, url: URL) -> None:
    """The closing summary: totals, per-agent stickiness (the analytics'), where things are."""
    totals = analytics.overview_totals()
    console.rule("[bold]ledger demo: summary")
    console.print(
        f"this run: {stats.calls:,} calls, {stats.attempts:,} attempts, "
        f"{stats.fallbacks:,} fallbacks, {_money(stats.spend_usd)} spend"
    )
    console.print(
        f"the ledger now: {totals['calls']:,} calls, {totals['attempts']:,} attempts, "
        f"{totals['fallback_calls']:,} fallbacks, {_money(totals['spend_usd'] or Decimal(0))} spend"
    )
    console.print("stickiness per agent (1 - switches / transitions within the pin window):")
    for line in stickiness_lines(analytics.agent_stickiness()):
        # names from the ledger are data: no markup, no highlighting
        console.print(line, markup=False, highlight=False)
    model, upstream = WORSE_UPSTREAM
    console.print(
        f"the simulated catalog makes {upstream} on {model} slower than its peers: "
        "see the provider.order verdicts above"
    )
    where = "in memory (the file was busy)" if analytics.in_memory else str(analytics.path)
    console.print(f"ledger: {display_url(url)}\nanalytics (DuckDB): {where}")


#: Seconds in the 30-day month the monthly figures are given in.
MONTH_S: Final = 30 * 86_400

SCORECARD: Final = ["upstream", "attempts", "error_rate", "p95_latency_ms", "token_hit_rate",
                    "sessions_pinned"]  # fmt: skip
SCORECARD_HEADERS: Final = {
    "p95_latency_ms": "p95 ms",
    "token_hit_rate": "tok hit",
    "error_rate": "errors",
    "sessions_pinned": "pinned sessions",
}


def print_before_after(
    console: Console, analytics: Analytics, routing: dict[str, dict[str, Any]], start: float
) -> None:
    """Per model whose recommendation was applied: the scorecard and verdict before and after."""
    cut = dt.datetime.fromtimestamp(start, dt.UTC)
    console.rule("[bold]before and after the recommendations")
    for model, provider in sorted(routing.items()):
        console.print(f"{safe(model)}: sent provider = {json.dumps(provider)}", markup=False)
        for label, chosen in (
            ("before", Filters(models=[model], end=cut)),
            ("after", Filters(models=[model], start=cut)),
        ):
            card = analytics.upstream_scorecard(chosen).sort_values("upstream")
            print_frame(console, f"{safe(model)}, {label}", card, SCORECARD,
                        headers=SCORECARD_HEADERS)  # fmt: skip
            for verdict in analytics.verdicts(chosen):
                line = f"  {label}: {safe(words.headline(verdict))}"
                console.print(line, highlight=False, markup=False)


def monthly_effects(analytics: Analytics) -> dict[str, Any]:
    """The verdict's projected monthly effect (USD) per model, where it gives one."""
    return {
        v.requested_model: v.monthly_effect_usd
        for v in analytics.verdicts()
        if v.monthly_effect_usd is not None
    }


def start_experiments(url: URL, routing: dict[str, dict[str, Any]]) -> dict[str, int]:
    """A policy per recommended model (its active one kept when it has one): id by model."""
    engine = make_engine(url)
    try:
        active = {p.requested_model: p.id for p in active_policies(engine)}
        for model, provider in sorted(routing.items()):
            if model not in active:
                active[model] = start_policy(
                    engine,
                    model=model,
                    provider=provider,
                    holdout_share=DEFAULT_HOLDOUT,
                    by="ledger demo",
                    reason="a warranted verdict, applied as an experiment",
                    now=dt.datetime.now(dt.UTC),
                )
    finally:
        engine.dispose()
    return {model: active[model] for model in routing}


def print_experiments(
    console: Console,
    analytics: Analytics,
    policies: dict[str, int],
    predicted: dict[str, Any],
    stats: DemoStats,
) -> None:
    """Per policy: treatment against holdout, and the verdict's prediction beside it."""
    console.rule("[bold]the recommendations as experiments: predicted and measured")
    span = (
        (stats.last_at - stats.first_at).total_seconds() if stats.first_at and stats.last_at else 0
    )
    engine = make_engine(analytics.url)
    try:
        rows = {r.id: r for r in all_policies(engine)}
    finally:
        engine.dispose()
    for model, policy_id in sorted(policies.items()):
        found = analytics.experiment(policy_id)
        print_effect(console, rows[policy_id], found)
        attempts = found.treatment.attempts + found.holdout.attempts
        delta = found.cost_per_attempt
        if (
            span > 0
            and delta.value is not None
            and delta.low is not None
            and delta.high is not None
        ):
            scale = attempts * MONTH_S / span
            console.print(
                f"  measured: {delta.value * scale:+.2f} USD a month at this run's traffic "
                f"(95 % interval {delta.low * scale:+.2f} to {delta.high * scale:+.2f})",
                markup=False,
            )
        if model in predicted:
            console.print(
                f"  predicted by the verdict before: {float(predicted[model]):+.2f} USD a month",
                markup=False,
            )


def has_dashboard() -> bool:
    return importlib.util.find_spec("ledger.cli.dashboard") is not None


def dashboard_port(port: int | None) -> int | None:
    """The dashboard's port, checked free before the run (a taken one: exit 2 at once,
    not after minutes of simulation); None when this installation has no dashboard."""
    if not has_dashboard():
        return None
    from ledger.cli.dashboard import free_dashboard_port

    return free_dashboard_port(port)


def open_dashboard(port: int | None = None) -> None:
    """``ledger dashboard``, if this installation has it; otherwise say how to start it."""
    if not has_dashboard():
        click.echo("The dashboard is not part of this installation.")
        return
    from ledger.cli.dashboard import run_dashboard

    status = run_dashboard(port=port, headless=not sys.stdout.isatty())
    if status != 0:
        raise SystemExit(status)


@click.command()
@click.option(
    "--calls", type=click.IntRange(min=1), default=DEFAULT_CALLS, show_default=True,
    help="Logical LLM calls to simulate.",
)  # fmt: skip
@click.option(
    "--seed",
    type=int,
    default=0,
    show_default=True,
    help="Same seed, same workload (a run on a ledger with rows starts after them).",
)
@click.option("--no-dashboard", is_flag=True, help="Print the report and exit.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=None,
    help="The dashboard's TCP port, 0 for a free one [Streamlit's setting, else 8501].",
)
@click.option(
    "--fresh",
    is_flag=True,
    help="Delete every row of the ledger first (a second demo run otherwise appends).",
)
@click.option(
    "--apply-recommendations",
    is_flag=True,
    help="Replay the workload sending each warranted verdict's provider object; show the change.",
)
@click.option(
    "--as-experiment",
    is_flag=True,
    help="Apply each warranted verdict's provider object as a policy with a holdout, replay "
    "the workload, and measure the change (ledger policy status).",
)
@click.pass_context
def demo(
    ctx: click.Context,
    calls: int,
    seed: int,
    no_dashboard: bool,
    port: int | None,
    fresh: bool,
    apply_recommendations: bool,
    as_experiment: bool,
) -> None:
    """Simulated multi-agent traffic through the real client into the ledger, then the report.

    Agents with their own prompts call OpenRouter (half their sessions with the
    sticky key) and OpenAI with an Anthropic fallback, against a local
    simulator on a virtual clock: hours of traffic in seconds. The ledger is
    LEDGER_DATABASE_URL, else ./ledger.db; it is migrated first. A ledger that
    already holds rows keeps them and the run appends (verdicts can move as
    samples grow); --fresh deletes every row first.
    """
    url = database_url()
    # CI: never block on a dashboard
    show_dashboard = not (no_dashboard or os.environ.get("CI", "").lower() == "true")
    port = dashboard_port(port) if show_dashboard else None
    _migrate(url)
    out = Console()
    err = Console(stderr=True)
    routing: dict[str, dict[str, Any]] = {}
    predicted: dict[str, Any] = {}
    if apply_recommendations and as_experiment:
        raise click.UsageError("--apply-recommendations and --as-experiment: choose one")
    if apply_recommendations or as_experiment:
        with open_analytics(err) as analytics:
            routing = analytics.recommendations()
            predicted = monthly_effects(analytics)
        if not routing:
            raise click.UsageError(  # exit 2, like every "the ledger cannot answer this"
                "no verdict in this ledger recommends a change: run `ledger demo` first"
            )
    policies = start_experiments(url, routing) if as_experiment else {}
    if as_experiment:
        routing = {}  # sent by the clients through the policies, with their holdouts
    before = count_rows(url)
    bills = bills_path(url)
    if fresh and before:
        err.print(f"--fresh: deleted {empty_ledger(url):,} rows from {display_url(url)}")
        before = 0
    if fresh:
        bills.unlink(missing_ok=True)  # bills for rows no longer in the ledger
    start = next_start(url)
    out.print(f"Simulating {calls:,} calls (seed {seed}) into {display_url(url)} ...")
    stats = run_demo(url, calls=calls, seed=seed, start=start, routing=routing, bills=bills)
    print_stats(out, stats)
    command = ledger_command()
    if before and not routing:  # --apply-recommendations appends on purpose: before vs after
        err.print(
            f"[yellow]The ledger already held {before:,} rows: this run was added to them, so "
            f"the figures below cover both. For a fresh start: {command} demo --fresh[/]",
            highlight=False,
        )
    ctx.invoke(report, rebuild=fresh)
    with open_analytics(Console(stderr=True)) as analytics:
        print_summary(out, stats, analytics, url)
        if routing:
            print_before_after(out, analytics, routing, start)
        if policies:
            print_experiments(out, analytics, policies, predicted, stats)
    next_steps(out, command, bills)
    if show_dashboard:
        open_dashboard(port)


def next_steps(out: Console, command: str, bills: Path) -> None:
    """Commands that work as typed in this shell (the venv may not be active)."""
    out.print("\n[bold]Next steps[/] (copy as typed):", highlight=False)
    try:
        shown = bills.resolve().relative_to(Path.cwd())
    except ValueError:
        shown = bills.resolve()
    for line in (
        f"{command} dashboard          # the dashboard",
        f"{command} report             # this report again",
        f"{command} demo --fresh       # start over (a plain rerun appends)",
        "# what OpenRouter billed, from a simulator that bills what the demo served:",
        f"{command} simulate --port 8787 --bills {shlex.quote(str(shown))} &",
        "OPENROUTER_BASE_URL=http://127.0.0.1:8787/api/v1 OPENROUTER_API_KEY=sim "
        f"{command} reconcile openrouter --since all",
    ):
        out.print(f"  {line}", highlight=False, markup=False, soft_wrap=True)
    if command != "ledger":
        activate = Path(command).parent / "activate"
        out.print(f"  (or `source {activate}` first, then type `ledger ...`)", highlight=False,
                  markup=False)  # fmt: skip
