"""Every sentence of the provider routing verdict, written from a typed :class:`Verdict`.

The one place the verdict's words live: the view's ``headline`` and ``reason``
columns (:mod:`ledger.analytics.models.verdict_sentences`), ``ledger report``, the
dashboard's strip and the demo all read them from here, so the SQL computes
figures and never prose, and a wording change is one edit here.

The strings hold upstream and model names from provider responses: they are
data, and every reader shows them as plain text (escaped for a terminal,
never Markdown).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from decimal import Decimal
from typing import Final

from ledger.analytics.read.verdict import Judgement, Verdict, VerdictKind

#: The kind in words, for badges and report lines.
KIND_WORDS: Final[dict[VerdictKind, str]] = {
    "warranted": "warranted",
    "not_warranted": "not warranted",
    "insufficient_data": "insufficient data",
    "does_not_apply": "does not apply",
}


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _per_mtok(cost: float | None) -> str:
    return "unknown cost" if cost is None else f"${cost:.4f}"


def _s(ms: float | None, places: int) -> str:
    return "unknown" if ms is None else f"{ms / 1000:.{places}f}"


def _pct(share: float | None, places: int) -> str:
    return "unknown" if share is None else f"{100 * share:.{places}f}%"


def _signed_pct(share: float | None, places: int) -> str:
    return "unknown" if share is None else f"{100 * share:+.{places}f}%"


def figures(judgement: Judgement) -> str:
    """What an upstream was judged worse on: ``20.0% errors vs 0.0%, p95 3.0 s vs 1.0 s``."""
    parts = []
    if judgement.errors_worse:
        parts.append(
            f"{_pct(judgement.error_rate, 1)} errors vs {_pct(judgement.against_error_rate, 1)}"
        )
    if judgement.latency_worse:
        parts.append(f"p95 {_s(judgement.p95_ms, 1)} s vs {_s(judgement.against_p95_ms, 1)} s")
    if judgement.cost_worse and judgement.cost_per_mtok is not None:
        against = judgement.against_cost_per_mtok or 0.0
        parts.append(f"${judgement.cost_per_mtok:.2f} vs ${against:.2f} per Mtok input")
    return ", ".join(parts)


def _detail(worse: Iterable[Judgement]) -> str:
    """Each upstream to drop with what it was judged against."""
    return " and ".join(f"{j.upstream} (vs {j.judged_against}: {figures(j)})" for j in worse)


def margins(v: Verdict) -> str:
    return (
        f"errors +{100 * v.error_margin:.1f} points, p95 +{100 * v.latency_margin:.0f}%, "
        f"price +{100 * v.cost_margin:.0f}%"
    )


def headline(v: Verdict) -> str:
    """One line: what to do, or why nothing."""
    judged = v.judged
    share = _pct(v.sessions_affected_share, 0)
    if v.verdict == "does_not_apply":
        return "Not routed by OpenRouter: provider routing does not apply"
    if v.verdict == "insufficient_data":
        if v.pinned_upstream is None:
            return "Not enough data: no session is pinned to one OpenRouter upstream yet"
        return (
            f"Not enough data: {v.pinned_upstream} has "
            f"{_plural(v.pinned_attempts or 0, 'attempt')}, {v.min_samples} needed to judge"
        )
    if v.verdict == "warranted" and v.action == "ignore":
        return f"Ignore {_detail(v.worse_judged)}, on {share} of sessions"
    if v.verdict == "warranted" and judged is not None:
        return (
            f"Order {v.best_upstream} first: {v.pinned_upstream} {figures(judged)}, "
            f"on {share} of sessions"
        )
    if v.action is not None:
        return (
            f"Keep routing: leaving {_detail(v.worse_judged)} would cost "
            f"{_signed_pct(v.cost_change_share, 0)} on {share} of sessions"
        )
    if judged is not None:
        names = " and ".join(j.upstream for j in v.worse_judged)
        return (
            f"Keep routing: {names} is worse ({figures(judged)}) "
            "but no better upstream has enough data"
        )
    return f"Keep routing: no pinned upstream is worse beyond the margins ({margins(v)})"


def _upstream_figures(
    v: Verdict,
    name: str | None,
    error: tuple[float | None, float | None, float | None],
    attempts: int | None,
    p95: tuple[float | None, float | None, float | None],
    cost: float | None,
    hit_rate: float | None,
) -> str:
    tried = _plural(attempts or 0, "attempt")
    latency = f"p95 {_s(p95[0], 2)} s (CI {_s(p95[1], 2)}-{_s(p95[2], 2)} s)"
    rest = f"{_per_mtok(cost)}/Mtok input, {_pct(hit_rate, 0)} cache hits"
    if v.error_rates_observable:
        rate, low, high = error
        low_pct = "unknown" if low is None else f"{100 * low:.1f}"
        errs = f"{_pct(rate, 1)} (CI {low_pct}-{_pct(high, 1)})"
        return f"{name} errs {errs} of {tried}, {latency}, {rest}"
    return f"{name} ({tried}) {latency}, {rest}"


def pinned_figures(v: Verdict) -> str:
    return _upstream_figures(
        v,
        v.pinned_upstream,
        (v.pinned_error_rate, v.pinned_error_low, v.pinned_error_high),
        v.pinned_attempts,
        (v.pinned_p95_ms, v.pinned_p95_low_ms, v.pinned_p95_high_ms),
        v.pinned_cost_per_mtok,
        v.pinned_hit_rate,
    )


def best_figures(v: Verdict) -> str:
    """The alternative the pinned upstream was judged against, with its figures."""
    judged = v.judged
    name = judged.judged_against if v.pinned_worse and judged is not None else v.best_upstream
    return _upstream_figures(
        v,
        name,
        (v.best_error_rate, v.best_error_low, v.best_error_high),
        v.best_attempts,
        (v.best_p95_ms, v.best_p95_low_ms, v.best_p95_high_ms),
        v.best_cost_per_mtok,
        v.best_hit_rate,
    )


def _dollars(amount: float | Decimal, places: int) -> str:
    return f"{'-' if amount < 0 else '+'}${abs(amount):.{places}f}"


def effect(v: Verdict) -> str:
    """The money: over the rows judged, and per 30 days at the recent traffic."""
    if v.cost_change_usd is None:
        return "its cost effect is unknown (unpriced attempts)"
    over = (
        f"it would change spend by {_dollars(v.cost_change_usd, 4)} "
        f"({_signed_pct(v.cost_change_share, 1)}) over the ledger's span"
    )
    if v.monthly_effect_usd is None:
        return f"{over}; no recent traffic to project a month from"
    return f"{over}, {_dollars(v.monthly_effect_usd, 2)} per 30 days{traffic(v)}"


def _when(stamp: dt.datetime) -> str:
    return f"{stamp.astimezone(dt.UTC):%Y-%m-%d %H:%M} UTC"


def traffic(v: Verdict) -> str:
    """The traffic a month is projected from: `` at the last 30 days' traffic (…)``."""
    if v.recent_calls_per_day is None or v.window_start is None:
        return ""
    return (
        f" at the last 30 days' traffic ({v.recent_calls_per_day:,.1f} calls/day "
        f"from {_when(v.window_start)})"
    )


def window_note(v: Verdict) -> str:
    """The rows the verdict judged: `` Judged on the rows from … to … UTC.``"""
    if v.judged_since is None or v.window_end is None:
        return ""
    end = v.window_end.astimezone(dt.UTC)
    return f" Judged on the rows from {_when(v.judged_since)[:-4]} to {end:%Y-%m-%d %H:%M} UTC."


def errors_note(v: Verdict) -> str:
    """What the failures behind OpenRouter say, and do not say."""
    hidden = (
        " Error rates were not observable, since no failed OpenRouter attempt named its "
        "upstream (OpenRouter retries other upstreams internally; "
    )
    if v.error_rates_observable is False and v.unattributed_errors == 0:
        return (
            f"{hidden}none of the model's {v.routed_attempts} OpenRouter attempts "
            "reached the ledger as a failure)."
        )
    if v.error_rates_observable is False:
        return (
            f"{hidden}{v.unattributed_errors} of the model's {v.routed_attempts} OpenRouter "
            "attempts failed without naming one)."
        )
    if v.unattributed_errors > 0:
        share = 100.0 * v.unattributed_errors / v.routed_attempts
        return (
            f" {v.unattributed_errors} of the model's {v.routed_attempts} OpenRouter "
            f"attempts ({share:.1f}%) failed without naming an upstream."
        )
    return ""


def switch_note(v: Verdict) -> str:
    if v.switches + v.idle_releases == 0:
        return ""
    cost = (
        "unpriced"
        if v.switch_unpriced or v.switch_cost_usd is None
        else f"${v.switch_cost_usd:.4f}"
    )
    return (
        f" Stickiness failures in the rows read: {v.switches:,} switches and "
        f"{v.idle_releases:,} idle releases lost {v.switch_tokens_lost:,} cache-read "
        f"tokens ({cost})."
    )


def sort_note(v: Verdict) -> str:
    """``provider.sort``, when the worse upstream differs mainly in latency or price."""
    if not (
        v.verdict in ("warranted", "not_warranted")
        and v.pinned_worse
        and not v.errors_worse
        and (v.latency_worse or v.cost_worse)
    ):
        return ""
    measure, where = ("latency", "fastest") if v.latency_worse else ("price", "cheapest")
    return (
        f' {v.pinned_upstream} differs mainly in {measure}: provider.sort = "{measure}" '
        f"keeps sticky routing and starts each new session on the {where} upstream "
        "(ADR 0221: sort picks the first upstream, the pin keeps it)."
    )


def slug_note(v: Verdict) -> str:
    if v.action is None or not v.slug_unknown_upstreams:
        return ""
    return (
        f" The slug of {', '.join(v.slug_unknown_upstreams)} is derived from its name, "
        "not known: check it on the model's OpenRouter page."
    )


def _ignore_reason(v: Verdict, judged: Judgement) -> str:
    also = "; ".join(
        f"{j.upstream} is also worse ({figures(j)}) than {j.judged_against}"
        for j in v.worse_judged[1:]
    )
    holds = "the upstreams to ignore hold" if also else "it holds"
    text = (
        f"Pinned {pinned_figures(v)} is worse ({figures(judged)}) than {best_figures(v)}; "
        f"{holds} {_pct(v.sessions_affected_share, 0)} of the pinned sessions. "
        f"Send provider {v.recommendation}: sticky routing continues and those sessions move "
        f"to the other upstreams (errors {_pct(v.ignore_error_rate, 1)}, "
        f"{_pct(v.ignore_hit_rate, 0)} cache hits, {_per_mtok(v.ignore_cost_per_mtok)}/Mtok "
        f"input, in proportion to their pinned sessions); {effect(v)}."
    )
    return text + (f" {also}." if also else "")


def _order_reason(v: Verdict, judged: Judgement) -> str:
    return (
        f"Pinned {pinned_figures(v)} is worse ({figures(judged)}) than {best_figures(v)}; "
        f"the worse upstreams hold {_pct(v.sessions_affected_share, 0)} of the pinned "
        f"sessions. Send provider {v.recommendation}: every session goes to "
        f"{v.best_upstream} first (projected {_pct(v.order_hit_rate, 0)} cache hits: its "
        f"sticky {_pct(v.order_sticky_hit_rate, 0)} minus the cold fallbacks of its "
        f"{_pct(v.order_error_rate, 1)} errors); {effect(v)}. Concentration risk: "
        f"{v.best_upstream} would take all of the model's traffic "
        f"({_pct(v.order_pinned_share, 0)} of its pinned sessions today), so its rate limits "
        "and outages become yours and each fallback starts a cold cache."
    )


def _trade_off_reason(v: Verdict, judged: Judgement) -> str:
    return (
        f"Pinned {pinned_figures(v)} is worse ({figures(judged)}) than {best_figures(v)}, "
        f"but moving its sessions costs more than it saves: {effect(v)}, above the allowed "
        f"{_signed_pct(v.max_cost_increase, 0)}. The trade-off: what {v.pinned_upstream} "
        f"does worse ({figures(judged)}) is not worth paying that much more for the traffic "
        "that would move, so provider routing is not warranted."
    )


def _insufficient_reason(v: Verdict) -> str:
    if v.pinned_upstream is None:
        return (
            "No session is pinned to a single OpenRouter upstream yet, "
            "so there is nothing to judge."
        )
    if not v.pinned_enough:
        return (
            f"Pinned upstream {v.pinned_upstream} has "
            f"{_plural(v.pinned_attempts or 0, 'attempt')} and "
            f"{_plural(v.pinned_latency_samples or 0, 'latency sample')}, "
            f"fewer than the {v.min_samples} needed."
        )
    return (
        f"Pinned upstream {v.pinned_upstream} has no alternative with at least "
        f"{v.min_samples} attempts to compare against."
    )


def reason(v: Verdict) -> str:
    """The figures behind the verdict, the projection, the trade-off, the notes."""
    if v.verdict == "does_not_apply":
        return (
            f"{v.requested_model} is not routed by OpenRouter (its attempts went to "
            f"{v.served_by}), so provider routing (order, ignore, sort) does not apply."
        )
    if v.verdict == "insufficient_data":
        return _insufficient_reason(v)
    return _judged_reason(v) + window_note(v)


def _judged_reason(v: Verdict) -> str:
    judged = v.judged
    notes = switch_note(v) + errors_note(v)
    if judged is not None and v.verdict == "warranted" and v.action == "ignore":
        return (
            _ignore_reason(v, judged)
            + sort_note(v)
            + switch_note(v)
            + slug_note(v)
            + (errors_note(v))
        )
    if judged is not None and v.verdict == "warranted":
        return (
            _order_reason(v, judged)
            + sort_note(v)
            + switch_note(v)
            + slug_note(v)
            + (errors_note(v))
        )
    if judged is not None and v.action is not None:
        return _trade_off_reason(v, judged) + sort_note(v) + notes
    unjudged = ", ".join(f"{u.upstream} ({u.attempts} attempts)" for u in v.unjudged)
    too_few = f"; too few attempts to judge {unjudged}" if unjudged else ""
    return (
        f"Pinned {pinned_figures(v)} is not worse beyond the margins ({margins(v)}) with "
        f"confidence than {best_figures(v)}: provider routing is not warranted{too_few}." + notes
    )


# -- the short phrases of the dashboard's verdict card ---------------------------------


def difference(v: Verdict) -> str | None:
    """``errors 18.0% vs 0.5%, p95 3.0 s vs 1.0 s``: pinned vs best, on what was judged
    worse (errors and latency when nothing was); error rates only when observable."""
    parts: dict[str, str] = {}
    observable = v.error_rates_observable is not False
    if observable and v.pinned_error_rate is not None and v.best_error_rate is not None:
        parts["errors"] = f"errors {_pct(v.pinned_error_rate, 1)} vs {_pct(v.best_error_rate, 1)}"
    if v.pinned_p95_ms is not None and v.best_p95_ms is not None:
        parts["latency"] = f"p95 {_s(v.pinned_p95_ms, 1)} s vs {_s(v.best_p95_ms, 1)} s"
    if v.pinned_cost_per_mtok is not None and v.best_cost_per_mtok is not None:
        parts["cost"] = (
            f"${v.pinned_cost_per_mtok:.2f} vs ${v.best_cost_per_mtok:.2f} per Mtok input"
        )
    flags = {"errors": v.errors_worse, "latency": v.latency_worse, "cost": v.cost_worse}
    worse = [k for k, flag in flags.items() if flag and k in parts]
    # nothing judged worse: the two measures a reader weighs first, not the price
    chosen = [parts[k] for k in (worse or [k for k in ("errors", "latency") if k in parts])]
    return ", ".join(chosen) if chosen else None


def route(v: Verdict, first_choice: str | None) -> str:
    """Where the sessions go: ``Amazon Bedrock → anthropic``, or why they stay.
    ``first_choice``: the first slug of an ``order`` recommendation."""
    if v.pinned_upstream is None:
        return "no pinned upstream"
    best = first_choice or v.best_upstream
    if v.verdict == "warranted" and first_choice is None and v.worse_upstreams:
        # an ignore: the sessions spread over the upstreams left, not to one of them
        return f"ignore {v.worse_upstreams}; sticky routing continues over the rest"
    if v.verdict == "warranted" and best is not None:
        return f"{v.pinned_upstream} → {best}"
    if v.verdict == "not_warranted":
        return f"{v.pinned_upstream} (keep sticky routing)"
    return f"pinned: {v.pinned_upstream}"


def monthly(v: Verdict) -> str | None:
    """``saves $14.62 a month`` at the recent traffic; None when the verdict gives none."""
    amount = v.monthly_effect_usd
    if amount is None:
        return None
    if amount < 0:
        return f"saves ${-amount:,.2f} a month"
    if amount > 0:
        return f"costs ${amount:,.2f} more a month"
    return "no change in spend"


def sessions(v: Verdict) -> str | None:
    share = v.sessions_affected_share
    return None if share is None else f"{_pct(share, 1)} of sessions affected"
