"""Pure arithmetic over view results: the headline figures pages show as metrics.

Rates are recomputed from summed counts (never averaged), as the views do;
money sums only known costs and is ``None`` when none is known.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any, Final

import pandas as pd  # type: ignore[import-untyped]


def ratio(numerator: float, denominator: float) -> float | None:
    return None if not denominator else float(numerator) / float(denominator)


def total_usd(values: pd.Series) -> Decimal | None:
    """The sum of the known amounts; ``None`` when no amount is known."""
    known = [Decimal(v) for v in values if v is not None and not pd.isna(v)]
    return sum(known, Decimal(0)) if known else None


NO_KEY_HELP: Final = (
    "Sessions of the models the key was sent for, without it: models served directly "
    "never get the key and are left out."
)


def keyable(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of the models some session sent the sticky key with.

    The client sends the key only where it means something (OpenRouter); a model
    served directly (OpenAI, Anthropic) never has it, and its sessions, sticky by
    construction, would flatter "without the key". When no session sent a key
    there is nothing to compare, and every row stays.
    """
    models = frame.loc[frame["key_sent"].eq(True), "requested_model"]
    return frame[frame["requested_model"].isin(models)] if len(models) else frame


def by_key_sent(frame: pd.DataFrame, numerator: str, denominator: str) -> dict[bool, float | None]:
    """``sum(numerator) / sum(denominator)`` for rows sent with and without a key, over the
    models the key applies to (:func:`keyable`)."""
    frame = keyable(frame)
    result: dict[bool, float | None] = {}
    for sent in (True, False):
        part = frame[frame["key_sent"] == sent]
        result[sent] = ratio(part[numerator].sum(), part[denominator].sum())
    return result


def stickiness_by_key(agent_stickiness: pd.DataFrame) -> dict[bool, float | None]:
    """Stickiness with and without the key: 1 - switches / window transitions."""
    shares = by_key_sent(agent_stickiness, "switches", "window_transitions")
    return {sent: None if share is None else 1 - share for sent, share in shares.items()}


def sessions_by_key(agent_stickiness: pd.DataFrame) -> dict[bool, int]:
    """Sessions with and without the key, over the models the key applies to."""
    frame = keyable(agent_stickiness)
    return {
        sent: int(frame.loc[frame["key_sent"] == sent, "sessions"].sum()) for sent in (True, False)
    }


def hit_rate_by_key(cache_hits: pd.DataFrame) -> dict[bool, float | None]:
    """Token hit rate (cache reads / input tokens) with and without the key."""
    return by_key_sent(cache_hits, "cache_read_tokens", "input_tokens")


def by_upstream(cache_hits: pd.DataFrame) -> pd.DataFrame:
    """``cache_hits`` summed over agents and models: one row per upstream and key_sent."""
    grouped = cache_hits.groupby(["upstream", "key_sent"], as_index=False, dropna=False)[
        [
            "calls",
            "reported_calls",
            "input_tokens",
            "cache_read_tokens",
            "hit_calls",
            "response_cache_hits",
        ]
    ].sum()
    grouped["token_hit_rate"] = grouped["cache_read_tokens"] / grouped["input_tokens"].where(
        grouped["input_tokens"] > 0
    )
    # Over the attempts whose usage was reported: a missing usage is no miss.
    reported = grouped["reported_calls"]
    grouped["call_hit_rate"] = grouped["hit_calls"] / reported.where(reported > 0)
    return grouped.sort_values(["upstream", "key_sent"], ascending=[True, False])


def label_key_sent(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy with a readable ``session key`` column for chart legends."""
    labelled = frame.copy()
    labelled["session key"] = labelled["key_sent"].map({True: "sent", False: "not sent"})
    return labelled


def fill_agent(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy whose missing ``actor_id`` reads "(no agent)" (charts drop nulls)."""
    filled = frame.copy()
    filled["actor_id"] = filled["actor_id"].fillna("(no agent)")
    return filled


def first_value(frame: pd.DataFrame, column: str) -> Any:
    return None if frame.empty else frame[column].iloc[0]


def call_hit_rate(by_agent: pd.DataFrame) -> float | None:
    """Served attempts that read the cache / those whose usage was reported, over
    ``cache_hits_by_agent`` rows."""
    return ratio(by_agent["hit_calls"].sum(), by_agent["reported_calls"].sum())


#: Bucket widths a timeline may use, smallest first.
BUCKETS: Final = (
    dt.timedelta(minutes=1),
    dt.timedelta(minutes=5),
    dt.timedelta(minutes=15),
    dt.timedelta(hours=1),
    dt.timedelta(hours=6),
    dt.timedelta(days=1),
    dt.timedelta(days=7),
)
MAX_BUCKETS: Final = 200


def bucket_for(span: dt.timedelta) -> dt.timedelta:
    """The smallest bucket that draws ``span`` in at most MAX_BUCKETS bars."""
    for width in BUCKETS:
        if span / width <= MAX_BUCKETS:
            return width
    return BUCKETS[-1]
