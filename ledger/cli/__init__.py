"""The ``ledger`` command line: one module per command group, thin over the typed API.

Each module exposes one click command (or group); :data:`COMMANDS` lists them
by import path so the top level loads fast and a new command is one line here.
"""

from __future__ import annotations

import difflib
import importlib
import logging
import sys
from typing import Final

import click

from ledger.errors import LedgerError
from ledger.shown import lines

#: ``module:attribute`` of every top-level command, in help order.
COMMANDS: Final = (
    "ledger.cli.demo:demo",
    "ledger.cli.db:db",
    "ledger.cli.replay:replay",
    "ledger.cli.simulate:simulate",
    "ledger.cli.sync:sync",
    "ledger.cli.gateway:gateway",
    "ledger.cli.report:report",
    "ledger.cli.sql:sql",
    "ledger.cli.export:export",
    "ledger.cli.lake:lake",
    "ledger.cli.providers:providers",
    "ledger.cli.budget:budget",
    "ledger.cli.policy:policy",
    "ledger.cli.reprice:reprice",
    "ledger.cli.reconcile:reconcile",
    "ledger.cli.otel:otel",
    "ledger.cli.otlp:otlp",
    "ledger.cli.dashboard:dashboard",
)


class _LazyGroup(click.Group):
    """Imports a command's module only when that command runs (or help lists it)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [spec.rsplit(":", 1)[1].replace("_", "-") for spec in COMMANDS]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        for spec in COMMANDS:
            module, attr = spec.split(":")
            if attr.replace("_", "-") == cmd_name:
                command = getattr(importlib.import_module(module), attr)
                assert isinstance(command, click.Command)
                return command
        return None

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        # click suggests from the commands a group holds, and a lazy one holds none yet
        name = args[0] if args else ""
        if name and not name.startswith("-") and self.get_command(ctx, name) is None:
            close = difflib.get_close_matches(name, self.list_commands(ctx), n=2)
            hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            raise click.UsageError(f"No such command {name!r}.{hint}", ctx)
        return super().resolve_command(ctx, args)


@click.group(cls=_LazyGroup)
@click.option("-v", "--verbose", is_flag=True, help="Log at INFO level.")
def cli(verbose: bool) -> None:
    """A cost ledger and token-usage analytics for LLM agents.

    The database is LEDGER_DATABASE_URL (an SQLAlchemy URL); unset, ledger.db
    in the working directory.
    """
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )


def main() -> None:
    """Entry point: our own errors become one line on stderr and exit status 2."""
    try:
        # Without standalone mode click returns ctx.exit()'s code instead of exiting.
        code = cli(standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.UsageError as exc:  # about the arguments as typed: usage and hint too
        exc.show()
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        # A message may quote the ledger's strings (DuckDB's "could not convert string
        # '…'" quotes a row's value): escaped as any ledger error's below.
        click.echo(f"Error: {lines(exc.format_message())}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(1)
    except LedgerError as exc:
        # A message may quote the ledger's own strings (an event id, a journal line):
        # data, so a control character in one cannot restyle or clear the terminal.
        click.echo(f"ledger: {lines(str(exc))}", err=True)
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)
