"""The ``ledger report`` section on prompt-cache economics and the cache lifetime to choose.

A table of ``cache_economics`` (what caching cost and saved per agent, model and
upstream), then one line per agent and model of ``cache_ttl_advice``: its verdict
and headline, under a ``switch`` the ``cache_control`` to paste, and the figures
behind it as a paragraph (readable at 80 columns, as the provider.order reasons).
"""

from __future__ import annotations

from typing import Final

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ledger.analytics import Analytics
from ledger.cli.tables import print_frame, safe

ECONOMICS_COLUMNS: Final = (
    "actor_id", "requested_model", "upstream", "cache_write_tokens", "written_read_share",
    "unread_write_cost_usd", "read_saving_usd", "net_effect_usd",
)  # fmt: skip
HEADERS: Final[dict[str, str]] = {
    "actor_id": "agent",
    "requested_model": "model",
    "cache_write_tokens": "written tok",
    "written_read_share": "read later",
    "unread_write_cost_usd": "unread cost",
    "read_saving_usd": "read saving",
    "net_effect_usd": "net",
}
#: The advice's verdicts in words, and how they stand out.
ADVICE_WORDS: Final[dict[str, str]] = {
    "switch": "switch",
    "keep": "keep",
    "inconclusive": "inconclusive",
    "insufficient_data": "insufficient data",
    "does_not_apply": "does not apply",
}
ADVICE_STYLE: Final[dict[str, str]] = {
    "switch": "bold red",
    "keep": "green",
    "inconclusive": "yellow",
    "insufficient_data": "yellow",
    "does_not_apply": "dim",
}


def cache_section(out: Console, analytics: Analytics) -> None:
    """The economics table, then the cache-lifetime advice (agents it applies to only)."""
    economics = analytics.view("cache_economics")
    economics = economics[economics["cache_write_tokens"] + economics["cache_read_tokens"] > 0]
    print_frame(out, "Prompt-cache economics (net < 0: caching saved money)", economics,
                ECONOMICS_COLUMNS, headers=HEADERS,
                group_by=("actor_id", "requested_model"))  # fmt: skip
    advice = analytics.view("cache_ttl_advice")
    advice = advice[advice["verdict"] != "does_not_apply"]
    out.print()
    if advice.empty:
        out.print("Cache lifetime: no agent writes to a cache with a write premium")
        return
    out.print(Text("Cache lifetime (Anthropic's 5-minute or 1-hour writes):", style="bold"))
    lines = Table.grid()
    lines.add_column(width=4, no_wrap=True)
    lines.add_column()
    for row in advice.to_dict("records"):
        verdict = str(row["verdict"])
        line = Text()
        line.append(f"{safe(row['actor_id'])} · {safe(row['requested_model'])}", style="bold")
        line.append(f" ({safe(row['provider'])}): ")
        line.append(ADVICE_WORDS.get(verdict, safe(verdict)), style=ADVICE_STYLE.get(verdict))
        line.append(f" — {safe(row['headline'])}")
        lines.add_row("  • ", line)
        setting = row.get("setting")
        if isinstance(setting, str) and setting.startswith("cache_control"):
            paste = f"paste: {safe(setting)} on the last block the turns share"
            lines.add_row("", Text(paste, style="bold"))
        elif isinstance(setting, str):
            lines.add_row("", Text(f"{safe(setting)} from the requests", style="bold"))
        if isinstance(row.get("reason"), str):
            lines.add_row("", Text(safe(row["reason"]), style="dim"))
    out.print(lines)
