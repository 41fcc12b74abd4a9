"""The usage event: one provider attempt, as the caller hands it to the ledger.

:func:`to_row` validates an event at the caller (so a bad value fails where it
was made, naming the field) and turns it into the *wire row*: a tuple in
:data:`ledger.schema.EVENT_COLUMNS` order whose values are already what the
journal serialises and what the database drivers accept without further
conversion (timestamps as naive-UTC ISO text, cost as decimal text, booleans as
0/1, tags as JSON text). Doing the conversion once, here, keeps the background
writer's work to a bare ``executemany``/``COPY``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Final, Literal

from ledger.schema import COST_SCALE, EVENT_COLUMNS, STRING_LIMITS

Status = Literal["ok", "error"]
ErrorType = Literal[
    "rate_limited",
    "server_error",
    "transport",
    "timeout",
    "client_error",
    "stream_interrupted",
    "abandoned",
]
CostSource = Literal["provider", "computed", "incomplete"]

STATUSES: Final = frozenset({"ok", "error"})
ERROR_TYPES: Final = frozenset(
    {
        "rate_limited",
        "server_error",
        "transport",
        "timeout",
        "client_error",
        "stream_interrupted",
        "abandoned",
    }
)
#: The ``error_type`` of a streamed attempt the caller stopped reading before it
#: ended: an ``error`` row (its usage is partial, so it is no served attempt),
#: but not the provider's failure (see the README's "What a row says").
ABANDONED: Final[ErrorType] = "abandoned"
COST_SOURCES: Final = frozenset({"provider", "computed", "incomplete"})

#: Token counters are stored as 64-bit integers (``bigint``).
MAX_TOKENS: Final = 2**63 - 1
#: ``numeric(20, 10)`` holds ten integer digits.
MAX_COST_USD: Final = Decimal(10) ** (20 - COST_SCALE)
#: Tags are free-form labels, not payloads.
MAX_TAGS_BYTES: Final = 16_384

_TOKEN_FIELDS: Final = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
)
_STRING_FIELDS: Final = tuple(STRING_LIMITS.items())


def new_id() -> str:
    """A fresh UUID4 in its canonical 36-character form.

    ``str(uuid.uuid4())`` builds a 128-bit int and a UUID object on the way (~6 µs,
    twice per client call); this sets the same version and variant bits on the
    same 16 random bytes and formats their hex directly.
    """
    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40  # version 4
    raw[8] = (raw[8] & 0x3F) | 0x80  # variant RFC 4122
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


@dataclass(slots=True, kw_only=True)
class UsageEvent:
    """One attempt at one provider: the fields of contract §1 (without ``id``).

    ``event_id`` is the idempotency key: recording the same event twice stores
    it once. Leave it unset and a UUID is generated. ``call_id`` groups the
    attempts of one logical call; unset, the event is a call of its own.
    ``usage_reported`` is False when the token counts are not the provider's
    report for the whole attempt (none came, or the stream ended or was left
    before it): they are then what was seen, and no rate takes them as real.
    """

    started_at: dt.datetime
    requested_provider: str
    requested_model: str
    provider: str
    status: Status
    event_id: str = field(default_factory=new_id)
    call_id: str = field(default_factory=new_id)
    attempt: int = 1
    latency_ms: float | None = None
    ttft_ms: float | None = None
    session_id: str | None = None
    actor_id: str | None = None
    session_key: str | None = None
    model: str | None = None
    upstream: str | None = None
    generation_id: str | None = None
    routing_sort: str | None = None
    routing_order: str | None = None
    error_type: ErrorType | None = None
    http_status: int | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    cost_usd: Decimal | None = None
    cost_source: CostSource | None = None
    response_cache_hit: bool = False
    streamed: bool = False
    paused: bool = False
    locale: str | None = None
    tags: dict[str, Any] | None = None
    usage_reported: bool = True
    usage_details: dict[str, dict[str, int]] | None = None

    def replace(self, **changes: Any) -> UsageEvent:
        """A copy with ``changes`` applied (a new ``event_id`` is not implied)."""
        return dataclasses.replace(self, **changes)


def _fail(name: str, value: Any, expected: str) -> ValueError:
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return ValueError(f"UsageEvent.{name} = {shown}: {expected}")


_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def _check_uuid(name: str, value: Any) -> str:
    # A regex, not uuid.UUID(): this runs twice per record() on the hot path.
    if not isinstance(value, str) or _UUID.fullmatch(value) is None:
        raise _fail(name, value, "expected a UUID string of 36 characters")
    return value


def _check_int(name: str, value: Any, low: int, high: int) -> int:
    # bool is an int subclass; True tokens is a bug, not a count.
    if type(value) is not int or not low <= value <= high:
        raise _fail(name, value, f"expected an integer from {low} to {high}")
    return value


def _check_ms(name: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _fail(name, value, "expected a finite number of milliseconds or None")
    if value < 0:
        raise _fail(name, value, "expected a non-negative number of milliseconds")
    return float(value)


def _check_text(name: str, value: Any, limit: int) -> None:
    if not isinstance(value, str):
        raise _fail(name, value, f"expected a string of at most {limit} characters or None")
    if len(value) > limit:
        raise _fail(name, value, f"{len(value)} characters, the column holds at most {limit}")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise _fail(name, value, "not encodable as UTF-8 (lone surrogate)") from None
    if "\x00" in value:
        raise _fail(name, value, "contains a NUL character, which databases reject")


def check_text(name: str, value: Any, limit: int) -> None:
    """Raise ``ValueError`` unless ``value`` is text column ``name`` could store: a string
    of at most ``limit`` characters, encodable as UTF-8, without NUL (the rule
    :func:`to_row` applies, for callers that must refuse a value before using it)."""
    _check_text(name, value, limit)


def check_tags(value: Any) -> None:
    """Raise ``ValueError`` unless ``value`` is a ``tags`` dict :func:`to_row` accepts."""
    _tags(value)


def _timestamp(value: Any) -> str:
    if type(value) is dt.datetime and value.tzinfo is dt.UTC:
        # The common case, without a copy: isoformat ends in "+00:00" at UTC, and its
        # year always has four digits, so the naive text is the first 26 characters.
        return value.isoformat(" ", "microseconds")[:26]
    if not isinstance(value, dt.datetime) or value.tzinfo is None or value.utcoffset() is None:
        raise _fail("started_at", value, "expected a timezone-aware datetime")
    if value.tzinfo is not dt.UTC:
        try:
            value = value.astimezone(dt.UTC)
        except OverflowError:  # e.g. datetime.max at UTC-3 is past year 9999 in UTC
            raise _fail("started_at", value, "out of range once converted to UTC") from None
    # The storage format SQLAlchemy's SQLite dialect reads back; PostgreSQL
    # parses it too (the writer's session runs in UTC).
    text: str = value.replace(tzinfo=None).isoformat(" ", "microseconds")
    return text


def _cost(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, Decimal | int):
        raise _fail("cost_usd", value, "expected a Decimal (money is never a float) or None")
    value = Decimal(value)
    if not value.is_finite() or abs(value) >= MAX_COST_USD:
        raise _fail("cost_usd", value, f"expected a finite Decimal below {MAX_COST_USD}")
    return str(value)


def _tags(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _fail("tags", value, "expected a dict of JSON-serialisable labels or None")
    try:
        text = _encode_tags(value)
    except (TypeError, ValueError) as exc:
        raise _fail("tags", value, f"not JSON-serialisable ({exc})") from None
    if len(text) > MAX_TAGS_BYTES:
        raise _fail("tags", value, f"{len(text)} characters of JSON, at most {MAX_TAGS_BYTES}")
    return text


_encode_tags: Callable[[Any], str] = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), allow_nan=False
).encode


def _usage_details(value: Any) -> str | None:
    if value is None:
        return None
    ok = isinstance(value, dict) and all(
        isinstance(part, str)
        and isinstance(split, dict)
        and all(
            isinstance(k, str) and type(n) is int and 0 <= n <= MAX_TOKENS for k, n in split.items()
        )
        for part, split in value.items()
    )
    if not ok:
        raise _fail("usage_details", value, "expected {part: {modality: tokens}} or None")
    text = _encode_tags(value)
    if len(text) > MAX_TAGS_BYTES:
        raise _fail("usage_details", value, f"{len(text)} characters of JSON, too long")
    return text


def to_row(event: UsageEvent) -> tuple[Any, ...]:
    """Validate ``event`` and return its wire row (see the module docstring).

    Raises ``ValueError`` naming the first offending field and its value.
    """
    e = event
    _check_uuid("event_id", e.event_id)
    _check_uuid("call_id", e.call_id)
    for name, limit in _STRING_FIELDS:
        value = getattr(e, name)
        if value is not None:
            _check_text(name, value, limit)
    for name in ("requested_provider", "requested_model", "provider"):
        if not getattr(e, name):
            raise _fail(name, getattr(e, name), "required, expected a non-empty string")
    if e.status not in STATUSES:
        raise _fail("status", e.status, "expected 'ok' or 'error'")
    if e.error_type is not None and e.error_type not in ERROR_TYPES:
        raise _fail("error_type", e.error_type, f"expected one of {sorted(ERROR_TYPES)}")
    if e.cost_source is not None and e.cost_source not in COST_SOURCES:
        raise _fail("cost_source", e.cost_source, f"expected one of {sorted(COST_SOURCES)}")
    if e.cost_source is not None and e.cost_usd is None:
        raise _fail("cost_source", e.cost_source, "set, but cost_usd is None")
    attempt = _check_int("attempt", e.attempt, 0, 32_767)
    http_status = (
        None if e.http_status is None else _check_int("http_status", e.http_status, 100, 599)
    )
    tokens = [_check_int(name, getattr(e, name), 0, MAX_TOKENS) for name in _TOKEN_FIELDS]
    if tokens[2] > tokens[0]:
        raise _fail("cache_read_tokens", tokens[2], f"exceeds input_tokens ({tokens[0]})")
    if tokens[3] > tokens[0]:
        raise _fail("cache_write_tokens", tokens[3], f"exceeds input_tokens ({tokens[0]})")
    flags = []
    for name in ("response_cache_hit", "streamed", "paused", "usage_reported"):
        value = getattr(e, name)
        if not isinstance(value, bool):
            raise _fail(name, value, "expected a bool")
        flags.append(int(value))
    return (
        e.event_id,
        e.call_id,
        attempt,
        _timestamp(e.started_at),
        _check_ms("latency_ms", e.latency_ms),
        _check_ms("ttft_ms", e.ttft_ms),
        e.session_id,
        e.actor_id,
        e.session_key,
        e.requested_provider,
        e.requested_model,
        e.provider,
        e.model,
        e.upstream,
        e.generation_id,
        e.routing_sort,
        e.routing_order,
        e.status,
        e.error_type,
        http_status,
        *tokens,
        _cost(e.cost_usd),
        e.cost_source,
        *flags[:3],
        e.locale,
        _tags(e.tags),
        flags[3],
        _usage_details(e.usage_details),
    )


assert len(dataclasses.fields(UsageEvent)) == len(EVENT_COLUMNS)
