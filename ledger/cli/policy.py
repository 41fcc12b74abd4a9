"""``ledger policy``: apply a routing change to most sessions, hold a few out, measure it.

``propose`` turns the warranted verdicts into the ``apply`` command to run;
``apply`` stores a policy (every process sending through the ledger applies it
within its refresh bound) and prints exactly what changes; ``list`` shows every
policy, active or stopped; ``status`` compares the arms so far; ``check`` judges
every active policy (for cron: exit 1 when one is worse than its holdout, and
with ``--notify`` a webhook once per such policy); ``stop`` ends a policy (its
model's calls are sent as before it). Policy errors exit 2.
"""

from __future__ import annotations

import datetime as dt
import getpass
import json
from typing import Any, Final

import click
from rich.console import Console

from ledger.analytics.read.experiment import Effect, Estimate, Outcome, outcome
from ledger.budgets.notify import DEFAULT_RETRIES, webhook_host
from ledger.cli.report import open_analytics, terminal
from ledger.cli.tables import house_table, safe
from ledger.errors import PolicyError
from ledger.policies import (
    DEFAULT_REFRESH_S,
    PolicyKind,
    active_policies,
    all_policies,
    start_policy,
    stop_policy,
)
from ledger.store.engine import make_engine
from ledger.store.migrate import check_ledger

#: What ``status`` and ``check`` say of each :func:`outcome`.
OUTCOME_TEXT: Final[dict[Outcome, str]] = {
    "measuring": "not enough sessions in both arms to measure yet",
    "no effect yet": "no effect on cost per attempt yet: its interval spans zero",
    "better": "the treatment costs less per attempt, beyond its interval",
    "worse": "worse: the treatment costs more per attempt or fails more often, beyond its "
    "interval; consider `ledger policy stop`",
}
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
    help='The provider object, e.g. \'{"ignore": ["amazon-bedrock"]}\'.',
)
@click.option(
    "--session-key",
    "session_key",
    is_flag=True,
    help="Test the sticky key itself: the holdout is sent without it (instead of --provider).",
)
@click.option(
    "--holdout",
    type=click.FloatRange(0.0, 1.0, max_open=True),
    default=DEFAULT_HOLDOUT,
    show_default=True,
    help="Share of sessions sent as today (with --session-key: without the key).",
)
@click.option("--reason", help="Why (kept with the policy).")
@click.option("--by", "by", default=None, help="Who applies it (default: your user name).")
def apply(
    model: str,
    provider_json: str | None,
    session_key: bool,
    holdout: float,
    reason: str | None,
    by: str | None,
) -> None:
    """Apply PROVIDER to MODEL's OpenRouter calls, holding out a share of sessions; or,
    with --session-key, send the sticky key to all but a holdout that goes without it."""
    if session_key == (provider_json is not None):
        raise click.UsageError("give one of --provider or --session-key")
    provider: Any = {}
    if provider_json is not None:
        try:
            provider = json.loads(provider_json)
        except json.JSONDecodeError as exc:
            raise click.BadParameter(f"not JSON: {exc}", param_hint="--provider") from None
    kind: PolicyKind = "session_key" if session_key else "provider"
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
            kind=kind,
        )
    finally:
        engine.dispose()
    if kind == "session_key":
        change = (
            f"Within {DEFAULT_REFRESH_S:g} s, every process recording into this ledger sends\n"
            f"the model's OpenRouter calls with their sticky key in {1 - holdout:.0%} of "
            f"sessions\n(treatment, as today); {holdout:.0%} are sent without it (holdout).\n"
        )
    else:
        change = (
            f"Within {DEFAULT_REFRESH_S:g} s, every process recording into this ledger sends\n"
            f"  provider = {json.dumps(provider, ensure_ascii=True)}\n"
            f"with the model's OpenRouter calls in {1 - holdout:.0%} of sessions (treatment);\n"
            f"{holdout:.0%} are sent as today (holdout).\n"
        )
    click.echo(
        f"policy {policy_id} applied to {safe(model)}.\n{change}A session keeps its arm.\n"
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
    table = house_table("Routing policies")
    for header in ("id", "model", "change", "holdout", "since", "by", "stopped", "why"):
        # the long ones wrap at words; ids, shares and times never
        wraps = header in ("model", "change", "by", "why")
        table.add_column(header, no_wrap=not wraps, overflow="fold" if wraps else "ellipsis")
    for r in rows:
        table.add_row(
            str(r.id),
            safe(r.requested_model),
            "holdout without the sticky key"
            if r.kind == "session_key"
            else safe(json.dumps(r.provider, ensure_ascii=True)),
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
        by_agent = analytics.experiment_by_agent(latest.id)
    out = terminal()
    print_effect(out, latest, found)
    if len(by_agent) > 1 or latest.kind == "session_key":
        print_agents(out, by_agent)


@policy.command()
@click.option(
    "--notify",
    "notify_url",
    metavar="URL",
    default=None,
    help="Post a Slack-compatible webhook for each active policy worse than its holdout "
    "(once per policy).",
)
@click.option(
    "--retries",
    type=click.IntRange(min=0),
    default=DEFAULT_RETRIES,
    show_default=True,
    help="Retries of a webhook that fails with 5xx, 429 or a network error.",
)
def check(notify_url: str | None, retries: int) -> None:
    """Judge every active policy so far; exit 1 when one is worse than its holdout."""
    from ledger.policy_alerts import notify_worse  # httpx and the alert shape, only here

    engine = make_engine(check_ledger())
    try:
        active = active_policies(engine)
        if not active:
            click.echo("no active routing policy")
            return
        with open_analytics(Console(stderr=True)) as analytics:
            found = [(p, analytics.experiment(p.id)) for p in active]
        for p, effect in found:
            click.echo(
                f"policy {p.id} on {safe(p.requested_model)}: {OUTCOME_TEXT[outcome(effect)]}"
            )
        worse = [(p, e) for p, e in found if outcome(e) == "worse"]
        if notify_url is not None and worse:
            for d in notify_worse(engine, worse, notify_url, retries=retries):
                where = webhook_host(notify_url)
                if d.state == "failed":
                    click.echo(f"alert for policy {d.policy.id} NOT delivered to {where}: "
                               f"{d.error}", err=True)  # fmt: skip
                else:
                    click.echo(f"alert for policy {d.policy.id} {d.state} ({where})", err=True)
    finally:
        engine.dispose()
    if worse:
        raise SystemExit(1)


def _est(e: Estimate, fmt: str) -> str:
    if e.value is None:
        return "-"
    assert e.low is not None and e.high is not None
    half = (e.high - e.low) / 2  # the normal interval is symmetric
    return f"{e.value:{fmt}}\n±{half:{fmt.lstrip('+')}}"


def print_effect(out: Console, latest: Any, found: Effect) -> None:
    what = (
        "the sticky key (treatment: sent, holdout: not)"
        if latest.kind == "session_key"
        else json.dumps(latest.provider, ensure_ascii=True)
    )
    state = "active" if latest.stopped_at is None else f"stopped {latest.stopped_at:%Y-%m-%d}"
    out.print(
        f"policy {latest.id} on {safe(latest.requested_model)} ({state}), since "
        f"{latest.created_at:%Y-%m-%d %H:%M} UTC\nchange: {safe(what)}\n"
        "(± a 95 % interval, sessions as the unit)",
        markup=False,
    )
    table = house_table(None)
    for header in (
        "",
        "sessions",
        "attempts",
        "cost / attempt $",
        "error rate",
        "token hit",
        "p95 ms",
    ):
        table.add_column(header, justify="right" if header else "left", no_wrap=True)
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
    out.print(OUTCOME_TEXT[outcome(found)], markup=False)


def print_agents(out: Console, by_agent: dict[str | None, Effect]) -> None:
    """The effect per agent: what the change did to each (a session is one agent's)."""
    table = house_table("Effect per agent (treatment - holdout)")
    for header in ("agent", "sessions (T + H)", "cost / attempt $", "error rate", "token hit"):
        table.add_column(header, overflow="fold")
    for agent, found in by_agent.items():
        sessions = found.treatment.sessions + found.holdout.sessions
        table.add_row(
            "(none)" if agent is None else safe(agent),
            f"{found.treatment.sessions:,} + {found.holdout.sessions:,} = {sessions:,}",
            _est(found.cost_per_attempt, "+.6f"),
            _est(found.error_rate, "+.1%"),
            _est(found.token_hit_rate, "+.1%"),
        )
    out.print(table)
