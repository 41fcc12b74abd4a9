"""The providers' organisation cost and usage reports, parsed (pure: bytes in, lines out).

Four endpoints, one shape each (field names as the providers document them; the
fixtures and where they came from are in tests/fixtures/payloads/SOURCES.md):

* OpenAI ``GET /v1/organization/costs``: daily buckets (``start_time`` in Unix
  seconds) of ``results`` with ``amount.value`` in USD, ``line_item`` (when
  grouped by it; its text before the first comma names the model, e.g.
  ``"gpt-4o-2024-08-06, input"``) and ``project_id``.
* OpenAI ``GET /v1/organization/usage/completions``: buckets of ``input_tokens``
  (cached included), ``input_cached_tokens``, ``output_tokens``,
  ``num_model_requests`` by ``model`` / ``project_id`` / ``api_key_id``.
* Anthropic ``GET /v1/organizations/cost_report``: buckets (``starting_at``,
  RFC 3339) of ``amount`` as a decimal string in **cents**, with ``model``
  (grouped by ``description``) and ``workspace_id``.
* Anthropic ``GET /v1/organizations/usage_report/messages``: buckets of
  ``uncached_input_tokens``, ``cache_creation.ephemeral_{5m,1h}_input_tokens``,
  ``cache_read_input_tokens``, ``output_tokens`` by ``model`` / ``workspace_id``
  / ``api_key_id``.

Every page says ``has_more`` and ``next_page`` (the cursor sent back as ``page``).
Unknown fields are ignored, never fatal; a page that is not one of these
(:class:`BadReport`) stops the run. Money is ``Decimal`` from the JSON text.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Final, Generic, TypeVar

from ledger.reconcile.generation import shown

_MAX_USD: Final = Decimal(10) ** 12
_CENTS: Final = Decimal(100)
#: A dated snapshot suffix (``-2024-08-06``, ``-20250514``): the report and the
#: ledger may name the same model with or without it.
_SNAPSHOT: Final = re.compile(r"-(\d{4}-\d{2}-\d{2}|\d{8})$")


class BadReport(ValueError):
    """A page is not the report it should be (not JSON, no ``data`` list, a bad amount)."""


def model_key(model: str | None) -> str | None:
    """The name a report line and a ledger row are matched by: lower case, no
    ``provider/`` prefix, no dated snapshot suffix."""
    if not model:
        return None
    name = model.strip().lower().rsplit("/", 1)[-1]
    return _SNAPSHOT.sub("", name) or None


@dataclass(frozen=True, slots=True)
class BilledCost:
    """One cost line: what the provider billed one day (for a model, in a scope)."""

    day: dt.date
    model: str | None  # None: not a model's tokens (tools, storage) or not grouped by model
    scope: str | None  # OpenAI project_id / Anthropic workspace_id, when grouped by it
    cost_usd: Decimal
    item: str | None  # the provider's own name for the line (line_item / description)


@dataclass(frozen=True, slots=True)
class BilledTokens:
    """One usage line: the tokens the provider counted one day for a model, in a scope."""

    day: dt.date
    model: str | None
    scope: str | None
    requests: int | None
    input_tokens: int  # all prompt tokens, cache reads and writes included (as the ledger)
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int


Line = TypeVar("Line", BilledCost, BilledTokens)


@dataclass(frozen=True, slots=True)
class Page(Generic[Line]):
    lines: list[Line]
    next_page: str | None


def _document(body: bytes) -> dict[str, Any]:
    try:
        document = json.loads(body, parse_float=Decimal)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadReport(f"not JSON: {exc}") from None
    except RecursionError:  # the parser recurses per level: a hostile page is deep
        raise BadReport("JSON nested too deeply to be a report") from None
    if not isinstance(document, dict) or not isinstance(document.get("data"), list):
        raise BadReport("no 'data' list of buckets")
    return document


def _next(document: dict[str, Any]) -> str | None:
    cursor = document.get("next_page")
    if document.get("has_more") and isinstance(cursor, str) and cursor:
        return cursor
    return None


def _text(value: Any) -> str | None:
    return value[:256] if isinstance(value, str) and value else None


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _money(value: Any, what: str) -> Decimal:
    # Numbers and text only: str() of a nested list walks it as deep as the parser did.
    if not isinstance(value, int | str | Decimal) or isinstance(value, bool):
        raise BadReport(f"{what} {shown(value)} is not an amount")
    try:
        number = Decimal(str(value))
    except InvalidOperation:
        raise BadReport(f"{what} {shown(value)} is not an amount") from None
    if not number.is_finite() or abs(number) >= _MAX_USD:
        raise BadReport(f"{what} {shown(value)} is not an amount")
    return number


def _unix_day(bucket: dict[str, Any]) -> dt.date:
    start = bucket.get("start_time")
    if not isinstance(start, int) or isinstance(start, bool):
        raise BadReport(f"bucket start_time {shown(start)} is not Unix seconds")
    return dt.datetime.fromtimestamp(start, dt.UTC).date()


def _rfc3339_day(bucket: dict[str, Any]) -> dt.date:
    start = bucket.get("starting_at")
    try:
        when = dt.datetime.fromisoformat(str(start).replace("Z", "+00:00"))
    except ValueError:
        raise BadReport(f"bucket starting_at {shown(start)} is not an RFC 3339 time") from None
    return (when if when.tzinfo else when.replace(tzinfo=dt.UTC)).astimezone(dt.UTC).date()


def _results(bucket: Any) -> list[dict[str, Any]]:
    if not isinstance(bucket, dict):
        raise BadReport("a bucket is not an object")
    # "results" in the API reference's examples; some spec versions name it "result".
    items = bucket.get("results", bucket.get("result", []))
    if not isinstance(items, list):
        raise BadReport("a bucket's results are not a list")
    return [item for item in items if isinstance(item, dict)]


def _page(
    body: bytes,
    day_of: Callable[[dict[str, Any]], dt.date],
    line_of: Callable[[dt.date, dict[str, Any]], Line | None],
) -> Page[Line]:
    document = _document(body)
    lines: list[Line] = []
    for bucket in document["data"]:
        items = _results(bucket)
        day = day_of(bucket)
        lines.extend(line for item in items if (line := line_of(day, item)) is not None)
    return Page(lines, _next(document))


def _openai_cost(day: dt.date, item: dict[str, Any]) -> BilledCost:
    amount = item.get("amount")
    if not isinstance(amount, dict):
        raise BadReport(f"amount {shown(amount)} is not an object")
    currency = str(amount.get("currency") or "usd").lower()
    if currency != "usd":
        raise BadReport(f"currency {shown(currency)}: only USD bills can be compared")
    line_item = _text(item.get("line_item"))
    model = line_item.split(",", 1)[0].strip() if line_item else None
    return BilledCost(
        day, model, _text(item.get("project_id")), _money(amount.get("value"), "amount"), line_item
    )


def _openai_tokens(day: dt.date, item: dict[str, Any]) -> BilledTokens:
    requests = item.get("num_model_requests")
    return BilledTokens(
        day,
        _text(item.get("model")),
        _text(item.get("project_id")),
        requests if isinstance(requests, int) and not isinstance(requests, bool) else None,
        input_tokens=_count(item.get("input_tokens")),
        output_tokens=_count(item.get("output_tokens")),
        cache_read_tokens=_count(item.get("input_cached_tokens")),
        cache_write_tokens=0,  # OpenAI reports no cache writes
    )


def _anthropic_cost(day: dt.date, item: dict[str, Any]) -> BilledCost:
    currency = str(item.get("currency") or "USD").upper()
    if currency != "USD":
        raise BadReport(f"currency {shown(currency)}: only USD bills can be compared")
    cents = _money(item.get("amount"), "amount")
    return BilledCost(
        day,
        _text(item.get("model")),
        _text(item.get("workspace_id")),
        cents / _CENTS,  # the report's amounts are in cents: "123.45" is $1.2345
        _text(item.get("description")),
    )


def _anthropic_tokens(day: dt.date, item: dict[str, Any]) -> BilledTokens:
    creation = item.get("cache_creation")
    writes = (
        _count(creation.get("ephemeral_5m_input_tokens"))
        + _count(creation.get("ephemeral_1h_input_tokens"))
        if isinstance(creation, dict)
        else 0
    )
    reads = _count(item.get("cache_read_input_tokens"))
    return BilledTokens(
        day,
        _text(item.get("model")),
        _text(item.get("workspace_id")),
        None,  # the messages usage report counts tokens, not requests
        input_tokens=_count(item.get("uncached_input_tokens")) + writes + reads,
        output_tokens=_count(item.get("output_tokens")),
        cache_read_tokens=reads,
        cache_write_tokens=writes,
    )


def parse_openai_costs(body: bytes) -> Page[BilledCost]:
    return _page(body, _unix_day, _openai_cost)


def parse_openai_usage(body: bytes) -> Page[BilledTokens]:
    return _page(body, _unix_day, _openai_tokens)


def parse_anthropic_costs(body: bytes) -> Page[BilledCost]:
    return _page(body, _rfc3339_day, _anthropic_cost)


def parse_anthropic_usage(body: bytes) -> Page[BilledTokens]:
    return _page(body, _rfc3339_day, _anthropic_tokens)
