"""``ledger providers [--json]``: the provider capability table."""

from __future__ import annotations

import json

import click
from rich.console import Console
from rich.table import Table

from ledger.providers import capabilities_table

_COLUMNS = (
    "sticky_session",
    "prompt_caching",
    "streaming_usage",
    "reports_cost",
    "reports_upstream",
    "provider_routing",
)


def _cell(value: object) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the capabilities DTO as JSON.")
def providers(as_json: bool) -> None:
    """List the providers ledger speaks and what each one declares (sticky_session included)."""
    entries = capabilities_table()
    if as_json:
        click.echo(json.dumps({"providers": entries}, indent=2))
        return
    table = Table("provider", *_COLUMNS, "api key env")
    for entry in entries:
        caps = entry["capabilities"]
        table.add_row(
            entry["name"], *(_cell(caps[c]) for c in _COLUMNS), entry["api_key_env"] or "-"
        )
    Console(width=160).print(table)
