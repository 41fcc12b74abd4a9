"""``ledger providers [--json]``: the provider capability table."""

from __future__ import annotations

import json
from typing import Any, Final

import click
import pandas as pd  # type: ignore[import-untyped]

from ledger.cli.report import terminal
from ledger.cli.tables import print_frame
from ledger.providers import capabilities_table

#: Capability (the DTO's name) -> its column label: short, so the table fits 80 columns.
CAPABILITIES: Final = {
    "sticky_session": "sticky",
    "prompt_caching": "prompt cache",
    "streaming_usage": "stream usage",
    "reports_cost": "cost",
    "reports_upstream": "upstream",
    "provider_routing": "routing",
}
ENVIRONMENT: Final = {"api_key_env": "key from", "base_url_env": "base URL from"}


def _cell(value: object) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    return "-" if value is None else str(value)


def _row(entry: dict[str, Any]) -> dict[str, str]:
    caps = entry["capabilities"]
    return {
        "provider": entry["name"],
        **{name: _cell(caps[name]) for name in CAPABILITIES},
        **{name: _cell(entry[name]) for name in ENVIRONMENT},
    }


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the capabilities DTO as JSON.")
def providers(as_json: bool) -> None:
    """List the providers ledger speaks, what each one declares (sticky session, prompt
    caching, usage in streams, cost and upstream in responses, provider routing) and the
    environment variables it reads its API key and base URL from."""
    entries = capabilities_table()
    if as_json:
        click.echo(json.dumps({"providers": entries}, indent=2))
        return
    frame = pd.DataFrame([_row(entry) for entry in entries])
    columns = ["provider", *CAPABILITIES]
    print_frame(terminal(), "Capabilities", frame, columns, headers=CAPABILITIES)
    print_frame(
        terminal(), "Environment variables", frame, ["provider", *ENVIRONMENT], headers=ENVIRONMENT
    )
