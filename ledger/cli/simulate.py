"""``ledger simulate``: the OpenRouter/OpenAI/Anthropic-compatible simulator as an HTTP server."""

from __future__ import annotations

import click

from ledger.simulator import Simulator, WallClock, make_server


@click.command()
@click.option("--port", "-p", type=int, default=8787, show_default=True, help="TCP port.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to bind.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for routing and faults.")
@click.option(
    "--latency-scale",
    type=click.FloatRange(min=0.0),
    default=1.0,
    show_default=True,
    help="Multiply simulated latencies by this (0 answers at once).",
)
def simulate(port: int, host: str, seed: int, latency_scale: float) -> None:
    """Serve the simulator: POST /api/v1/chat/completions (OpenRouter),
    /v1/chat/completions (OpenAI) and /v1/messages (Anthropic)."""
    sim = Simulator(clock=WallClock(latency_scale), seed=seed)
    base = f"http://{host}:{port}"
    click.echo(
        f"simulator on {base}  (OpenRouter {base}/api/v1, OpenAI {base}/v1, Anthropic {base})"
    )
    for service in ("openrouter", "openai", "anthropic"):
        models = ", ".join(sorted(sim.catalog.pools(service)))
        click.echo(f"  {service}: {models}")
    make_server(sim, host, port).run()
