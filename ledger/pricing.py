"""What an attempt cost: the provider's own figure, else genai-prices, else unknown.

* ``provider``: the response reported its cost (OpenRouter's ``usage.cost``).
* ``computed``: a price override (:mod:`ledger.price_overrides`) for the
  provider and served model, else genai-prices, priced the normalised usage, cache reads and
  writes at their own rates (genai-prices takes ``input_tokens`` as the total,
  cache included, exactly as the contract does).
* ``incomplete``: as ``computed``, but the price lacks a rate the usage needs
  (cache read or write, 1-hour write, audio): those tokens are priced at the
  text/input rate genai-prices itself falls back to, so the figure is a guess
  the bill will not match. A price override (or a billed figure) fixes it.
* unknown: ``Cost(None, None)``, never 0; the reason is logged once per
  provider and model. Only the model that served the call is ever priced.

Only the price data bundled with the installed genai-prices is used: we build
our own snapshot from it, so an ``UpdatePrices`` started elsewhere in the
process cannot make us wait on, or reach for, the network.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final

from ledger.events import CostSource
from ledger.price_overrides import NO_OVERRIDES, PriceBook
from ledger.providers.base import Usage

log = logging.getLogger(__name__)

_MAX_COST: Final = Decimal(10) ** 9


@dataclass(frozen=True, slots=True)
class Cost:
    """An attempt's cost: ``usd`` (None when unknown, never 0 for unknown) and where it
    came from (``provider``, ``computed``, ``incomplete``, or None with ``usd``)."""

    usd: Decimal | None = None
    source: CostSource | None = None


UNKNOWN: Final = Cost()

_snapshot: Any = None
_snapshot_lock = threading.Lock()
_warned: set[tuple[str, str]] = set()
_warned_lock = threading.Lock()


def _bundled_snapshot() -> Any:
    global _snapshot
    with _snapshot_lock:
        if _snapshot is None:
            # Imported lazily: loading the price tables takes ~150 ms.
            from genai_prices import data
            from genai_prices.data_snapshot import DataSnapshot

            _snapshot = DataSnapshot(providers=data.providers, from_auto_update=False)
        return _snapshot


def _warn_once(provider: str, model: str, reason: str) -> None:
    with _warned_lock:
        if (provider, model) in _warned:
            return
        _warned.add((provider, model))
    log.warning("cost of %s model %r is unknown: %s", provider, model, reason)


_TOKEN_KEYS: Final = frozenset(
    {
        "input_mtok",
        "output_mtok",
        "cache_read_mtok",
        "cache_write_mtok",
        "cache_write_1h_mtok",
        "input_audio_mtok",
        "cache_audio_read_mtok",
        "output_audio_mtok",
    }
)
_MTOK: Final = Decimal(1_000_000)


#: One token rate of a price: (key, base rate, tiers as (start, rate) highest first).
_Rate = tuple[str, Decimal, tuple[tuple[int, Any], ...]]


@dataclass(frozen=True, slots=True)
class _Shape:
    """What one price object offers, read once: the keys it has a value for, and its
    token rates (None when it is not a sum of token counts x rates)."""

    keys: frozenset[str]
    rates: tuple[_Rate, ...] | None


# Per price object: the bundled table's objects live as long as the process and are
# priced on every call, so their shape is read once (id() with the object kept, so an
# id is never reused while cached; bounded, in case a caller builds prices per call).
_shapes: dict[int, tuple[Any, _Shape]] = {}
_MAX_SHAPES: Final = 4096


def _shape_of(prices: Any) -> _Shape:
    cached = _shapes.get(id(prices))
    if cached is not None and cached[0] is prices:
        return cached[1]
    fields = {key: value for key, value in vars(prices).items() if value is not None}
    shape = _Shape(frozenset(fields), _token_rates(fields))
    if len(_shapes) >= _MAX_SHAPES:
        _shapes.clear()
    _shapes[id(prices)] = (prices, shape)
    return shape


def _token_rates(fields: dict[str, Any]) -> tuple[_Rate, ...] | None:
    rates: list[_Rate] = []
    for key, value in fields.items():
        if key.startswith("_"):
            continue
        if key in _TOKEN_KEYS:
            if isinstance(value, Decimal):
                rates.append((key, value, ()))
                continue
            base, tiers = getattr(value, "base", None), getattr(value, "tiers", None)
            if not isinstance(base, Decimal) or not isinstance(tiers, list):
                return None
            ordered = sorted(tiers, key=lambda t: t.start, reverse=True)
            rates.append((key, base, tuple((t.start, t.price) for t in ordered)))
        elif key == "requests_kcount" or not key.endswith(("_mtok", "_kcount")):
            return None
    return tuple(rates)


def _rate(base: Decimal, tiers: tuple[tuple[int, Any], ...], total_input: int) -> Decimal | None:
    """A per-million rate; a tiered price uses the tier the whole input falls in ("cliff")."""
    for start, price in tiers:
        if total_input > start:
            return price if isinstance(price, Decimal) else None
    return base


def missing_rates(prices: Any, usage: Usage) -> tuple[str, ...]:
    """The components ``usage`` needs that ``prices`` has no rate for.

    Each one is billed by the provider at its own rate (a cache read at a
    discount, audio at a premium); pricing it at another rate is a guess, so a
    cost with any of these is ``incomplete``, not ``computed``.
    """
    if not (
        usage.cache_read_tokens
        or usage.cache_write_tokens
        or usage.cache_write_1h_tokens
        or usage.input_audio_tokens
        or usage.cache_audio_read_tokens
        or usage.output_audio_tokens
    ):
        return ()  # plain input and output tokens (most calls): every count below is 0
    has = _shape_of(prices).keys
    write_1h = min(usage.cache_write_1h_tokens, usage.cache_write_tokens)
    needed = (
        ("cache read", usage.cache_read_tokens - usage.cache_audio_read_tokens, "cache_read_mtok"),
        ("cache write", usage.cache_write_tokens - write_1h, "cache_write_mtok"),
        ("1-hour cache write", write_1h, "cache_write_1h_mtok"),
        (
            "audio input",
            usage.input_audio_tokens - usage.cache_audio_read_tokens,
            "input_audio_mtok",
        ),
        ("audio cache read", usage.cache_audio_read_tokens, "cache_audio_read_mtok"),
        ("audio output", usage.output_audio_tokens, "output_audio_mtok"),
    )
    return tuple(name for name, count, key in needed if count > 0 and key not in has)


def _linear_price(prices: Any, usage: Usage) -> Decimal | None:
    """The price as a sum of count x rate, or None when the model's price is not that simple.

    genai-prices decomposes usage into priced units on every call (~0.1 ms);
    for token-only prices this reduces to a sum with the same meaning: cache
    reads and writes are subsets of input, priced at their own rates when the
    model has them, else at the input rate; 1-hour cache writes are a subset of
    the writes, at the model's 1-hour rate; audio input, cached audio and audio
    output are subsets of input, cache reads and output, at the audio rates when
    the model has them, else at the text rates (a missing rate makes the cost
    ``incomplete``, see :func:`missing_rates`). Anything else (per-request fees,
    unknown price shapes, 1-hour writes on a model without a 1-hour rate) goes
    to genai-prices itself.
    """
    shape = _shape_of(prices).rates
    if shape is None:
        return None
    rates: dict[str, Decimal] = {}
    for key, base, tiers in shape:
        rate = _rate(base, tiers, usage.input_tokens)
        if rate is None:
            return None
        rates[key] = rate
    read, write = usage.cache_read_tokens, usage.cache_write_tokens
    audio_read = min(usage.cache_audio_read_tokens, read)
    audio_in = max(usage.input_audio_tokens, audio_read) - audio_read  # uncached audio
    input_rate = rates.get("input_mtok", Decimal(0))
    read_rate = rates.get("cache_read_mtok", input_rate)
    uncached = usage.input_tokens
    total = Decimal(0)
    if "cache_read_mtok" in rates or "cache_audio_read_mtok" in rates:
        uncached -= read
        total += (read - audio_read) * read_rate
        total += audio_read * rates.get("cache_audio_read_mtok", read_rate)
    elif audio_read:
        audio_in += audio_read  # no cache rate at all: cached audio is audio input
    write_1h = min(usage.cache_write_1h_tokens, write)
    if write_1h:
        if "cache_write_1h_mtok" not in rates or "cache_write_mtok" not in rates:
            return None
        total += write_1h * rates["cache_write_1h_mtok"]
    if "cache_write_mtok" in rates:
        uncached -= write
        total += (write - write_1h) * rates["cache_write_mtok"]
    uncached -= audio_in
    if uncached < 0:
        return None  # counts disagree; let genai-prices decide how to treat them
    total += audio_in * rates.get("input_audio_mtok", input_rate)
    total += uncached * input_rate
    output_rate = rates.get("output_mtok", Decimal(0))
    audio_out = min(usage.output_audio_tokens, usage.output_tokens)
    total += (usage.output_tokens - audio_out) * output_rate
    total += audio_out * rates.get("output_audio_mtok", output_rate)
    return total / _MTOK


def _library_price(
    snapshot: Any, usage: Usage, model: str, provider_id: str | None, api_url: str | None, at: Any
) -> Decimal:
    from genai_prices.types import Usage as PriceUsage

    price_usage = PriceUsage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
        cache_write_1h_tokens=usage.cache_write_1h_tokens or None,
        input_audio_tokens=usage.input_audio_tokens or None,
        cache_audio_read_tokens=usage.cache_audio_read_tokens or None,
        output_audio_tokens=usage.output_audio_tokens or None,
    )
    total: Decimal = snapshot.calc(price_usage, model, provider_id, api_url, at).total_price
    return total


#: (model, provider id, api url) -> the model's price entry and the url it was found by, or
#: the LookupError; the bundled table never changes in a process, so a lookup (a scan of
#: every model's match rules, ~0.1 ms, on every attempt) is done once per key.
_found: dict[tuple[str, str | None, str | None], tuple[Any, str | None] | LookupError] = {}
_FOUND_MAX: Final = 4096


def _find_model(
    snapshot: Any, model: str, provider_id: str | None, url: str | None
) -> tuple[Any, str | None]:
    """The model's price entry and the url it was priced by; ``LookupError`` if unpriced."""
    key = (model, provider_id, url)
    found = _found.get(key)
    if found is None:
        try:
            try:
                _, info = snapshot.find_provider_model(model, None, provider_id, url)
            except LookupError:
                if provider_id or not url:
                    raise
                # A local or proxy base URL names no provider: infer it from the model name
                # (a proxy serving gpt-4o-mini is priced as gpt-4o-mini), and price by it.
                url = None
                _, info = snapshot.find_provider_model(model, None, None, None)
            found = (info, url)
        except LookupError as exc:
            found = exc
        if len(_found) >= _FOUND_MAX:
            _found.clear()
        _found[key] = found
    if isinstance(found, LookupError):
        raise LookupError(*found.args)
    return found


@dataclass(frozen=True, slots=True)
class Priced:
    """A computed price and the components it had no rate for (empty: complete)."""

    usd: Decimal
    missing: tuple[str, ...] = ()


def computed_price(
    usage: Usage,
    model: str,
    *,
    provider: str,
    provider_id: str | None,
    api_url: str | None = None,
    at: dt.datetime | None = None,
) -> Priced | None:
    """genai-prices' figure for ``usage`` on ``model`` at ``at`` (time-of-day and
    start-date prices included), with what it lacked; None (reason logged once) if unpriced."""
    at = at or dt.datetime.now(dt.UTC)
    url = None if provider_id else api_url
    try:
        snapshot = _bundled_snapshot()
        info, url = _find_model(snapshot, model, provider_id, url)
        prices = info.get_prices(at)
        missing = missing_rates(prices, usage)
        total = _linear_price(prices, usage)
        if total is None:
            total = _library_price(snapshot, usage, model, provider_id, url, at)
    except LookupError:
        reason = "the price table knows no model of that name"
        if api_url and not provider_id:  # only then can a providers mapping help
            reason += (
                f" and the base URL {api_url} names no provider; map it to its provider "
                "(ledger.httpx_client(providers={base_url: 'openai'})) if it is one"
            )
        else:
            reason += " (a [[tool.ledger.prices]] override prices it)"
        _warn_once(provider, model, reason)
        return None
    except Exception as exc:  # any failure of the price table means "unknown", never a crash
        _warn_once(provider, model, f"{type(exc).__name__}: {exc}")
        return None
    if not isinstance(total, Decimal) or not total.is_finite() or not 0 <= total < _MAX_COST:
        _warn_once(provider, model, f"genai-prices returned {total!r}")
        return None
    return Priced(total, missing)


def computed_cost(
    usage: Usage,
    model: str,
    *,
    provider: str,
    provider_id: str | None,
    api_url: str | None = None,
    at: dt.datetime | None = None,
) -> Decimal | None:
    """The figure of :func:`computed_price` alone (an estimate for budgets and what-ifs)."""
    priced = computed_price(
        usage, model, provider=provider, provider_id=provider_id, api_url=api_url, at=at
    )
    return None if priced is None else priced.usd


def attempt_cost(
    *,
    usage: Usage | None,
    model: str | None,
    reported: Decimal | None,
    provider: str,
    provider_id: str | None,
    api_url: str | None = None,
    at: dt.datetime | None = None,
    overrides: PriceBook = NO_OVERRIDES,
) -> Cost:
    """The cost to record for one attempt (see the module docstring for the order)."""
    if reported is not None:
        return Cost(reported, "provider")
    if usage is None:
        return UNKNOWN  # no usage reported: pricing zero tokens would invent a 0
    if not model:
        _warn_once(provider, "", "no model name to price")
        return UNKNOWN
    at = at or dt.datetime.now(dt.UTC)
    override = overrides.find(provider, model, at)
    if override is not None:
        priced: Priced | None = Priced(*override.price(usage))
    else:
        priced = computed_price(
            usage, model, provider=provider, provider_id=provider_id, api_url=api_url, at=at
        )
    if priced is None:
        return UNKNOWN
    if priced.missing:
        _warn_once(provider, model, f"no rate for {', '.join(priced.missing)}; cost incomplete")
        return Cost(priced.usd, "incomplete")
    return Cost(priced.usd, "computed")
