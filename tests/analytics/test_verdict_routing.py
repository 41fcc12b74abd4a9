"""Which models and upstreams the provider.order verdict may judge, and what it may claim.

provider.order is an OpenRouter routing setting: models served by direct
providers get no judgement; failures OpenRouter hides (no upstream named) make
error rates unobservable and are no upstream of their own; every upstream that
holds a material share of the pinned sessions is judged.

Rows are recorded through the real :class:`~ledger.store.ledger.Ledger` as
:class:`~ledger.events.UsageEvent` s shaped like the client's
(``ledger.attempt.build_event``): a failed attempt has no model, no tokens and
no cost, and names an upstream only when OpenRouter's error did
(``error.metadata.provider_name``). ``min_samples`` is 50 to keep them small.
"""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from ledger.events import UsageEvent
from ledger.store.ledger import Ledger
from tests.analytics.builders import T0, open_analytics

PRICE = Decimal("0.000001")  # $1 per million input tokens


def _at(minute: float) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minute)


def served(
    model: str, upstream: str | None, minute: float, *, session: str | None = None, **extra: Any
) -> UsageEvent:
    """A served attempt as the client records it (an OpenRouter one names its upstream)."""
    provider = extra.pop("provider", "openrouter")
    values: dict[str, Any] = {
        "started_at": _at(minute),
        "requested_provider": extra.pop("requested_provider", provider),
        "requested_model": model,
        "provider": provider,
        "model": model,
        "upstream": upstream,
        "status": "ok",
        "latency_ms": 100.0,
        "session_id": session,
        "actor_id": "agent" if session else None,
        "session_key": f"key:{session}" if session and provider == "openrouter" else None,
        "input_tokens": 1000,
        "output_tokens": 10,
        "cost_usd": 1000 * PRICE,
        "cost_source": "provider",
    }
    return UsageEvent(**{**values, **extra})


def failed(model: str, upstream: str | None, minute: float, **extra: Any) -> UsageEvent:
    """A failed attempt as the client records it: no model, tokens or cost."""
    provider = extra.pop("provider", "openrouter")
    return UsageEvent(
        started_at=_at(minute),
        requested_provider=extra.pop("requested_provider", provider),
        requested_model=model,
        provider=provider,
        upstream=upstream,
        status="error",
        error_type="server_error",
        http_status=502,
        latency_ms=40.0,
        **extra,
    )


def pinned(
    model: str, upstream: str, sessions: int, calls: int, first: int = 0
) -> list[UsageEvent]:
    """``sessions`` sessions of ``calls`` served attempts, each all on ``upstream``."""
    return [
        served(model, upstream, s + c / 10, session=f"{model}-{upstream}-{first + s}")
        for s in range(sessions)
        for c in range(calls)
    ]


def loose(model: str, upstream: str | None, n: int, **extra: Any) -> list[UsageEvent]:
    """Served attempts outside any session (no pin, no key)."""
    return [served(model, upstream, i, **extra) for i in range(n)]


def record(url: str, tmp_path: Path, events: list[UsageEvent]) -> None:
    with Ledger(url, journal_dir=tmp_path / "journal") as led:
        for event in events:
            led.record(event)
        assert led.flush(30), "the ledger did not commit the events"


def verdicts_of(url: str, tmp_path: Path, **settings: float) -> pd.DataFrame:
    with open_analytics(url, tmp_path, min_samples=50, **settings) as analytics:
        return analytics.provider_order_verdict().set_index("requested_model")


def direct_model() -> list[UsageEvent]:
    """gpt-4o-mini on OpenAI, falling back to Anthropic: OpenAI errs 30 %, Anthropic never.

    Judged like an OpenRouter model it would read "pinned openai, best anthropic".
    """
    events = []
    for n in range(120):
        direct = {"requested_provider": "openai", "session": f"chat-{n // 4}"}
        if n % 10 < 3:
            events.append(failed("gpt-4o-mini", None, n, provider="openai",
                                 requested_provider="openai"))  # fmt: skip
            events.append(served("gpt-4o-mini", None, n + 0.01, provider="anthropic", **direct))
        else:
            events.append(served("gpt-4o-mini", None, n, provider="openai", **direct))
    return events


def test_a_model_no_aggregator_routes_gets_no_judgement(ledger_url: str, tmp_path: Path) -> None:
    record(ledger_url, tmp_path, direct_model())
    verdicts = verdicts_of(ledger_url, tmp_path)
    assert list(verdicts.index) == ["gpt-4o-mini"]  # still one row per requested model
    direct = verdicts.loc["gpt-4o-mini"]
    assert direct.verdict == "does_not_apply"
    assert pd.isna(direct.pinned_upstream) and pd.isna(direct.best_upstream)
    assert pd.isna(direct.recommendation) and pd.isna(direct.sessions_affected_share)
    assert direct.reason == (
        "gpt-4o-mini is not routed by OpenRouter (its attempts went to anthropic, openai), "
        "so provider routing (order, ignore, sort) does not apply."
    )


def hidden_failures() -> list[UsageEvent]:
    """P holds the sessions, Q serves loose calls; 30 OpenRouter failures name no upstream.

    Served OpenRouter attempts that named no upstream (a response without its
    ``provider`` field) are faster than anyone: they must not become "best".
    """
    return [
        *pinned("hidden", "P", 30, 2),
        *loose("hidden", "Q", 60),
        *[failed("hidden", None, i) for i in range(30)],
        *loose("hidden", None, 60, latency_ms=5.0),
    ]


def test_failures_that_name_no_upstream_make_error_rates_unobservable(
    ledger_url: str, tmp_path: Path
) -> None:
    record(ledger_url, tmp_path, hidden_failures())
    with open_analytics(ledger_url, tmp_path, min_samples=50) as analytics:
        card = analytics.upstream_scorecard().set_index("upstream")
        row = analytics.provider_order_verdict().set_index("requested_model").loc["hidden"]
    assert card.loc["openrouter", "errors"] == 30  # the scorecard keeps contract §2 identities
    assert (row.pinned_upstream, row.best_upstream) == ("P", "Q")
    assert row.verdict == "not_warranted"
    assert not bool(row.error_rates_observable) and not bool(row.errors_worse)
    assert (row.unattributed_errors, row.routed_attempts) == (30, 210)
    assert "errs 0.0%" not in row.reason  # no error rate is printed that was not seen


def named_failures() -> list[UsageEvent]:
    """As :func:`hidden_failures`, but OpenRouter named the failing upstream: P, 20 times."""
    return [
        *pinned("named", "P", 30, 2),
        *[failed("named", "P", i) for i in range(20)],
        *loose("named", "Q", 60),
        *[failed("named", None, i) for i in range(5)],
    ]


def test_failures_naming_their_upstream_count_against_it(ledger_url: str, tmp_path: Path) -> None:
    record(ledger_url, tmp_path, named_failures())
    row = verdicts_of(ledger_url, tmp_path).loc["named"]
    assert (row.verdict, row.pinned_upstream, row.best_upstream) == ("warranted", "P", "Q")
    assert bool(row.error_rates_observable) and bool(row.errors_worse)
    assert row.pinned_error_rate == pytest.approx(20 / 80)
    # P's 20 failures are outside its sessions, whose 60 attempts all served: the
    # attempts cluster by session (design effect > 1), so P's interval is wider than
    # the independent Wilson interval of 20 in 80, [16.8 %, 35.5 %]
    assert row.pinned_error_deff > 1
    assert row.pinned_error_low < 0.168 and row.pinned_error_high > 0.355
    assert (row.best_error_rate, row.best_attempts) == (0.0, 60)
    assert row.best_error_high == pytest.approx(0.06, abs=5e-4)
    # P holds every pinned session: provider.order puts Q first for all of them
    assert json.loads(row.recommendation) == {"order": ["q"], "allow_fallbacks": True}
    assert list(row.slug_unknown_upstreams) == ["Q"]  # the reason says to check its slug
    assert (row.unattributed_errors, row.routed_attempts) == (5, 145)


def test_wilson_bounds_never_print_below_zero(ledger_url: str, tmp_path: Path) -> None:
    # 0 errors in 60 attempts: the unclamped lower bound is -1e-17, printed "-0.0"
    events = [*pinned("clean", "P", 30, 2), *loose("clean", "Q", 60), failed("clean", "Q", 61)]
    record(ledger_url, tmp_path, events)
    row = verdicts_of(ledger_url, tmp_path).loc["clean"]
    assert (row.pinned_upstream, row.best_upstream) == ("P", "Q")
    assert row.pinned_error_low == 0.0 and row.best_error_low >= 0.0
    assert row.pinned_error_high <= 1.0
    assert "P errs 0.0% (CI 0.0-6.0%) of 60 attempts" in row.reason
    assert "CI -" not in row.reason


def two_pinned() -> list[UsageEvent]:
    """P holds 18 pinned sessions and serves well; R holds 12 and errs 40 %; Q is the reference."""
    return [
        *pinned("two", "P", 18, 4),
        *pinned("two", "R", 12, 5),
        *[failed("two", "R", i) for i in range(40)],
        *loose("two", "Q", 80),
    ]


def test_every_pinned_upstream_with_a_material_share_is_judged(
    ledger_url: str, tmp_path: Path
) -> None:
    record(ledger_url, tmp_path, two_pinned())
    row = verdicts_of(ledger_url, tmp_path).loc["two"]
    # R holds 40 % of the pinned sessions, above the 10 % default: it is judged, and worse
    # than its best alternative (P and Q tie; P by name)
    assert (row.verdict, row.pinned_upstream, row.best_upstream) == ("warranted", "R", "P")
    assert (row.judged_upstreams, row.worse_upstreams) == ("P, R", "R")
    assert row.pinned_share == pytest.approx(12 / 30)
    assert row.reason.startswith("Pinned R errs 40.0%")


def test_one_attempt_reads_as_one(sqlite_url: str, tmp_path: Path) -> None:
    record(sqlite_url, tmp_path, pinned("solo", "P", 1, 1))
    row = verdicts_of(sqlite_url, tmp_path).loc["solo"]
    assert row.verdict == "insufficient_data"
    assert row.headline == "Not enough data: P has 1 attempt, 50 needed to judge"
    assert row.reason == (
        "Pinned upstream P has 1 attempt and 1 latency sample, fewer than the 50 needed."
    )
