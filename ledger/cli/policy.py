"""``ledger policy``: apply a routing change to most sessions, hold a few out, measure it.

``propose`` turns the warranted verdicts into the ``apply`` command to run;
``apply`` stores a policy (every process sending through the ledger applies it
within its refresh bound) and prints exactly what changes; ``list`` shows every
policy, active or stopped; ``status`` compares the arms so far; ``stop`` ends a
policy (its model's calls are sent as before it). Policy errors exit 2.
"""

from __future__ import annotations

import datetime as dt
import getpass
import json
from typing import Any, Final

import click
from rich.console import Console
from rich.table import Table

from ledger.analytics.read.experiment import Effect, Estimate
from ledger.cli.report import open_analytics, terminal
from ledger.cli.tables import safe
from ledger.errors import PolicyError
from ledger.policies import DEFAULT_REFRESH_S, all_policies, start_policy, stop_policy
from ledger.store.engine import make_engine
from ledger.store.migrate import check_ledger

#: The share of sessions ``propose`` holds out unless told otherwise.
DEFAULT_HOLDOUT: Final = 0.15


def _by() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no user name in a bare container
        return "unknown"


@click.group()
def policy() -> None:
    """Routing policies: a provider object for one model, with a holdout to measure it."""


@policy.command()
@click.argument("model")
@click.option(
    "--provider",
    "provider_json",
    required=True,
    help='The provider object, e.g. \'{"ignore": ["amazon-bedrock"]}\'.',
)
@click.option(
    "--holdout",
    type=click.FloatRange(0.0, 1.0, max_open=True),
    default=DEFAULT_HOLDOUT,
    show_default=True,
    help="Share of sessions sent as today, to measure the change against.",
)
@click.option("--reason", help="Why (kept with the policy).")
@click.option("--by", "by", default=None, help="Who applies it (default: your user name).")
def apply(
    model: str, provider_json: str, holdout: float, reason: str | None, by: str | None
) -> None:
    """Apply PROVIDER to MODEL's OpenRouter calls, holding out a share of sessions."""
    try:
        provider = json.loads(provider_json)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="--provider") from None
    engine = make_engine(check_ledger())
    try:
        policy_id = start_policy(
            engine,
            model=model,
            provider=provider,
            holdout_share=holdout,
            by=by or _by(),
            reason=reason,
            now=dt.datetime.now(dt.UTC),
        )
    finally:
        engine.dispose()
    shown = json.dumps(provider, ensure_ascii=True)
    click.echo(
        f"policy {policy_id} applied to {safe(model)}.\n"
        f"Within {DEFAULT_REFRESH_S:g} s, every process recording into this ledger sends\n"
        f"  provider = {shown}\n"
        f"with the model's OpenRouter calls in {1 - holdout:.0%} of sessions (treatment);\n"
        f"{holdout:.0%} are sent as today (holdout). A session keeps its arm.\n"
        f"Measure:  ledger policy status {safe(model)}\n"
        f"End:      ledger policy stop {safe(model)}"
    )


@policy.command()
@click.argument("model")
@click.option("--reason", help="Why (kept with the policy).")
@click.option("--by", "by", default=None, help="Who stops it (default: your user name).")
def stop(model: str, reason: str | None, by: str | None) -> None:
    """Stop MODEL's active policy: its calls are sent as before it (rolls it back)."""
    engine = make_engine(check_ledger())
    try:
        stopped = stop_policy(
            engine, model=model, by=by or _by(), reason=reason, now=dt.datetime.now(dt.UTC)
        )
    finally:
        engine.dispose()
    click.echo(
        f"policy {stopped.id} on {safe(model)} stopped: within {DEFAULT_REFRESH_S:g} s its "
        "calls are sent as before it (its rows keep their policy and arm)"
    )


@policy.command("list")
def list_policies() -> None:
    """Every policy, active or stopped, newest first."""
    engine = make_engine(check_ledger())
    try:
        rows = all_policies(engine)
    finally:
        engine.dispose()
    out = terminal()
    if not rows:
        out.print("no routing policies yet (ledger policy propose suggests one)")
        return
    table = Table(title="routing policies")
    for header in ("id", "model", "provider", "holdout", "since", "by", "stopped", "why"):
        table.add_column(header, overflow="fold")
    for r in rows:
        table.add_row(
            str(r.id),
            safe(r.requested_model),
            safe(json.dumps(r.provider, ensure_ascii=True)),
            f"{r.holdout_share:.0%}",
            f"{r.created_at:%Y-%m-%d %H:%M}",
            safe(r.created_by),
            "" if r.stopped_at is None else f"{r.stopped_at:%Y-%m-%d %H:%M}",
            safe(r.reason or ""),
        )
    out.print(table)


@policy.command()
@click.option(
    "--holdout",
    type=click.FloatRange(0.0, 1.0, max_open=True),
    default=DEFAULT_HOLDOUT,
    show_default=True,
)
def propose(holdout: float) -> None:
    """The `ledger policy apply` command for each warranted verdict."""
    with open_analytics(Console(stderr=True)) as analytics:
        found = analytics.recommendations()
    if not found:
        click.echo("no verdict warrants a routing change (ledger report shows why)")
        return
    for model, provider in found.items():
        shown = json.dumps(provider, ensure_ascii=True).replace("'", "'\\''")
        click.echo(
            f"ledger policy apply {safe(model)} --provider '{shown}' --holdout {holdout:g} "
            f"--reason 'verdict: warranted'"
        )


@policy.command()
@click.argument("model")
def status(model: str) -> None:
    """MODEL's latest policy so far: each arm, and the policy's effect with its interval."""
    engine = make_engine(check_ledger())
    try:
        latest = next((r for r in all_policies(engine) if r.requested_model == model), None)
    finally:
        engine.dispose()
    if latest is None:
        raise PolicyError(f"{model} has never had a policy (ledger policy list shows them)")
    with open_analytics(Console(stderr=True)) as analytics:
        found = analytics.experiment(latest.id)
    print_effect(terminal(), latest, found)


def _est(e: Estimate, fmt: str) -> str:
    if e.value is None:
        return "-"
    assert e.low is not None and e.high is not None
    half = (e.high - e.low) / 2  # the normal interval is symmetric
    return f"{e.value:{fmt}}\n±{half:{fmt.lstrip('+')}}"


def print_effect(out: Console, latest: Any, found: Effect) -> None:
    state = "active" if latest.stopped_at is None else f"stopped {latest.stopped_at:%Y-%m-%d}"
    out.print(
        f"policy {latest.id} on {safe(latest.requested_model)} ({state}), since "
        f"{latest.created_at:%Y-%m-%d %H:%M} UTC\n(± a 95 % interval, sessions as the unit)",
        markup=False,
    )
    table = Table()
    for header in (
        "",
        "sessions",
        "attempts",
        "cost / attempt $",
        "error rate",
        "token hit",
        "p95 ms",
    ):
        table.add_column(header, overflow="fold")
    for arm in (found.treatment, found.holdout):
        table.add_row(
            arm.arm,
            f"{arm.sessions:,}",
            f"{arm.attempts:,}",
            _est(arm.cost_per_attempt, ".6f"),
            _est(arm.error_rate, ".1%"),
            _est(arm.token_hit_rate, ".1%"),
            "-" if arm.p95_latency_ms is None else f"{arm.p95_latency_ms:,.0f}",
        )
    table.add_row(
        "effect",
        "",
        "",
        _est(found.cost_per_attempt, "+.6f"),
        _est(found.error_rate, "+.1%"),
        _est(found.token_hit_rate, "+.1%"),
        "",
    )
    out.print(table)
    cost = found.cost_per_attempt
    if cost.value is None:
        out.print("not enough sessions in both arms to measure yet", markup=False)
    elif not cost.excludes_zero:
        out.print("no effect on cost per attempt yet: its interval spans zero", markup=False)
    elif cost.value > 0:
        out.print(
            "worse: the treatment costs more per attempt; consider `ledger policy stop`",
            markup=False,
        )
    else:
        out.print("the treatment costs less per attempt, beyond its interval", markup=False)
