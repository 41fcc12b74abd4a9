"""OpenRouter's generation stats (``GET /api/v1/generation?id=…``), parsed.

The body is ``{"data": {...}}``; the fields used are those OpenRouter documents
and returns (see tests/fixtures/payloads/SOURCES.md): ``total_cost`` (USD, what
the generation was billed), ``cache_discount``, ``upstream_inference_cost``,
``provider_name`` and the ``native_tokens_*`` counts, and ``provider_responses`` (every
upstream OpenRouter's router tried, with its status and latency: the row's
``router_attempts``, :func:`ledger.providers.router_metadata.provider_responses`).
Every other field is kept untouched in :attr:`Generation.raw`; an unknown field is
never an error, and an unreadable ``provider_responses`` is only not known.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Final

from ledger.providers.router_metadata import RouterAttempt, provider_responses

#: The figures stored in the row's ``billing`` JSON, as OpenRouter names them.
BILLING_FIELDS: Final = (
    "cache_discount",
    "upstream_inference_cost",
    "native_tokens_prompt",
    "native_tokens_completion",
    "native_tokens_cached",
    "native_tokens_reasoning",
    "provider_name",
    "model",
)
_MONEY_FIELDS: Final = frozenset({"cache_discount", "upstream_inference_cost"})
_MAX_COST: Final = Decimal(10) ** 9


class BadGeneration(ValueError):
    """The body is not a generation: not JSON, no ``data`` object, or no usable ``total_cost``."""


@dataclass(frozen=True, slots=True)
class Generation:
    id: str
    total_cost: Decimal
    provider_name: str | None
    billing: dict[str, Any]
    raw: dict[str, Any]
    #: The upstreams the router tried, in order (``provider_responses``); None: not given.
    router_attempts: tuple[RouterAttempt, ...] | None = None


def shown(value: Any) -> str:
    """A JSON value as an error message may quote it: short, and never walked when nested
    (repr of a deeply nested list recurses as deep as the parser did)."""
    if isinstance(value, dict | list):
        return "an object" if isinstance(value, dict) else "a list"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _decimal(value: Any) -> Decimal | None:
    if not isinstance(value, int | str | Decimal) or isinstance(value, bool):
        return None
    try:
        number = Decimal(str(value))
    except InvalidOperation:
        return None
    return number if number.is_finite() and abs(number) < _MAX_COST else None


def parse_generation(body: bytes) -> Generation:
    """The generation in ``body``; :class:`BadGeneration` when it is not one."""
    try:
        document = json.loads(body, parse_float=Decimal)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadGeneration(f"not JSON: {exc}") from None
    except RecursionError:  # the parser recurses per level: a hostile body is deep
        raise BadGeneration("JSON nested too deeply to be a generation") from None
    data = document.get("data") if isinstance(document, dict) else None
    if not isinstance(data, dict):
        raise BadGeneration("no 'data' object")
    total = _decimal(data.get("total_cost"))
    if total is None or total < 0:
        raise BadGeneration(f"total_cost {shown(data.get('total_cost'))} is not a cost")
    billing: dict[str, Any] = {}
    for name in BILLING_FIELDS:
        value = data.get(name)
        if name in _MONEY_FIELDS:
            if (number := _decimal(value)) is not None:
                billing[name] = str(number)  # money as exact text, never a float
        elif isinstance(value, str):
            billing[name] = value[:256]
        elif isinstance(value, int) and not isinstance(value, bool):
            billing[name] = value
    provider = data.get("provider_name")
    generation_id = data.get("id")
    return Generation(
        id=generation_id if isinstance(generation_id, str) else "",
        total_cost=total,
        provider_name=provider[:128] if isinstance(provider, str) and provider else None,
        billing=billing,
        raw=data,
        router_attempts=provider_responses(data),
    )
