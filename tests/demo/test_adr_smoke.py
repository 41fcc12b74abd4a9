"""ADR 0221's smoke test, reproduced through the real client against the simulator.

The ADR ran it against the real OpenRouter: six calls of one agent session
with ``session_id`` all landed on one upstream; six without it, every task
opening with a different first message, landed on four different upstreams.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import select

from ledger.analytics import Analytics
from ledger.demo import SimulatedClients, simulated_clients
from ledger.schema import token_usage
from ledger.simulator import Simulator, VirtualClock
from ledger.store.engine import make_engine
from ledger.store.ledger import Ledger

MODEL = "qwen/qwen3-coder"  # six upstreams behind OpenRouter in the default catalog
SYSTEM = "You are the triage agent. Label the issue, then route it to one team. " * 40


@pytest.fixture
def ledger(sqlite_url: str) -> Iterator[Ledger]:
    led = Ledger(sqlite_url)
    yield led
    led.close()


@pytest.fixture(params=[0, 1, 2, 3, 4], ids=lambda seed: f"seed{seed}")
def clients(ledger: Ledger, request: pytest.FixtureRequest) -> Iterator[SimulatedClients]:
    sim = Simulator(clock=VirtualClock(), seed=request.param)  # the default catalog
    made = simulated_clients(sim, ledger, session_prefix="app", strict=True)
    yield made
    made.close()


def _six_tasks(clients: SimulatedClients, *, keyed: bool, session: str) -> list[str | None]:
    client = clients.keyed if keyed else clients.unkeyed
    upstreams = []
    for i in range(6):
        messages = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"task {i} of {session}: triage issue #{1000 + i}"},
        ]
        result = client.chat(
            messages, model=MODEL, provider="openrouter", session_id=session, actor_id="triage"
        )
        upstreams.append(result.upstream)
    return upstreams


def test_six_calls_with_the_key_land_on_one_upstream(clients: SimulatedClients) -> None:
    upstreams = _six_tasks(clients, keyed=True, session="s-42")
    assert None not in upstreams
    assert len(set(upstreams)) == 1, upstreams  # 6 of 6, as the ADR saw


def test_six_calls_without_the_key_spread_over_several_upstreams(
    clients: SimulatedClients,
) -> None:
    upstreams = _six_tasks(clients, keyed=False, session="s-43")
    assert None not in upstreams
    assert len(set(upstreams)) >= 3, upstreams  # the ADR saw 4 in 6


def test_the_ledger_and_the_analytics_tell_the_two_runs_apart(
    clients: SimulatedClients, ledger: Ledger, sqlite_url: str
) -> None:
    keyed = _six_tasks(clients, keyed=True, session="s-42")
    unkeyed = _six_tasks(clients, keyed=False, session="s-43")
    assert ledger.flush()
    engine = make_engine(sqlite_url)
    with engine.connect() as conn:
        rows = conn.execute(
            select(
                token_usage.c.session_id, token_usage.c.session_key, token_usage.c.upstream
            ).order_by(token_usage.c.id)
        ).all()
    engine.dispose()
    assert [r.upstream for r in rows] == keyed + unkeyed
    assert {r.session_key for r in rows if r.session_id == "s-42"} == {"app:s-42:triage"}
    assert {r.session_key for r in rows if r.session_id == "s-43"} == {None}

    with Analytics(sqlite_url) as analytics:
        sessions = analytics.session_stickiness().set_index("session_id")
    pinned, spread = sessions.loc["s-42"], sessions.loc["s-43"]
    assert (pinned.key_sent, pinned.distinct_upstreams, pinned.switches) == (True, 1, 0)
    assert pinned.stickiness == 1.0
    assert not spread.key_sent
    assert spread.distinct_upstreams == len(set(unkeyed)) >= 3
    assert spread.switches >= 2
