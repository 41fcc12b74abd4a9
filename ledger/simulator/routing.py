"""OpenRouter's provider routing and provider sticky routing, as documented.

Sources (OpenRouterTeam/docs; openrouter.ai/docs):

``guides/routing/provider-selection.mdx`` ("Price-Based Load Balancing"):

    1. Prioritize providers that have not seen significant outages in the last
       30 seconds.
    2. For the stable providers, look at the lowest-cost candidates and select
       one weighted by inverse square of the price (example below).
    3. Use the remaining providers as fallbacks.

    If you have ``sort`` or ``order`` set in your provider preferences, load
    balancing will be disabled.

    [order] OpenRouter will try them one at a time and proceed to other
    providers if none are operational. If you don't want to allow any other
    providers, you should disable fallbacks as well.

``guides/best-practices/prompt-caching.mdx`` ("Provider Sticky Routing"):

    Sticky routing only activates when the provider's cache read pricing is
    cheaper than regular prompt pricing [...] If the sticky provider becomes
    unavailable, OpenRouter automatically falls back to the next-best provider.
    Sticky routing is not used when you specify a manual provider order via
    ``provider.order``.

    Sticky routing is tracked at the account level, per model, and per
    conversation. By default, OpenRouter identifies conversations by hashing
    the first system (or developer) message and the first non-system message.

    [session_id] Request body [...] If both are provided, the body value takes
    precedence. Header: Set the ``x-session-id`` HTTP header. [...] If neither
    is set, OpenRouter falls back to the OpenAI-style ``prompt_cache_key``.

    When ``session_id`` is set, sticky routing activates on any successful
    request — even before cache usage is observed [...] Without
    ``session_id``, sticky routing only activates after a cache hit is
    detected.

    Sticky sessions expire after 10 minutes of inactivity. Each successful
    request resets the timer. If the sticky provider returns an error, the
    cache is not updated, allowing the next request to be re-routed.

How this module reads them: the pin is ``(account, model, key) -> upstream``;
an explicit key (``session_id``/``x-session-id``/``prompt_cache_key``) pins at
the first success, the derived hash only when that success read the cache;
a success on the pinned upstream refreshes it; a request whose pinned upstream
failed and that another upstream served leaves the pin as it was (neither
moved nor refreshed). ``provider.sort`` replaces load balancing by a fixed
order but keeps stickiness (ADR 0221: "sort picks the first upstream, the pin
keeps it"); ``provider.order`` disables stickiness.

"Significant outages" are not defined by the docs: here an upstream is avoided
when, in the last 30 seconds, it failed at least ``OUTAGE_MIN_FAILURES`` times
and on at least ``OUTAGE_MIN_SHARE`` of its attempts; one failure among many
successes is not an outage. ``sort: "latency"`` and ``"throughput"`` order by
what the router measured of each upstream (a moving average of its first-token
time and its decoding rate), as OpenRouter's own stats do, and by the catalog's
figures until an upstream has served once.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from ledger.simulator.catalog import ModelPool, UpstreamSpec

PIN_IDLE_S: Final = 600.0
OUTAGE_WINDOW_S: Final = 30.0
OUTAGE_MIN_FAILURES: Final = 3
OUTAGE_MIN_SHARE: Final = 0.5
#: Attempts kept per upstream to judge an outage: past this many in 30 s, the latest judge.
_RECENT_MAX: Final = 256
#: Weight of the newest served call in an upstream's measured latency and throughput.
MEASURE_WEIGHT: Final = 0.2
SORTS: Final = frozenset({"price", "throughput", "latency"})


@dataclass(frozen=True, slots=True)
class ProviderPrefs:
    """The request's top-level ``provider`` object (the fields the simulator honours)."""

    order: tuple[str, ...] = ()
    only: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    sort: str | None = None
    allow_fallbacks: bool = True


@dataclass(frozen=True, slots=True)
class StickyKey:
    """Who a pin belongs to; ``explicit`` when the caller sent the key."""

    account: str
    model: str
    key: str
    explicit: bool


@dataclass(slots=True)
class Pin:
    upstream: str
    last_success: float


@dataclass(slots=True)
class Measured:
    """What the router saw of one upstream of one model: its recent attempts
    (time, failed) and moving averages of its first-token time and decoding rate."""

    recent: deque[tuple[float, bool]]
    ttft_s: float | None = None
    tokens_per_s: float | None = None

    def outage(self, now: float) -> bool:
        """A significant outage in the ``OUTAGE_WINDOW_S`` before ``now``."""
        while self.recent and self.recent[0][0] < now - 2 * OUTAGE_WINDOW_S:
            self.recent.popleft()  # kept a little longer: events may arrive out of order
        seen = [failed for at, failed in self.recent if now - OUTAGE_WINDOW_S <= at <= now]
        failures = sum(seen)
        return failures >= OUTAGE_MIN_FAILURES and failures >= OUTAGE_MIN_SHARE * len(seen)


def _matches(spec: UpstreamSpec, names: tuple[str, ...]) -> bool:
    lowered = {n.lower() for n in names}
    return spec.slug in lowered or spec.name.lower() in lowered


class Router:
    """Chooses the order in which a request tries a pool's upstreams; keeps pins."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._pins: dict[StickyKey, Pin] = {}
        self._measured: dict[tuple[str, str], Measured] = {}

    # -- state -------------------------------------------------------------
    def pinned(self, key: StickyKey, now: float) -> str | None:
        """The live pin for ``key`` at ``now``; expired pins are dropped."""
        pin = self._pins.get(key)
        if pin is None:
            return None
        if now - pin.last_success > PIN_IDLE_S:
            del self._pins[key]
            return None
        return pin.upstream

    def _measure(self, model: str, upstream: str) -> Measured:
        found = self._measured.get((model, upstream))
        if found is None:
            found = self._measured[(model, upstream)] = Measured(deque(maxlen=_RECENT_MAX))
        return found

    def record_failure(self, model: str, upstream: str, now: float) -> None:
        self._measure(model, upstream).recent.append((now, True))

    def record_served(
        self, model: str, upstream: str, now: float, *, ttft_s: float, tokens_per_s: float
    ) -> None:
        """An attempt ``upstream`` served at ``now``: one more success, and its timings."""
        measured = self._measure(model, upstream)
        measured.recent.append((now, False))
        w = MEASURE_WEIGHT
        measured.ttft_s = (
            ttft_s if measured.ttft_s is None else (1 - w) * measured.ttft_s + w * ttft_s
        )
        measured.tokens_per_s = (
            tokens_per_s
            if measured.tokens_per_s is None
            else (1 - w) * measured.tokens_per_s + w * tokens_per_s
        )

    def record_success(
        self,
        key: StickyKey | None,
        spec: UpstreamSpec,
        *,
        pinned_before: str | None,
        cache_hit: bool,
        now: float,
    ) -> None:
        """Update the pin after ``spec`` served a request (``key`` None: stickiness off)."""
        if key is None or not spec.sticky_eligible:
            return
        if pinned_before is not None:
            if pinned_before == spec.name:
                self._pins[key].last_success = now
            return  # the pin's upstream failed: the pin is not updated
        if key.explicit or cache_hit:
            self._pins[key] = Pin(spec.name, now)

    # -- ordering ----------------------------------------------------------
    def candidates(
        self, pool: ModelPool, prefs: ProviderPrefs, pinned: str | None, now: float
    ) -> list[UpstreamSpec]:
        """Upstreams to try, in order, for one request."""
        allowed = [
            u
            for u in pool.upstreams
            if (not prefs.only or _matches(u, prefs.only)) and not _matches(u, prefs.ignore)
        ]
        if prefs.order:
            head = [u for name in prefs.order for u in allowed if _matches(u, (name,))]
            head = list(dict.fromkeys(head))
            if not prefs.allow_fallbacks:
                return head
            rest = [u for u in self._balanced(pool.model, allowed, now) if u not in head]
            return head + rest
        if prefs.sort in SORTS:
            ordered = sorted(allowed, key=self._sort_key(pool.model, prefs.sort))
        else:
            ordered = self._balanced(pool.model, allowed, now)
        if pinned is not None:
            pin = [u for u in ordered if u.name == pinned]
            ordered = pin + [u for u in ordered if u.name != pinned]
        return ordered if prefs.allow_fallbacks else ordered[:1]

    def _sort_key(self, model: str, sort: str | None) -> Callable[[UpstreamSpec], tuple[Any, ...]]:
        if sort == "price":
            return _by_price

        def measured(u: UpstreamSpec) -> tuple[Any, ...]:
            seen = self._measured.get((model, u.name))
            if sort == "latency":
                ttft = seen.ttft_s if seen is not None and seen.ttft_s is not None else None
                return (u.latency.ttft_median_s if ttft is None else ttft, u.name)
            rate = seen.tokens_per_s if seen is not None else None
            return (-(u.latency.tokens_per_s if rate is None else rate), u.name)

        return measured

    def _balanced(self, model: str, allowed: list[UpstreamSpec], now: float) -> list[UpstreamSpec]:
        stable: list[UpstreamSpec] = []
        shaky: list[UpstreamSpec] = []
        for u in allowed:
            seen = self._measured.get((model, u.name))
            (shaky if seen is not None and seen.outage(now) else stable).append(u)
        stable.sort(key=_by_price)
        shaky.sort(key=_by_price)
        if not stable:
            return shaky
        first = self._rng.choices(stable, weights=[u.routing_weight() for u in stable])[0]
        return [first] + [u for u in stable if u is not first] + shaky


def _by_price(u: UpstreamSpec) -> tuple[Any, ...]:
    return (u.input_per_mtok, u.output_per_mtok, u.name)
