"""``ledger otlp``: the OTLP/HTTP receiver as a standalone server."""

from __future__ import annotations

import contextlib
import json

import click

from ledger.cli.ports import port_option
from ledger.errors import ConfigurationError
from ledger.listen import base_url, listen


@click.command()
@port_option(4318)
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to bind.")
def otlp(port: int, host: str) -> None:
    """Receive OTLP/HTTP traces (POST /v1/traces, protobuf or JSON) and record the GenAI
    client spans in them as token_usage rows in LEDGER_DATABASE_URL."""
    try:
        from ledger.otel.serve import make_server
    except ImportError as exc:
        raise ConfigurationError(
            f"ledger otlp needs the otel extra (pip install 'ledger[otel]'): {exc}"
        ) from None
    from ledger.store.ledger import Ledger
    from ledger.store.migrate import check_ledger

    # missing, unreachable or old: the precise error and exit 2, before anything is
    # bound or created (the ledger's journal directory included)
    check_ledger()
    listener = listen(host, port)  # a taken port ends here: one line, exit 2
    with Ledger(exporters=()) as ledger:
        server, receiver = make_server(ledger, host, port)
        click.echo(f"OTLP/HTTP receiver on {base_url(listener, host)}/v1/traces")
        # uvicorn shuts down gracefully on Ctrl-C, then re-raises the signal: that is
        # the normal way to stop this server, so the ledger flushes and we exit 0.
        with contextlib.suppress(KeyboardInterrupt):
            server.run(sockets=[listener])
    click.echo(json.dumps(receiver.stats.as_dict()))
