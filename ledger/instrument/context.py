"""Who a call belongs to, without changing call sites: session, agent, tags, locale.

::

    with ledger.context(session_id="s-42", actor_id="planner", tags={"app": "review"}):
        client.chat.completions.create(...)      # its row carries s-42 / planner

The values live in a :class:`contextvars.ContextVar`, so they follow the code
that set them: a thread sees only its own (threads start with an empty
context), and an asyncio task sees what was set when it was created, so two
tasks running side by side never mix their sessions. Nested contexts inherit
from the outer one; an inner value wins and tags merge.

Per request, the same values can travel in ``x-ledger-*`` headers (e.g. the
SDKs' ``extra_headers``); the transport reads and strips them before sending,
so the provider never sees them. A header beats the surrounding context.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Final

from ledger.attempt import Call

#: Header names the transport reads (and removes before the request leaves).
HEADER_PREFIX: Final = b"x-ledger-"
SESSION_HEADER: Final = "x-ledger-session-id"
ACTOR_HEADER: Final = "x-ledger-actor-id"
TAGS_HEADER: Final = "x-ledger-tags"
LOCALE_HEADER: Final = "x-ledger-locale"


@dataclass(frozen=True, slots=True)
class Context:
    """What the ledger files a call under; every field optional."""

    session_id: str | None = None
    actor_id: str | None = None
    tags: Mapping[str, Any] | None = None
    locale: str | None = None

    def check(self) -> None:
        """Raise ``ValueError`` for what the ledger could not record (the caller's bug)."""
        Call(
            messages=(),
            session_id=self.session_id,
            actor_id=self.actor_id,
            tags=self.tags,
            locale=self.locale,
        ).check()

    def merged(self, inner: Context) -> Context:
        """``inner`` over ``self``: set fields win, tags merge key by key."""
        tags: Mapping[str, Any] | None = self.tags
        if inner.tags is not None:
            tags = {**(self.tags or {}), **inner.tags}
        return Context(
            session_id=inner.session_id if inner.session_id is not None else self.session_id,
            actor_id=inner.actor_id if inner.actor_id is not None else self.actor_id,
            tags=tags,
            locale=inner.locale if inner.locale is not None else self.locale,
        )


EMPTY: Final = Context()
_current: ContextVar[Context] = ContextVar("ledger_context", default=EMPTY)


def current() -> Context:
    """The context in force here (empty when none was set)."""
    return _current.get()


@contextmanager
def context(
    *,
    session_id: str | None = None,
    actor_id: str | None = None,
    tags: Mapping[str, Any] | None = None,
    locale: str | None = None,
) -> Iterator[Context]:
    """File every instrumented call inside the block under these values (see the module doc)."""
    inner = Context(session_id, actor_id, dict(tags) if tags is not None else None, locale)
    merged = _current.get().merged(inner)
    merged.check()
    token = _current.set(merged)
    try:
        yield merged
    finally:
        _current.reset(token)


def from_headers(found: Mapping[str, str]) -> Context:
    """The context carried by ``x-ledger-*`` headers (lower-case names); ``ValueError`` if
    a value cannot be recorded."""
    tags = None
    if (raw := found.get(TAGS_HEADER)) is not None:
        try:
            tags = json.loads(raw)
        except ValueError:
            raise ValueError(f"{TAGS_HEADER} must be a JSON object") from None
        if not isinstance(tags, dict):
            raise ValueError(f"{TAGS_HEADER} must be a JSON object")
    get = found.get
    ctx = Context(get(SESSION_HEADER), get(ACTOR_HEADER), tags, get(LOCALE_HEADER))
    ctx.check()
    return ctx


def effective(found: Mapping[str, str] | None) -> Context:
    """The surrounding context with the request's headers (if any) over it."""
    ctx = _current.get()
    if not found:
        return ctx
    return ctx.merged(from_headers(found))


__all__ = ["Context", "context", "current", "effective", "from_headers"]
