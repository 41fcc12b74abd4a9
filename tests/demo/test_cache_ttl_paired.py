"""The cache-lifetime advice, applied: a paired simulator run realises what it predicted.

An agent on Anthropic's Sonnet 4.5 whose turns come 6 to 9 minutes apart writes
5-minute cache entries that expire before its next turn. The same sessions (same
seed, same gaps, same prompts) run twice through the real client and the
simulator: once as recorded, once with the setting ``cache_ttl_advice`` says to
paste. The advice's projected change per turn must be within 1.5x of the change
the second run's recorded costs show.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from ledger.analytics import Analytics, AnalyticsSettings
from ledger.demo import simulated_clients
from ledger.schema import token_usage
from ledger.simulator import Simulator, VirtualClock, default_catalog
from ledger.store.engine import make_engine
from ledger.store.ledger import Ledger
from tests.analytics.builders import migrated_sqlite

MODEL = "claude-sonnet-4-5-20250929"
SYSTEM = "You are the release watcher. Check the build, then report what changed. " * 60
SESSIONS, TURNS = 12, 6


def _run(url: str, cache_control: dict[str, Any], seed: int = 3) -> None:
    """The watcher's sessions, recorded into ``url``."""
    catalog = default_catalog()  # without faults: both runs serve every turn alike
    pool = catalog.anthropic[MODEL].with_upstream("Anthropic", error_rate=0.0)
    sim = Simulator(catalog.with_pool("anthropic", pool), clock=VirtualClock(), seed=seed)
    rng = random.Random(seed)
    with Ledger(url) as ledger:
        clients = simulated_clients(sim, ledger, session_prefix="app", strict=True)
        try:
            for s in range(SESSIONS):
                messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
                for turn in range(TURNS):
                    messages.append({"role": "user", "content": f"check {s}.{turn}: " + "x" * 400})
                    result = clients.keyed.chat(
                        messages, model=MODEL, provider="anthropic", max_tokens=50,
                        session_id=f"w{s}", actor_id="watcher",
                        extra_body={"cache_control": cache_control},
                    )  # fmt: skip
                    messages.append({"role": "assistant", "content": result.content or ""})
                    sim.clock.advance(rng.uniform(6 * 60, 9 * 60))  # type: ignore[attr-defined]
                sim.clock.advance(3 * 3600)  # type: ignore[attr-defined]
        finally:
            clients.close()
        assert ledger.flush(30)


def _cost_per_turn(url: str) -> float:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            total, turns = conn.execute(
                select(func.sum(token_usage.c.cost_usd), func.count()).where(
                    token_usage.c.status == "ok"
                )
            ).one()
    finally:
        engine.dispose()
    assert turns == SESSIONS * TURNS
    return float(total) / turns


@pytest.mark.slow
def test_applying_the_advised_ttl_realises_the_predicted_change(tmp_path: Path) -> None:
    before = migrated_sqlite(tmp_path / "before.db")
    _run(before, {"type": "ephemeral"})
    with Analytics(before, path=tmp_path / "before.duckdb",
                   settings=AnalyticsSettings(min_samples=30)) as analytics:  # fmt: skip
        advice = analytics.view("cache_ttl_advice").to_dict("records")
        span = analytics.view("ledger_span").to_dict("records")[0]
    (row,) = advice
    assert (row["verdict"], row["best_ttl"]) == ("switch", "1h"), row["reason"]
    assert row["setting"] == 'cache_control: {"type": "ephemeral", "ttl": "1h"}'
    # the projection per turn: the monthly figure over the turns a month holds
    days = (span["last_at"] - span["first_at"]).total_seconds() / 86400
    predicted = row["monthly_effect_usd"] / (SESSIONS * TURNS / days * 30)
    after = migrated_sqlite(tmp_path / "after.db")
    _run(after, {"type": "ephemeral", "ttl": "1h"})
    realised = _cost_per_turn(after) - _cost_per_turn(before)
    assert realised < 0 and predicted < 0
    assert 1 / 1.5 <= predicted / realised <= 1.5, (predicted, realised)
