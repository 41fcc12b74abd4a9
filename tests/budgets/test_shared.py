"""Day budgets through Redis: two guards (as two workers would hold) share one total."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from decimal import Decimal

import pytest
import redis

from ledger.budgets import Budget, BudgetExceeded, BudgetGuard
from ledger.budgets.shared import SharedBudgetGuard
from ledger.events import UsageEvent
from ledger.resilience import RedisConnections
from tests.budgets.test_guard import DAY1, _prep
from tests.resilience.conftest import redis_url  # noqa: F401  (the fixture: skips or fails in CI)


@pytest.fixture
def prefix(redis_url: str) -> Iterator[str]:  # noqa: F811
    name = f"ledger:test:{uuid.uuid4().hex[:8]}:"
    yield name
    client = redis.Redis.from_url(redis_url)
    for key in client.scan_iter(f"{name}*"):
        client.delete(key)
    client.close()


def _row(prep: object, cost: Decimal) -> UsageEvent:
    target = prep.target  # type: ignore[attr-defined]
    return UsageEvent(
        started_at=DAY1,
        requested_provider="openai",
        requested_model=target.requested_model,
        provider="openai",
        status="ok",
        call_id=target.call_id,
        attempt=target.attempt,
        actor_id="planner",
        cost_usd=cost,
    )


async def test_a_worker_sees_what_another_spent_and_has_in_flight(
    redis_url: str,  # noqa: F811
    prefix: str,
) -> None:
    first_prep = _prep(max_tokens=1000)
    worst = BudgetGuard([]).worst_case(first_prep)
    assert worst is not None
    limit = worst * 3 / 2  # one worst case fits, two do not
    budget = Budget("d", "agent_day", {"limit_usd": limit}, agent="planner")
    connections = RedisConnections(redis_url)
    one, two = (
        SharedBudgetGuard(BudgetGuard([budget]), connections, prefix=prefix) for _ in range(2)
    )
    await one.abefore_send(first_prep, DAY1)
    with pytest.raises(BudgetExceeded) as refused:  # the first call is in flight elsewhere
        await two.abefore_send(_prep(max_tokens=1000, call_id="c2"), DAY1)
    assert refused.value.spent_usd == worst
    one.observe(_row(first_prep, worst / 4))  # its row: the reservation gives way to the cost
    await one.drain()
    await two.abefore_send(_prep(max_tokens=1000, call_id="c3"), DAY1)
    await connections.aclose()
    connections.close()


async def test_without_redis_each_worker_counts_alone_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    prep = _prep(max_tokens=1000)
    worst = BudgetGuard([]).worst_case(prep)
    assert worst is not None
    budget = Budget("d", "agent_day", {"limit_usd": worst * 3 / 2}, agent="planner")
    connections = RedisConnections("redis://127.0.0.1:1/0")  # nothing listens there
    guard = SharedBudgetGuard(BudgetGuard([budget]), connections, prefix="ledger:none:")
    with caplog.at_level(logging.WARNING, "ledger.resilience"):
        await guard.abefore_send(prep, DAY1)
    assert "Redis unreachable" in caplog.text
    with pytest.raises(BudgetExceeded):  # the in-process guard still holds the limit
        await guard.abefore_send(_prep(max_tokens=1000, call_id="c2"), DAY1)
    connections.close()
