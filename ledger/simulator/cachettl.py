"""The lifetime a request asks its prompt-cache writes to have (Anthropic's ``ttl``).

Anthropic marks cacheable prefixes with ``cache_control: {"type": "ephemeral"}``
(a 5-minute entry, written at 1.25x the input price) or
``{"type": "ephemeral", "ttl": "1h"}`` (a 1-hour entry, written at 2x); a read
costs 0.1x whichever wrote it, and refreshes the entry for its lifetime.
OpenRouter passes the same marker through on its chat API. The simulator keeps
one lifetime per request: the longest any marker asks for (Anthropic requires
1-hour breakpoints before 5-minute ones, so the cached prefix up to the last
1-hour marker is most of what a request writes).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

FIVE_MINUTES_S: Final = 300.0
ONE_HOUR_S: Final = 3600.0
_TTLS: Final = {"5m": FIVE_MINUTES_S, "1h": ONE_HOUR_S}


def requested_ttl_s(body: dict[str, Any]) -> float:
    """The longest ``cache_control.ttl`` in ``body`` (top level, system, tools, messages)."""
    return max(
        (_TTLS.get(str(m.get("ttl", "5m")), FIVE_MINUTES_S) for m in _markers(body)),
        default=FIVE_MINUTES_S,
    )


def _markers(body: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield from _marker_of(body)
    for key in ("system", "tools", "messages"):
        yield from _walk(body.get(key))


def _walk(value: Any) -> Iterator[dict[str, Any]]:
    if isinstance(value, list):
        for item in value:
            yield from _walk(item)
    elif isinstance(value, dict):
        yield from _marker_of(value)
        yield from _walk(value.get("content"))


def _marker_of(part: dict[str, Any]) -> Iterator[dict[str, Any]]:
    marker = part.get("cache_control")
    if isinstance(marker, dict):
        yield marker
