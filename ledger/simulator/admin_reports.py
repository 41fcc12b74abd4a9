"""What the simulated OpenAI and Anthropic organisations billed: their admin cost and usage reports.

Every completion the simulator serves on its OpenAI or Anthropic endpoint is
added to a daily tally (UTC day of the simulator's clock × model × account);
the four report endpoints answer from those tallies in the providers'
documented shapes (tests/fixtures/payloads/SOURCES.md), so
``ledger reconcile openai|anthropic`` runs offline:

* ``GET /v1/organization/costs`` and ``/v1/organization/usage/completions``
  (OpenAI: Unix-second buckets, ``amount.value`` in USD, line items
  ``"<model>, input"`` / ``"<model>, output"``, ``project_id`` and ``api_key_id``
  derived from the caller's account);
* ``GET /v1/organizations/cost_report`` and ``/v1/organizations/usage_report/messages``
  (Anthropic: RFC 3339 buckets, ``amount`` in cents as a decimal string,
  ``workspace_id`` / ``api_key_id`` from the account).

Daily buckets only, ``limit`` buckets a page with a ``next_page`` cursor and
``has_more``; ``group_by`` is honoured for the dimensions listed above.
``discrepancy_rate``: the share of completions billed ``discrepancy`` above what
was served (the bill moved after the fact), so a check has drift to find.
Bounded: tallies older than ``retain_days`` before the newest are dropped.
"""

from __future__ import annotations

import base64
import datetime as dt
import random
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final, Protocol
from urllib.parse import parse_qs

from ledger.simulator.clock import Clock
from ledger.simulator.wire.common import JSON_TYPE, Reply, dumps

_QUANTUM: Final = Decimal("1e-10")
_DAY: Final = dt.timedelta(days=1)


class ServedUsage(Protocol):
    """The usage of a served completion (the simulator's ``Usage``)."""

    @property
    def prompt_tokens(self) -> int: ...
    @property
    def completion_tokens(self) -> int: ...
    @property
    def cached_tokens(self) -> int: ...
    @property
    def cache_write_tokens(self) -> int: ...
    @property
    def prompt_cost(self) -> Decimal: ...
    @property
    def completion_cost(self) -> Decimal: ...


@dataclass(slots=True)
class Tally:
    """One day of one model for one account."""

    requests: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    input_cost: Decimal = Decimal(0)
    output_cost: Decimal = Decimal(0)

    def add(self, other: Tally) -> None:
        self.requests += other.requests
        self.prompt_tokens += other.prompt_tokens
        self.cached_tokens += other.cached_tokens
        self.cache_write_tokens += other.cache_write_tokens
        self.output_tokens += other.output_tokens
        self.input_cost += other.input_cost
        self.output_cost += other.output_cost


Key = tuple[str, dt.date, str, str]  # service, day, model, account


class ReportStore:
    """Daily tallies of what the OpenAI and Anthropic endpoints served."""

    def __init__(
        self,
        clock: Clock,
        *,
        discrepancy_rate: float = 0.0,
        discrepancy: Decimal = Decimal("0.05"),
        seed: int = 0,
        retain_days: int = 400,
    ) -> None:
        self.clock = clock
        self.discrepancy_rate = discrepancy_rate
        self.discrepancy = discrepancy
        self.retain_days = retain_days
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._tallies: dict[Key, Tally] = {}

    def record(
        self, service: str, account: str, model: str, created: int, usage: ServedUsage
    ) -> None:
        """Add one served completion to its day's tally, billed as it will be."""
        day = dt.datetime.fromtimestamp(created, dt.UTC).date()
        with self._lock:
            off = self.discrepancy_rate and self._rng.random() < self.discrepancy_rate
            factor = 1 + self.discrepancy if off else Decimal(1)
            tally = self._tallies.setdefault((service, day, model, account), Tally())
            tally.add(
                Tally(
                    1,
                    usage.prompt_tokens,
                    usage.cached_tokens,
                    usage.cache_write_tokens,
                    usage.completion_tokens,
                    usage.prompt_cost * factor,
                    usage.completion_cost * factor,
                )
            )
            self._forget_before(day - dt.timedelta(days=self.retain_days))

    def _forget_before(self, oldest: dt.date) -> None:
        if len(self._tallies) % 1024 == 0:  # an occasional sweep keeps record() cheap
            for key in [k for k in self._tallies if k[1] < oldest]:
                del self._tallies[key]

    def day(self, service: str, day: dt.date) -> list[tuple[str, str, Tally]]:
        """``(model, account, tally)`` of one day, copies."""
        with self._lock:
            return [
                (model, account, Tally(**{f: getattr(t, f) for f in Tally.__slots__}))
                for (svc, d, model, account), t in self._tallies.items()
                if svc == service and d == day
            ]

    def today(self) -> dt.date:
        return dt.datetime.fromtimestamp(self.clock.time(), dt.UTC).date()


# -- the endpoints -----------------------------------------------------------------

OPENAI_COSTS: Final = "/v1/organization/costs"
OPENAI_USAGE: Final = "/v1/organization/usage/completions"
ANTHROPIC_COSTS: Final = "/v1/organizations/cost_report"
ANTHROPIC_USAGE: Final = "/v1/organizations/usage_report/messages"


class _BadQuery(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class _Window:
    days: list[dt.date]
    next_page: str | None
    groups: frozenset[str]


def _cursor(day: dt.date) -> str:
    return "page_" + base64.urlsafe_b64encode(day.isoformat().encode()).decode()


def _from_cursor(token: str) -> dt.date:
    try:
        return dt.date.fromisoformat(base64.urlsafe_b64decode(token.removeprefix("page_")).decode())
    except ValueError as exc:
        raise _BadQuery(f"invalid page cursor {token!r}") from exc


def _window(
    query: Mapping[str, list[str]],
    start: dt.date,
    end: dt.date,
    *,
    max_limit: int,
) -> _Window:
    limit = int(query.get("limit", ["7"])[0])
    if not 1 <= limit <= max_limit:
        raise _BadQuery(f"limit must be between 1 and {max_limit}")
    first = _from_cursor(query["page"][0]) if "page" in query else start
    days: list[dt.date] = []
    day = first
    while day < end and len(days) < limit:
        days.append(day)
        day += _DAY
    groups = frozenset(query.get("group_by", []) + query.get("group_by[]", []))
    return _Window(days, _cursor(day) if day < end else None, groups)


def _grouped(
    entries: list[tuple[str, str, Tally]], dims: Callable[[str, str], tuple[Any, ...]]
) -> Iterator[tuple[tuple[Any, ...], Tally]]:
    merged: dict[tuple[Any, ...], Tally] = {}
    for model, account, tally in entries:
        merged.setdefault(dims(model, account), Tally()).add(tally)
    yield from sorted(merged.items(), key=lambda kv: tuple(str(v) for v in kv[0]))


def _usd(value: Decimal) -> float:
    return float(value.quantize(_QUANTUM))


def _openai_dims(groups: frozenset[str]) -> Callable[[str, str], tuple[Any, ...]]:
    def dims(model: str, account: str) -> tuple[Any, ...]:
        return (
            model if "model" in groups or "line_item" in groups else None,
            f"proj_{account}" if "project_id" in groups else None,
            f"key_{account}" if "api_key_id" in groups else None,
        )

    return dims


def _openai_cost_results(entries: list[tuple[str, str, Tally]], w: _Window) -> list[Any]:
    results: list[dict[str, Any]] = []
    for (model, project, _key), t in _grouped(entries, _openai_dims(w.groups)):
        parts = [("input", t.input_cost), ("output", t.output_cost)]
        if model is None:
            parts = [("", t.input_cost + t.output_cost)]
        for kind, cost in parts:
            results.append(
                {
                    "object": "organization.costs.result",
                    "amount": {"value": _usd(cost), "currency": "usd"},
                    "line_item": f"{model}, {kind}" if model is not None else None,
                    "project_id": project,
                }
            )
    return results


def _openai_usage_results(entries: list[tuple[str, str, Tally]], w: _Window) -> list[Any]:
    return [
        {
            "object": "organization.usage.completions.result",
            "input_tokens": t.prompt_tokens,
            "output_tokens": t.output_tokens,
            "input_cached_tokens": t.cached_tokens,
            "input_audio_tokens": 0,
            "output_audio_tokens": 0,
            "num_model_requests": t.requests,
            "project_id": project,
            "user_id": None,
            "api_key_id": key,
            "model": model,
            "batch": None,
        }
        for (model, project, key), t in _grouped(entries, _openai_dims(w.groups))
    ]


def _anthropic_dims(groups: frozenset[str]) -> Callable[[str, str], tuple[Any, ...]]:
    def dims(model: str, account: str) -> tuple[Any, ...]:
        return (
            model if "model" in groups or "description" in groups else None,
            f"wrkspc_{account}" if "workspace_id" in groups else None,
            f"apikey_{account}" if "api_key_id" in groups else None,
        )

    return dims


def _cents(usd: Decimal) -> str:
    return str((usd * 100).quantize(Decimal("1e-8")).normalize())


def _anthropic_cost_results(entries: list[tuple[str, str, Tally]], w: _Window) -> list[Any]:
    results: list[dict[str, Any]] = []
    for (model, workspace, _key), t in _grouped(entries, _anthropic_dims(w.groups)):
        parts: list[tuple[str, str | None, Decimal]] = [
            ("Input Tokens", "uncached_input_tokens", t.input_cost),
            ("Output Tokens", "output_tokens", t.output_cost),
        ]
        if model is None:
            parts = [("", None, t.input_cost + t.output_cost)]
        for label, token_type, cost in parts:
            results.append(
                {
                    "currency": "USD",
                    "amount": _cents(cost),
                    "workspace_id": workspace,
                    "description": f"{model} Usage - {label}" if model else None,
                    "cost_type": "tokens" if model else None,
                    "context_window": "0-200k" if model else None,
                    "model": model,
                    "service_tier": "standard" if model else None,
                    "token_type": token_type,
                }
            )
    return results


def _anthropic_usage_results(entries: list[tuple[str, str, Tally]], w: _Window) -> list[Any]:
    return [
        {
            "uncached_input_tokens": t.prompt_tokens - t.cached_tokens - t.cache_write_tokens,
            "cache_creation": {
                "ephemeral_1h_input_tokens": 0,
                "ephemeral_5m_input_tokens": t.cache_write_tokens,
            },
            "cache_read_input_tokens": t.cached_tokens,
            "output_tokens": t.output_tokens,
            "server_tool_use": {"web_search_requests": 0},
            "api_key_id": key,
            "workspace_id": workspace,
            "model": model,
            "service_tier": "standard",
            "context_window": "0-200k",
        }
        for (model, workspace, key), t in _grouped(entries, _anthropic_dims(w.groups))
    ]


def _days(start: dt.datetime, end: dt.datetime | None, today: dt.date) -> tuple[dt.date, dt.date]:
    """The UTC days whose bucket starts in ``[start, end)``, as ``[first, stop)``."""
    stop = today + _DAY if end is None else (end - dt.timedelta(microseconds=1)).date() + _DAY
    return start.date(), stop


def _unix_bounds(query: Mapping[str, list[str]], today: dt.date) -> tuple[dt.date, dt.date]:
    if "start_time" not in query:
        raise _BadQuery("start_time is required")

    def moment(name: str) -> dt.datetime:
        return dt.datetime.fromtimestamp(int(query[name][0]), dt.UTC)

    end = moment("end_time") if "end_time" in query else None
    return _days(moment("start_time"), end, today)


def _rfc3339_bounds(query: Mapping[str, list[str]], today: dt.date) -> tuple[dt.date, dt.date]:
    if "starting_at" not in query:
        raise _BadQuery("starting_at is required")

    def moment(name: str) -> dt.datetime:
        return dt.datetime.fromisoformat(query[name][0].replace("Z", "+00:00")).astimezone(dt.UTC)

    end = moment("ending_at") if "ending_at" in query else None
    return _days(moment("starting_at"), end, today)


@dataclass(frozen=True, slots=True)
class _Endpoint:
    service: str
    openai: bool
    max_limit: int
    results: Callable[[list[tuple[str, str, Tally]], _Window], list[Any]]


ENDPOINTS: Final[dict[str, _Endpoint]] = {
    OPENAI_COSTS: _Endpoint("openai", True, 180, _openai_cost_results),
    OPENAI_USAGE: _Endpoint("openai", True, 31, _openai_usage_results),
    ANTHROPIC_COSTS: _Endpoint("anthropic", False, 31, _anthropic_cost_results),
    ANTHROPIC_USAGE: _Endpoint("anthropic", False, 31, _anthropic_usage_results),
}


def _error(status: int, message: str) -> Reply:
    return Reply(status, [JSON_TYPE], [(0.0, dumps({"error": {"message": message}}))])


def _authorised(endpoint: _Endpoint, headers: Mapping[str, str]) -> bool:
    if endpoint.openai:
        return headers.get("authorization", "").removeprefix("Bearer ").strip() != ""
    return headers.get("x-api-key", "").strip() != ""


def serve_report(
    store: ReportStore, path: str, method: str, headers: Mapping[str, str], query: str
) -> Reply:
    """One page of one report (``path`` is a key of :data:`ENDPOINTS`)."""
    endpoint = ENDPOINTS[path]
    if method != "GET":
        return _error(405, "use GET")
    if not _authorised(endpoint, headers):
        return _error(401, "invalid or missing admin API key")
    params = parse_qs(query)
    try:
        if params.get("bucket_width", ["1d"])[0] != "1d":
            raise _BadQuery("the simulator serves daily buckets only (bucket_width=1d)")
        bounds = _unix_bounds if endpoint.openai else _rfc3339_bounds
        start, end = bounds(params, store.today())
        window = _window(params, start, end, max_limit=endpoint.max_limit)
    except (_BadQuery, ValueError) as exc:
        return _error(400, str(exc))
    buckets = [
        _bucket(endpoint, day, endpoint.results(store.day(endpoint.service, day), window))
        for day in window.days
    ]
    page: dict[str, Any] = {
        "data": buckets,
        "has_more": window.next_page is not None,
        "next_page": window.next_page,
    }
    if endpoint.openai:
        page = {"object": "page", **page}
    return Reply(200, [JSON_TYPE], [(0.0, dumps(page))])


def _bucket(endpoint: _Endpoint, day: dt.date, results: list[Any]) -> dict[str, Any]:
    start = dt.datetime.combine(day, dt.time(0), dt.UTC)
    if endpoint.openai:
        return {
            "object": "bucket",
            "start_time": int(start.timestamp()),
            "end_time": int((start + _DAY).timestamp()),
            "results": results,
        }
    return {
        "starting_at": start.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "ending_at": (start + _DAY).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "results": results,
    }
