"""``ledger simulate``: the OpenRouter/OpenAI/Anthropic-compatible simulator as an HTTP server."""

from __future__ import annotations

from pathlib import Path

import click

from ledger.cli.ports import port_option
from ledger.listen import base_url, listen
from ledger.simulator import Simulator, WallClock, make_server


@click.command()
@port_option(8787)
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to bind.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for routing and faults.")
@click.option(
    "--latency-scale",
    type=click.FloatRange(min=0.0),
    default=1.0,
    show_default=True,
    help="Multiply simulated latencies by this (0 answers at once).",
)
@click.option(
    "--bill-discrepancy",
    type=click.FloatRange(0.0, 1.0),
    default=0.0,
    show_default=True,
    help="Share of calls billed 5% above what was served (drift for `ledger reconcile`).",
)
@click.option(
    "--bills",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    multiple=True,
    help="Also bill the OpenRouter generations in this file (repeatable): the one "
    "`ledger demo` writes beside its ledger, so `ledger reconcile openrouter` reconciles it.",
)
def simulate(
    port: int,
    host: str,
    seed: int,
    latency_scale: float,
    bill_discrepancy: float,
    bills: tuple[Path, ...],
) -> None:
    """Serve the simulator: POST /api/v1/chat/completions (OpenRouter),
    /v1/chat/completions (OpenAI) and /v1/messages (Anthropic); what they served is
    billed at GET /api/v1/generation and the OpenAI/Anthropic admin cost and usage
    reports (/v1/organization/costs, /v1/organizations/cost_report, …)."""
    sim = Simulator(clock=WallClock(latency_scale), seed=seed)
    sim.generations.discrepancy_rate = bill_discrepancy
    sim.reports.discrepancy_rate = bill_discrepancy
    loaded = sum(sim.generations.load(path) for path in bills)
    listener = listen(host, port)  # a taken port ends here: one line, exit 2
    base = base_url(listener, host)
    click.echo(
        f"simulator on {base}  (OpenRouter {base}/api/v1, OpenAI {base}/v1, Anthropic {base})"
    )
    for service in ("openrouter", "openai", "anthropic"):
        models = ", ".join(sorted(sim.catalog.pools(service)))
        click.echo(f"  {service}: {models}")
    if bills:
        click.echo(f"  openrouter: billing {loaded:,} generations served before (--bills)")
    make_server(sim, host, port).run(sockets=[listener])
