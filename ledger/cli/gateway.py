"""``ledger gateway``: serve the OpenAI/Anthropic-compatible endpoint; make and hash keys."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ledger.cli.ports import port_option
from ledger.gateway.auth import hash_key, new_key
from ledger.listen import base_url, listen


@click.group(invoke_without_command=True)
@click.option(
    "--config",
    "config_path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="ledger.toml or pyproject.toml (default: found from the working directory).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to bind.")
@port_option(8788)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Worker processes (share the limiter through redis_url).",
)
@click.option(
    "--graceful",
    type=click.FloatRange(min=0),
    default=30.0,
    show_default=True,
    help="Seconds SIGTERM waits for in-flight requests.",
)
@click.option("--no-access-log", is_flag=True, help="Do not write the JSON access log.")
@click.pass_context
def gateway(
    ctx: click.Context,
    config_path: Path | None,
    host: str,
    port: int,
    workers: int,
    graceful: float,
    no_access_log: bool,
) -> None:
    """Serve POST /v1/chat/completions (OpenAI wire), POST /v1/messages (Anthropic wire),
    GET /v1/models and GET /healthz; every attempt lands in the ledger."""
    if ctx.invoked_subcommand is not None:
        return
    from ledger.gateway.config import load_config
    from ledger.gateway.serve import serve
    from ledger.store.migrate import check_ledger

    # Both fail here with the precise error and exit 2, before anything is bound or
    # created (the ledger's journal directory included).
    config = load_config(config_path)
    check_ledger()
    if not config.models and not config.passthrough:
        # it would start and answer every call 404 "model not served"
        click.echo(
            "ledger gateway: no model is served yet: map public names to routes in "
            '[gateway.models] ("gpt-4o-mini" = ["openai:gpt-4o-mini"]) or pass '
            'provider/<model> through (passthrough = ["openrouter"])',
            err=True,
        )
    listener = listen(host, port)  # a taken port ends here: one line, exit 2
    click.echo(f"ledger gateway on {base_url(listener, host)}/v1", err=True)
    serve(
        config,
        host=host,
        port=port,
        workers=workers,
        graceful_s=graceful,
        access_log=not no_access_log,
        listener=listener,
    )


@gateway.command("new-key")
def new_key_command() -> None:
    """Print a fresh gateway key (give it to the client) and its sha256 (for the config)."""
    key = new_key()
    click.echo(f"key:    {key}")
    click.echo(f"sha256: {hash_key(key)}")


@gateway.command("hash-key")
def hash_key_command() -> None:
    """Read a key on stdin, print its sha256 for [tool.ledger.gateway.keys.<name>]."""
    secret = sys.stdin.readline().strip()
    if not secret:
        raise click.UsageError("no key on stdin")
    click.echo(hash_key(secret))
