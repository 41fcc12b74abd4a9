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
import math
import operator
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Annotated, Any, Final, Literal, Protocol

import msgspec

from ledger.compact_json import compact_encoder
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
    "interrupted",
]
CostSource = Literal["provider", "computed", "incomplete"]
#: The arm of a routing policy's experiment a session was assigned to (ledger.policies).
Arm = Literal["treatment", "holdout"]
ARMS: Final = frozenset({"treatment", "holdout"})

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
        "interrupted",
    }
)
#: The ``error_type`` of a streamed attempt the caller stopped reading before it
#: ended: an ``error`` row (its usage is partial, so it is no served attempt),
#: but not the provider's failure (see the README's "What a row says").
ABANDONED: Final[ErrorType] = "abandoned"
#: The ``error_type`` of an attempt whose process ended after sending it and before
#: recording its outcome: journaled when it started, stored by replay
#: (:meth:`ledger.store.ledger.Ledger.begin_attempt`). What it cost is unknown, not zero.
INTERRUPTED: Final[ErrorType] = "interrupted"
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
_INF: Final = math.inf


def new_id() -> str:
    """A fresh UUID4 in its canonical 36-character form.

    ``str(uuid.uuid4())`` builds a 128-bit int and a UUID object on the way (~6 µs,
    twice per client call); this sets the same version and variant bits on the
    same random bits and formats their hex directly. The random bytes are read
    from ``os.urandom`` for :data:`_ID_BATCH` ids at a time (one system call, not
    two per client call); a forked child drops the parent's unused ones, so no
    two processes ever hand out the same id.
    """
    try:
        return _spare_ids.pop()  # atomic: two threads never take the same id
    except IndexError:
        return _new_ids()


_ID_BATCH: Final = 64
_spare_ids: list[str] = []
os.register_at_fork(after_in_child=_spare_ids.clear)


def _new_ids() -> str:
    """Fill the spare ids with a batch of fresh ones; return one more."""
    h = os.urandom(16 * (_ID_BATCH + 1)).hex()
    ids = [
        # The version nibble (hex digit 12) becomes 4; the variant's top bits (digit 16)
        # become 10, keeping its two low bits: the bits uuid4() sets, the same way.
        f"{h[i : i + 8]}-{h[i + 8 : i + 12]}-4{h[i + 13 : i + 16]}-"
        f"{_VARIANT[h[i + 16]]}{h[i + 17 : i + 20]}-{h[i + 20 : i + 32]}"
        for i in range(0, len(h), 32)
    ]
    first = ids.pop()
    _spare_ids.extend(ids)
    return first


#: The hex digit with the RFC 4122 variant bits (10xx) set on the digit's two low bits.
_VARIANT: Final = {d: "89ab"[int(d, 16) & 3] for d in "0123456789abcdef"}


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
    policy_id: int | None = None
    arm: Arm | None = None
    #: The upstreams an aggregator's router tried inside this attempt, in order:
    #: ``[{"upstream": str | None, "status": int | None, "latency_ms": float | None}]``
    #: (OpenRouter's router metadata); None when not known.
    router_attempts: list[dict[str, Any]] | None = None
    # What the OpenTelemetry mirror describes and the table does not hold (never stored,
    # so a row read back from the database has them None; the exporter then falls back).
    #: The model this attempt asked its provider for: its route's, which on a fallback
    #: is not the chain's first (``requested_model``); None when it is ``requested_model``.
    attempt_model: str | None = None
    #: The API base URL the attempt was sent to (OTel ``server.address``/``server.port``).
    base_url: str | None = None
    #: Why the response ended, in the provider's words (``stop``, ``end_turn``...).
    finish_reason: str | None = None

    def replace(self, **changes: Any) -> UsageEvent:
        """A copy with ``changes`` applied (a new ``event_id`` is not implied)."""
        return dataclasses.replace(self, **changes)


class InvalidField(ValueError):
    """A field of a :class:`UsageEvent` the ledger cannot store: ``field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class Recorder(Protocol):
    """Where rows go: :class:`ledger.store.ledger.Ledger` or anything with its ``record``."""

    def record(self, event: UsageEvent) -> str: ...


def _fail(name: str, value: Any, expected: str) -> InvalidField:
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return InvalidField(name, f"UsageEvent.{name} = {shown}: {expected}")


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


def _plain_ms(value: Any) -> bool:
    """The usual milliseconds (a finite, non-negative float): :func:`_check_ms` would
    return it unchanged."""
    return type(value) is float and 0 <= value < _INF


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


def _utc_text(value: dt.datetime) -> str:
    """The wire text of a datetime at ``dt.UTC``: ``YYYY-MM-DD HH:MM:SS.ffffff``."""
    # msgspec writes it as RFC 3339 in 0.07 us ('"2026-11-30T01:02:03.456789Z"',
    # quotes included); isoformat takes 1.7 us, a sixth of to_row. Its text drops a
    # zero fraction, so any other length takes isoformat (same text, by a test).
    quoted = _encode_json(value)
    if len(quoted) == 29:
        return (quoted[1:11] + b" " + quoted[12:27]).decode()
    return value.isoformat(" ", "microseconds")[:-6]


def _timestamp(value: Any) -> str:
    if type(value) is dt.datetime and value.tzinfo is dt.UTC:
        return _utc_text(value)  # the usual value: the clock's now()
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
    if type(value) is Decimal and value.is_finite() and -MAX_COST_USD < value < MAX_COST_USD:
        return str(value)
    if isinstance(value, bool) or not isinstance(value, Decimal | int):
        raise _fail("cost_usd", value, "expected a Decimal (money is never a float) or None")
    value = Decimal(value)
    if not value.is_finite() or abs(value) >= MAX_COST_USD:
        raise _fail("cost_usd", value, f"expected a finite Decimal below {MAX_COST_USD}")
    return str(value)


def _tags(value: Any) -> str | None:
    if value is None:
        return None
    if _flat_labels(value):
        text = _encode_plain(value)  # the usual tags: JSON as _encode_tags writes it
        if len(text) <= MAX_TAGS_BYTES:
            return text
    if not isinstance(value, dict):
        raise _fail("tags", value, "expected a dict of JSON-serialisable labels or None")
    try:
        text = _encode_tags(value)
    except (TypeError, ValueError) as exc:
        raise _fail("tags", value, f"not JSON-serialisable ({exc})") from None
    if len(text) > MAX_TAGS_BYTES:
        raise _fail("tags", value, f"{len(text)} characters of JSON, at most {MAX_TAGS_BYTES}")
    return text


_encode_tags: Final = compact_encoder(allow_nan=False, check_circular=True)


def _usage_details(value: Any) -> str | None:
    if value is None:
        return None
    if _plain_details(value):
        text = _encode_plain(value)
    else:
        ok = isinstance(value, dict) and all(
            isinstance(part, str)
            and isinstance(split, dict)
            and all(
                isinstance(k, str) and type(n) is int and 0 <= n <= MAX_TOKENS
                for k, n in split.items()
            )
            for part, split in value.items()
        )
        if not ok:
            raise _fail("usage_details", value, "expected {part: {modality: tokens}} or None")
        text = _encode_tags(value)
    if len(text) > MAX_TAGS_BYTES:
        raise _fail("usage_details", value, f"{len(text)} characters of JSON, too long")
    return text


#: A router tries a handful of upstreams; a longer list is no list of attempts.
MAX_ROUTER_ATTEMPTS: Final = 32
_ATTEMPT_KEYS: Final = ("upstream", "status", "latency_ms")


def _router_attempt(item: Any) -> bool:
    if type(item) is not dict or tuple(item) != _ATTEMPT_KEYS:
        return False
    upstream, status, latency = item["upstream"], item["status"], item["latency_ms"]
    return (
        (upstream is None or (type(upstream) is str and len(upstream) <= STRING_LIMITS["upstream"]))
        and (status is None or (type(status) is int and 0 <= status <= 599))
        and (latency is None or (type(latency) is float and 0 <= latency < _INF))
    )


def _router_attempts(value: Any) -> str | None:
    if value is None:
        return None
    if (
        type(value) is not list
        or not 0 < len(value) <= MAX_ROUTER_ATTEMPTS
        or not all(map(_router_attempt, value))
    ):
        raise _fail(
            "router_attempts",
            value,
            f"expected 1 to {MAX_ROUTER_ATTEMPTS} of {{'upstream': str | None, "
            "'status': int | None, 'latency_ms': float | None}, or None",
        )
    try:
        return _encode_json(value).decode()
    except UnicodeEncodeError:  # a lone surrogate in an upstream's name
        raise _fail("router_attempts", value, "not encodable as UTF-8") from None


_encode_json: Final = msgspec.json.Encoder().encode
_encode_compact: Final = compact_encoder(allow_nan=False)


def _encode_plain(value: dict[str, Any]) -> str:
    """JSON of a value _plain_details or _flat_labels accepted, as ``_encode_tags``
    writes it: msgspec's text is json's compact text for these (dicts of str, int, bool
    and None; no cycle), at a quarter of the cost, except for a lone surrogate, which
    msgspec refuses and json keeps."""
    try:
        return _encode_json(value).decode()
    except UnicodeEncodeError:
        return _encode_compact(value)


_LABEL_TYPES: Final = frozenset({str, int, bool, type(None)})
_STR: Final = frozenset({str})


def _flat_labels(value: Any) -> bool:
    """``value`` is a dict of str keys and str, int, bool or None values (the usual
    tags): :func:`_encode_plain` encodes it exactly as ``_encode_tags`` (no float, so
    no NaN to refuse; no container, so no cycle; an int of any size is JSON)."""
    return (
        type(value) is dict
        and _STR.issuperset(map(type, value))
        and _LABEL_TYPES.issuperset(map(type, value.values()))
    )


def _plain_details(value: Any) -> bool:
    """``value`` is ``{part: {modality: tokens}}`` of exact dicts, strs and ints in range:
    the check below for the usual value, as plain loops (nested ``all()`` generators
    cost more than the JSON encoding)."""
    if type(value) is not dict:
        return False
    for part, split in value.items():
        if type(part) is not str or type(split) is not dict:
            return False
        for modality, tokens in split.items():
            if type(modality) is not str or type(tokens) is not int:
                return False
            if not 0 <= tokens <= MAX_TOKENS:
                return False
    return True


#: Field readers for :func:`to_row`: one C call each instead of a ``getattr`` per field.
_STRING_NAMES: Final = tuple(STRING_LIMITS)
_STRING_LIMITS: Final = tuple(STRING_LIMITS.values())
_strings: Final = operator.attrgetter(*_STRING_NAMES)
_tokens: Final = operator.attrgetter(*_TOKEN_FIELDS)
_FLAG_FIELDS: Final = ("response_cache_hit", "streamed", "paused", "usage_reported")
_flags: Final = operator.attrgetter(*_FLAG_FIELDS)


def to_row(event: UsageEvent) -> tuple[Any, ...]:
    """Validate ``event`` and return its wire row (see the module docstring).

    Raises ``ValueError`` naming the first offending field and its value.
    """
    # Every recorded attempt passes here, on the caller's thread: the usual event is
    # checked by msgspec in C (_Usual), at about half the cost of the checks below in
    # Python. Anything _Usual or the few checks after it do not pass, good or bad, takes
    # _checked_row, which holds each rule and its message; the two give the same row.
    try:
        usual = _convert(event, _Usual, from_attributes=True)
    except msgspec.ValidationError:
        return _checked_row(event)
    row = list(_astuple(usual))
    ts, latency, ttft, tokens = row[3], row[4], row[5], row[20]
    text = "".join(filter(None, _free_text(row)))
    if not (
        text.isascii()
        and "\x00" not in text
        and type(ts) is dt.datetime
        and ts.tzinfo is dt.UTC
        and (latency is None or latency < _INF)
        and (ttft is None or ttft < _INF)
        and row[22] <= tokens  # cache_read_tokens
        and row[23] <= tokens  # cache_write_tokens
        and (row[26] is None or row[25] is not None)  # cost_source only with a cost
        and _UUID.fullmatch(row[0])
        and _UUID.fullmatch(row[1])
    ):
        return _checked_row(event)
    row[3] = _utc_text(ts)
    row[25] = _cost(row[25])
    for i in _FLAG_POSITIONS:
        row[i] = 1 if row[i] else 0
    row[31] = _tags(row[31])
    row[33] = _usage_details(row[33])
    if row[36] is not None:
        row[36] = _router_attempts(row[36])
    return tuple(row)


#: The tag on the row of a completed attempt some of whose values the ledger could not
#: store as they came: the fields cut to their column's size, cleaned or dropped, comma
#: separated (e.g. ``"model,generation_id"``). See :func:`recordable`.
REPAIRED_TAG: Final = "ledger_repaired"
#: What :func:`recordable` puts in a required text field that came empty or not text.
UNKNOWN: Final = "unknown"
#: Fields whose value comes from outside the caller's hands (the provider's answer, an
#: SDK's request) and that :func:`recordable` may set to None when no value fits.
_DROPPABLE: Final = frozenset(
    {
        *("latency_ms", "ttft_ms", "http_status", "cost_usd", "cost_source", "tags"),
        *("usage_details", "router_attempts"),
    }
)
_NOT_FREE_TEXT: Final = frozenset({"event_id", "call_id", "status", "error_type", "cost_source"})


#: What is known of an attempt when it is sent: the fields ``Ledger.begin_attempt``
#: journals, from which replay makes the row of an attempt never recorded.
SENT_FIELDS: Final = (
    "event_id",
    "call_id",
    "attempt",
    "started_at",
    "session_id",
    "actor_id",
    "session_key",
    "requested_provider",
    "requested_model",
    "provider",
    "routing_sort",
    "routing_order",
    "streamed",
    "paused",
    "locale",
    "tags",
    "policy_id",
    "arm",
)
sent_values: Final = operator.attrgetter(*SENT_FIELDS)


def interrupted_row(sent: Mapping[str, Any]) -> tuple[Any, ...]:
    """The wire row of an attempt journaled as it was sent (``sent``: its
    :data:`SENT_FIELDS`, ``started_at`` as RFC 3339 text) and never recorded: an
    ``error`` of type ``interrupted``, usage and cost unknown. A value its row cannot
    hold is repaired and named (:func:`recordable`); ``ValueError`` for a caller's bug."""
    fields: dict[str, Any] = {name: sent[name] for name in SENT_FIELDS if name in sent}
    fields["started_at"] = dt.datetime.fromisoformat(str(fields["started_at"]))
    event = UsageEvent(**fields, status="error", error_type=INTERRUPTED, usage_reported=False)
    return to_row(recordable(event))


def recordable(event: UsageEvent) -> UsageEvent:
    """``event`` as the ledger can store it, for an attempt that happened (it was paid for:
    its row must not be lost to one value). Unchanged when :func:`to_row` takes it; else a
    copy with each offending field repaired and named in the :data:`REPAIRED_TAG` tag:
    text cut to its column's size (a NUL removed, a lone surrogate replaced; an empty
    required one becomes :data:`UNKNOWN`), token counts brought into range, and a value
    no column can hold (a cost past ``numeric(20, 10)``, tags or usage details past
    16 KB of JSON, a negative latency) dropped. The tag replaces the tags when they are
    what cannot be stored. Raises the :class:`InvalidField` of :func:`to_row` for what
    is no outside value (ids, status, flags, ``started_at``): a caller's bug.
    """
    try:
        to_row(event)
        return event
    except InvalidField as exc:
        error = exc
    changes: dict[str, Any] = {}
    while True:
        name = error.field
        value = _repaired(event, name, changes)
        if name in changes or value is _NO_REPAIR:
            raise error  # a caller's bug, or repaired once and still refused
        changes[name] = value
        tags = {} if "tags" in changes else (event.tags or {})
        marker = {REPAIRED_TAG: ",".join(changes)}
        candidate = dataclasses.replace(event, **{**changes, "tags": {**tags, **marker}})
        try:
            to_row(candidate)
            return candidate
        except InvalidField as exc:
            error = exc


def _repaired(event: UsageEvent, name: str, changes: dict[str, Any]) -> Any:
    """A value field ``name`` can store, or :data:`_NO_REPAIR` for a field that holds no
    outside value."""
    value = getattr(event, name)
    if name in _TOKEN_FIELDS:
        count = value if type(value) is int else 0
        count = min(max(count, 0), MAX_TOKENS)
        if name in ("cache_read_tokens", "cache_write_tokens"):
            count = min(count, changes.get("input_tokens", event.input_tokens))
        return count
    if name == "attempt" and type(value) is int:
        return min(max(value, 0), 32_767)
    if name in _DROPPABLE:
        return None
    if name in STRING_LIMITS and name not in _NOT_FREE_TEXT:
        text = value if isinstance(value, str) else ""
        text = text.encode("utf-8", "replace").decode("utf-8").replace("\x00", "")
        text = text[: STRING_LIMITS[name]]
        if name in _REQUIRED_TEXT:
            return text or UNKNOWN
        return text or None
    return _NO_REPAIR


_NO_REPAIR: Final = object()


def _checked_row(event: UsageEvent) -> tuple[Any, ...]:
    """:func:`to_row`, every rule checked in Python: the message for a bad value, and
    the row for a good one the usual path does not take (a non-UTC timestamp, say)."""
    # Each check tests the common value inline (short ASCII text, an int in range, a UTC
    # datetime) and calls the checker, which holds the rule and its message, only for
    # anything else.
    e = event
    _check_uuid("event_id", e.event_id)
    _check_uuid("call_id", e.call_id)
    for name, limit, value in zip(_STRING_NAMES, _STRING_LIMITS, _strings(e), strict=True):
        if value is not None and not (
            type(value) is str and len(value) <= limit and value.isascii() and "\x00" not in value
        ):
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
    if e.arm is not None and e.arm not in ARMS:
        raise _fail("arm", e.arm, f"expected one of {sorted(ARMS)}")
    if e.policy_id is not None:
        _check_int("policy_id", e.policy_id, 1, MAX_TOKENS)
    attempt = _check_int("attempt", e.attempt, 0, 32_767)
    http_status = e.http_status
    if http_status is not None and not (type(http_status) is int and 100 <= http_status <= 599):
        _check_int("http_status", http_status, 100, 599)
    tokens = _tokens(e)
    for name, value in zip(_TOKEN_FIELDS, tokens, strict=True):
        if type(value) is not int or not 0 <= value <= MAX_TOKENS:
            _check_int(name, value, 0, MAX_TOKENS)
    if tokens[2] > tokens[0]:
        raise _fail("cache_read_tokens", tokens[2], f"exceeds input_tokens ({tokens[0]})")
    if tokens[3] > tokens[0]:
        raise _fail("cache_write_tokens", tokens[3], f"exceeds input_tokens ({tokens[0]})")
    flags = _flags(e)
    for name, value in zip(_FLAG_FIELDS, flags, strict=True):
        if type(value) is not bool:  # bool cannot be subclassed: the same as isinstance
            raise _fail(name, value, "expected a bool")
    latency, ttft = e.latency_ms, e.ttft_ms
    return (
        e.event_id,
        e.call_id,
        attempt,
        _timestamp(e.started_at),
        latency if _plain_ms(latency) else _check_ms("latency_ms", latency),
        ttft if _plain_ms(ttft) else _check_ms("ttft_ms", ttft),
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
        int(flags[0]),
        int(flags[1]),
        int(flags[2]),
        e.locale,
        _tags(e.tags),
        int(flags[3]),
        _usage_details(e.usage_details),
        e.policy_id,
        e.arm,
        _router_attempts(e.router_attempts),
    )


#: The fields only the OpenTelemetry mirror reads: the table has no column for them.
MIRROR_ONLY: Final = frozenset({"attempt_model", "base_url", "finish_reason"})
assert {f.name for f in dataclasses.fields(UsageEvent)} - MIRROR_ONLY == set(EVENT_COLUMNS)


_REQUIRED_TEXT: Final = ("requested_provider", "requested_model", "provider")
_CHOICES: Final = {
    "status": STATUSES,
    "error_type": ERROR_TYPES,
    "cost_source": COST_SOURCES,
    "arm": ARMS,
}
_TOKEN_COUNT: Final = Annotated[int, msgspec.Meta(ge=0, le=MAX_TOKENS)]
_MILLISECONDS: Final = Annotated[float, msgspec.Meta(ge=0)] | None
_OTHER_FIELDS: Final[dict[str, Any]] = {
    "attempt": Annotated[int, msgspec.Meta(ge=0, le=32_767)],
    "started_at": Annotated[dt.datetime, msgspec.Meta(tz=True)],
    "latency_ms": _MILLISECONDS,
    "ttft_ms": _MILLISECONDS,
    "http_status": Annotated[int, msgspec.Meta(ge=100, le=599)] | None,
    "policy_id": Annotated[int, msgspec.Meta(ge=1, le=MAX_TOKENS)] | None,
    **dict.fromkeys(_TOKEN_FIELDS, _TOKEN_COUNT),
    **dict.fromkeys(_FLAG_FIELDS, bool),
}


def _usual_field(name: str) -> Any:
    """The type :class:`_Usual` checks field ``name`` against: the rules of
    :func:`_checked_row` that msgspec can state. Cost, tags and usage details stay
    with the functions that hold their rules."""
    if name not in STRING_LIMITS:
        return _OTHER_FIELDS.get(name, Any)
    if name in _CHOICES:
        text: Any = Literal[tuple(sorted(_CHOICES[name]))]
    else:
        low = 1 if name in _REQUIRED_TEXT else 0
        text = Annotated[str, msgspec.Meta(min_length=low, max_length=STRING_LIMITS[name])]
    if name in ("event_id", "call_id", "status", *_REQUIRED_TEXT):
        return text
    return text | None


#: The usual event, read by msgspec from a UsageEvent's attributes in EVENT_COLUMNS order
#: (strict: a bool is no int, an int no bool; an int latency becomes a float, as in
#: _check_ms).
_Usual: Final = msgspec.defstruct(
    "_Usual", [(str(name), _usual_field(name)) for name in EVENT_COLUMNS], frozen=True
)
_convert: Final = msgspec.convert
_astuple: Final = msgspec.structs.astuple
#: The wire row's free text: ids, session .. routing fields, locale (status, error_type
#: and cost_source are literals _Usual checked).
_free_text: Final = operator.itemgetter(
    0,
    1,
    *range(EVENT_COLUMNS.index("session_id"), EVENT_COLUMNS.index("status")),
    EVENT_COLUMNS.index("locale"),
)
_FLAG_POSITIONS: Final = tuple(EVENT_COLUMNS.index(name) for name in _FLAG_FIELDS)
# to_row's usual path indexes the row by literal positions (a constant index costs
# less than a global lookup on every event); they must stay the columns' places.
assert [EVENT_COLUMNS.index(name) for name in (
    "event_id", "call_id", "started_at", "latency_ms", "ttft_ms", "input_tokens",
    "cache_read_tokens", "cache_write_tokens", "cost_usd", "cost_source", "tags",
    "usage_details", "router_attempts",
)] == [0, 1, 3, 4, 5, 20, 22, 23, 25, 26, 31, 33, 36]  # fmt: skip
