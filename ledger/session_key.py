"""The sticky session key (ADR 0221): ``<prefix>:<session_id>:<actor_id>``.

Keyed per agent and session, never per project: each agent has its own
prompt prefix, so pinning two agents together gains no cache. Without an
actor the key is ``<prefix>:<session_id>``.

Two properties matter and are tested:

* injective: ``%`` and ``:`` inside the parts are percent-encoded, so
  ``("a:b", "c")`` and ``("a", "b:c")`` give different keys;
* bounded: a key over OpenRouter's 256-character limit keeps a readable head
  and ends with ``~`` plus 32 hex digits of the SHA-256 of the whole key, so
  two long keys sharing a head still differ (collision odds 2^-128).
"""

from __future__ import annotations

import hashlib
from typing import Final

DEFAULT_PREFIX: Final = "ledger"
#: OpenRouter's documented maximum for ``session_id`` (and the ``session_key`` column's size).
MAX_KEY_LENGTH: Final = 256
_DIGEST_CHARS: Final = 32


def _escape(part: str) -> str:
    return part.replace("%", "%25").replace(":", "%3A")


def session_key(
    session_id: str,
    actor_id: str | None = None,
    *,
    prefix: str = DEFAULT_PREFIX,
    max_length: int = MAX_KEY_LENGTH,
) -> str:
    """The key to send for ``session_id`` (and ``actor_id``), at most ``max_length`` characters."""
    if not session_id:
        raise ValueError("session_key needs a non-empty session_id")
    if max_length < _DIGEST_CHARS + 2:
        raise ValueError(f"max_length must be at least {_DIGEST_CHARS + 2}")
    parts = [_escape(prefix), _escape(session_id)]
    if actor_id:
        parts.append(_escape(actor_id))
    key = ":".join(parts)
    if len(key) <= max_length:
        return key
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:_DIGEST_CHARS]
    head = key[: max_length - _DIGEST_CHARS - 1]
    return f"{head}~{digest}"
