"""What OpenRouter's router did inside one call: the upstreams it tried, and how each went.

OpenRouter retries a failed upstream against the next one before answering, so a
row names only the upstream that finally served. It exposes its internal attempts
two ways, both read here into the same :class:`RouterAttempt` list:

* **Router metadata** (opt-in per request: header ``X-OpenRouter-Metadata: enabled``;
  ``X-OpenRouter-Experimental-Metadata`` is the legacy name, still accepted). A
  successful response then carries ``openrouter_metadata`` (a non-streamed body's
  top level; a stream's final chunk before ``[DONE]``; Anthropic Messages' terminal
  ``message_stop`` event). Documented in OpenRouterTeam/docs
  ``guides/features/router-metadata.mdx`` and the ``OpenRouterMetadata`` /
  ``RouterAttempt`` schemas of ``openapi/openapi.yaml``:
  ``{"attempt": 1, "attempts": [{"provider": "OpenAI", "model": "openai/gpt-4o-mini",
  "status": 200}], "endpoints": {"total": 1, "available": [{"provider": …, "model": …,
  "selected": true}]}, "strategy": "direct", …}``. Each attempt gives an upstream and
  an HTTP status, **no latency** (none is documented per attempt). ``generation_time``
  (milliseconds from dispatching the upstream request to the end of its body) is
  documented on the Python SDK's ``OpenRouterMetadata`` component page but not in the
  OpenAPI schema or the guide: read when present, never required.
* **The generation record** (``GET /api/v1/generation?id=…``): ``data.provider_responses``,
  "List of provider responses for this generation, including fallback attempts", each
  a ``ProviderResponse`` (``provider_name``, ``status``, ``latency`` in milliseconds,
  plus ``endpoint_id``, ``id``, ``model_permaslug``, ``is_byok``); null when absent.
  The docs do not say what ``latency`` measures for a failed attempt.

The docs call the metadata experimental ("fields … may be added, renamed, removed"),
so these readers are total: anything unexpected gives None (nothing known) or drops
the one entry it cannot read, never an exception. A call must not fail, and a row
must not be lost, over the router's commentary.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

#: The request header that opts in, and its legacy name (the docs' "Legacy Header").
HEADER: Final = "X-OpenRouter-Metadata"
LEGACY_HEADER: Final = "X-OpenRouter-Experimental-Metadata"
ENABLED: Final = "enabled"
#: The response field that carries it.
FIELD: Final = "openrouter_metadata"

#: A router tries a handful of upstreams; more entries than this are not attempts.
MAX_ATTEMPTS: Final = 32
#: The row's ``upstream`` column holds 128 characters; an attempt's upstream the same.
MAX_UPSTREAM: Final = 128


@dataclass(frozen=True, slots=True)
class RouterAttempt:
    """One upstream the router tried for the call, in the order it tried them.

    ``status`` is the HTTP status that upstream answered (200: it served the call);
    ``latency_ms`` its latency when the source gives one (the generation record does,
    router metadata does not). None means not reported, never zero.
    """

    upstream: str | None
    status: int | None
    latency_ms: float | None = None

    def as_json(self) -> dict[str, Any]:
        """The attempt as the row's ``router_attempts`` JSON holds it."""
        return {"upstream": self.upstream, "status": self.status, "latency_ms": self.latency_ms}


@dataclass(frozen=True, slots=True)
class RouterMetadata:
    """The parts of ``openrouter_metadata`` the ledger reads.

    ``attempts`` is None when the metadata does not say who was tried (no ``attempts``
    list and more than one attempt made); ``selected`` is the upstream of the endpoint
    marked ``selected``; ``attempt`` the 1-indexed attempt that succeeded.
    """

    attempts: tuple[RouterAttempt, ...] | None
    selected: str | None
    strategy: str | None
    attempt: int | None
    generation_time_ms: float | None


def _text(value: Any) -> str | None:
    if isinstance(value, str) and value:
        return value[:MAX_UPSTREAM]
    return None


def _int(value: Any) -> int | None:
    if type(value) is int:
        return value
    if type(value) is float and value.is_integer():  # 200.0 from a float-happy encoder
        return int(value)
    return None


def _status(value: Any) -> int | None:
    status = _int(value)
    # An HTTP status, or 0 for "no answer" (a dropped connection); anything else is noise.
    return status if status is not None and 0 <= status <= 599 else None


def _ms(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) and number >= 0 else None


def _selected(endpoints: Any) -> str | None:
    available = endpoints.get("available") if isinstance(endpoints, dict) else None
    if not isinstance(available, list):
        return None
    chosen = [e for e in available if isinstance(e, dict) and e.get("selected") is True]
    return _text(chosen[0].get("provider")) if len(chosen) == 1 else None


def _attempts(items: Sequence[Any], name: str, latency: str | None) -> tuple[RouterAttempt, ...]:
    """The readable entries of a list of attempts (an entry with neither an upstream nor a
    status says nothing and is dropped)."""
    found: list[RouterAttempt] = []
    for item in items[:MAX_ATTEMPTS]:
        if not isinstance(item, dict):
            continue
        upstream, status = _text(item.get(name)), _status(item.get("status"))
        if upstream is None and status is None:
            continue
        found.append(RouterAttempt(upstream, status, _ms(item.get(latency)) if latency else None))
    return tuple(found)


def parse_router_metadata(value: Any) -> RouterMetadata | None:
    """``openrouter_metadata`` (the decoded JSON value) read; None when it is not an object.

    When the ``attempts`` list is absent (the docs: present "when the router retried
    against fallbacks") and ``attempt`` is 1, the first try served: one attempt by the
    selected endpoint, status 200. With ``attempt`` above 1 and no list, earlier tries
    failed at upstreams it does not name: ``attempts`` is None (unknown), so the
    generation record may fill it in later.
    """
    if not isinstance(value, dict):
        return None
    selected = _selected(value.get("endpoints"))
    attempt = _int(value.get("attempt"))
    raw = value.get("attempts")
    attempts: tuple[RouterAttempt, ...] | None = None
    if isinstance(raw, list):
        attempts = _attempts(raw, "provider", None) or None
    elif attempt == 1 and selected is not None:
        attempts = (RouterAttempt(selected, 200),)
    strategy = value.get("strategy")
    return RouterMetadata(
        attempts=attempts,
        selected=selected,
        strategy=strategy[:64] if isinstance(strategy, str) and strategy else None,
        attempt=attempt,
        generation_time_ms=_ms(value.get("generation_time")),
    )


def attempts_in(document: Any) -> tuple[RouterAttempt, ...] | None:
    """The router's attempts in a response body or stream event that may carry
    ``openrouter_metadata`` (at its top level, or, for a Responses API event, in its
    ``response`` object); None when it carries none or says nothing readable."""
    if not isinstance(document, dict):
        return None
    value = document.get(FIELD)
    if value is None:
        inner = document.get("response")
        value = inner.get(FIELD) if isinstance(inner, dict) else None
    metadata = parse_router_metadata(value)
    return metadata.attempts if metadata is not None else None


def provider_responses(data: Any) -> tuple[RouterAttempt, ...] | None:
    """The attempts in a generation record's ``data`` (``provider_responses``); None when
    absent, null, or without a readable entry."""
    raw = data.get("provider_responses") if isinstance(data, dict) else None
    if not isinstance(raw, list):
        return None
    return _attempts(raw, "provider_name", "latency") or None


def as_column(attempts: Sequence[RouterAttempt] | None) -> list[dict[str, Any]] | None:
    """``attempts`` as the row's ``router_attempts`` value (None: not known)."""
    return [a.as_json() for a in attempts] if attempts else None
