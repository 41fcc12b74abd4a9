"""The in-process guard, through the real client against a loopback server and a real ledger."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from ledger.attempt import Attempt, Call, prepare
from ledger.budgets import Budget, BudgetExceeded, BudgetGuard
from ledger.cascade import Cascade, Route
from ledger.client import AsyncClient, Client
from ledger.providers import make_provider
from ledger.store.ledger import Ledger
from tests.analytics.builders import insert_rows, row
from tests.llm_loopback import LoopbackLLM, Reply

KEY = "sk-test-abcdefghijklmnop1234"
MODEL = "gpt-4o-mini"
MESSAGES = [{"role": "user", "content": "Summarise the ticket in one line."}]
DAY1 = dt.datetime(2025, 3, 1, 23, 50, tzinfo=dt.UTC)
PLANNER_DAILY = Budget("planner_daily", "agent_day", {"limit_usd": Decimal("1")}, agent="planner")


class FakeClock:
    """The client's clock, moved by the test."""

    def __init__(self, at: dt.datetime) -> None:
        self.at = at

    def now(self) -> dt.datetime:
        return self.at

    def monotonic(self) -> float:
        return 0.0


@pytest.fixture
def server() -> Iterator[LoopbackLLM]:
    with LoopbackLLM() as srv:
        srv.default = Reply.payload("openai_chat_cached_real.json")
        yield srv


def client_for(server: LoopbackLLM, ledger: Any, guard: BudgetGuard, clock: FakeClock) -> Client:
    provider = make_provider("openai", api_key=KEY, base_url=server.url)
    return Client(providers=[provider], ledger=ledger, strict=True, guard=guard, clock=clock)


def test_guard_refuses_the_call_that_would_cross_a_daily_limit_and_lets_the_next_day_through(
    server: LoopbackLLM, ledger_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The ledger already holds $0.9995 of planner's spend today, and $5 from the day before.
    insert_rows(
        ledger_url,
        [
            row(0, actor_id="planner", cost_usd=Decimal("0.9995"), started_at=DAY1),
            row(0, actor_id="planner", cost_usd=Decimal("5"), started_at=DAY1 - dt.timedelta(1)),
        ],
    )
    clock = FakeClock(DAY1)
    guard = BudgetGuard.from_ledger(
        [PLANNER_DAILY], ledger_url, at=clock.now(), analytics_path=tmp_path / "a.duckdb"
    )
    assert guard.spent("planner_daily", "planner", "2025-03-01") == Decimal("0.9995")
    ledger = Ledger(ledger_url, journal_dir=tmp_path / "journal")
    caplog.set_level(logging.WARNING, logger="ledger.budgets.guard")
    with client_for(server, ledger, guard, clock) as client:
        for _ in range(2):
            with pytest.raises(BudgetExceeded) as info:
                client.chat(MESSAGES, model=MODEL, actor_id="planner", max_tokens=1000)
        err = info.value
        assert (err.budget, err.subject, err.window) == ("planner_daily", "planner", "2025-03-01")
        assert err.spent_usd == Decimal("0.9995") and err.limit_usd == Decimal("1")
        # 1,000 output tokens at $0.60 per million is the bulk of the worst case.
        assert Decimal("0.0006") < err.estimate_usd < Decimal("0.001")
        assert "planner_daily" in str(err) and "nothing was sent" in str(err)
        assert server.requests == []  # nothing was sent
        refusals = [r for r in caplog.records if "refused" in r.getMessage()]
        assert len(refusals) == 1  # logged once per budget and window

        # Another agent is not limited by planner's budget.
        client.chat(MESSAGES, model=MODEL, actor_id="coder", max_tokens=1000)
        # The next UTC day: planner's first call goes through.
        clock.at = DAY1 + dt.timedelta(minutes=15)
        result = client.chat(MESSAGES, model=MODEL, actor_id="planner", max_tokens=1000)
    assert len(server.requests) == 2
    assert result.cost_usd is not None
    assert guard.spent("planner_daily", "planner", "2025-03-02") == result.cost_usd
    assert ledger.flush(10)
    ledger.close()


def test_running_totals_follow_the_recorded_rows_until_the_limit(server: LoopbackLLM) -> None:
    clock = FakeClock(DAY1)
    worst = BudgetGuard([PLANNER_DAILY]).worst_case(_prep(max_tokens=200))
    provider = make_provider("openai", api_key=KEY, base_url=server.url)
    with Client(providers=[provider], ledger=_Rows(), strict=True, clock=clock) as plain:
        cost = plain.chat(MESSAGES, model=MODEL, max_tokens=200).cost_usd
    assert worst is not None and cost is not None
    # The canned answer reports a long prompt, so each row costs more than our estimate:
    # the totals must follow the recorded costs. Three rows fit; the fourth call could cross.
    limit = 3 * cost + worst / 2
    guard = BudgetGuard([Budget("d", "agent_day", {"limit_usd": limit}, agent="planner")])
    calls = 0
    client = client_for(server, _Rows(), guard, clock)
    with client, pytest.raises(BudgetExceeded) as info:
        while calls < 10:
            client.chat(MESSAGES, model=MODEL, actor_id="planner", max_tokens=200)
            calls += 1
    assert calls == 3
    assert info.value.spent_usd == 3 * cost and info.value.estimate_usd == worst
    assert guard.spent("d", "planner", "2025-03-01") == 3 * cost


class _Rows:
    def __init__(self) -> None:
        self.events: list[Any] = []

    def record(self, event: Any) -> str:
        self.events.append(event)
        return str(event.event_id)


def _prep(*, max_tokens: int | None, call_id: str = "c1", attempt: int = 1, **call: Any) -> Any:
    provider = make_provider("openai", api_key=KEY, base_url="http://127.0.0.1:9")
    target = Attempt(provider, MODEL, call_id, attempt, "openai", MODEL)
    options = {"actor_id": "planner", **call}
    return prepare(Call(MESSAGES, max_tokens=max_tokens, **options), target, stream=False)


def test_in_flight_calls_reserve_their_worst_case() -> None:
    prep = _prep(max_tokens=1000)
    guard = BudgetGuard([PLANNER_DAILY])
    worst = guard.worst_case(prep)
    assert worst is not None
    limit = worst * 3 / 2  # one worst case fits, two do not
    guard = BudgetGuard([Budget("d", "agent_day", {"limit_usd": limit}, agent="planner")])
    guard.before_send(prep, DAY1)
    with pytest.raises(BudgetExceeded) as info:
        guard.before_send(_prep(max_tokens=1000, call_id="c2"), DAY1)
    assert info.value.spent_usd == worst  # the first call, still in flight


def test_worst_case_grows_with_the_prompt_and_max_tokens() -> None:
    guard = BudgetGuard([PLANNER_DAILY])
    small = guard.worst_case(_prep(max_tokens=100))
    more_output = guard.worst_case(_prep(max_tokens=10_000))
    assert small is not None and more_output is not None and more_output > small
    default = guard.worst_case(_prep(max_tokens=None))  # default_max_tokens applies
    assert default is not None and default > small


def test_a_per_turn_max_stops_a_cascade_before_it_sends() -> None:
    guard = BudgetGuard([Budget("turn", "turn", {"max_usd": Decimal("0.0001")})])
    with LoopbackLLM() as srv:
        srv.default = Reply.payload("openai_chat_cached_real.json")
        provider = make_provider("openai", api_key=KEY, base_url=srv.url)
        client = Client(providers=[provider], ledger=_Rows(), strict=True, guard=guard)
        with client, pytest.raises(BudgetExceeded) as info:
            Cascade(client, [Route("openai", MODEL)]).chat(MESSAGES, max_tokens=1000)
        assert srv.requests == []
    assert info.value.budget == "turn" and info.value.window == info.value.subject


def test_tag_scoped_budgets_only_guard_matching_calls() -> None:
    budget = Budget("prod", "agent_day", {"limit_usd": Decimal("0")}, tags={"env": "prod"})
    guard = BudgetGuard([budget])
    guard.before_send(_prep(max_tokens=10, tags={"env": "dev"}), DAY1)  # out of scope
    with pytest.raises(BudgetExceeded):
        guard.before_send(_prep(max_tokens=10, tags={"env": "prod"}), DAY1)


def test_an_unpriced_model_is_checked_on_spend_so_far_or_refused_if_asked() -> None:
    provider = make_provider("openai", api_key=KEY, base_url="http://127.0.0.1:9")
    target = Attempt(provider, "no-such-model-xyz", "c", 1, "openai", "no-such-model-xyz")
    prep = prepare(Call(MESSAGES, max_tokens=10, actor_id="planner"), target, stream=False)
    BudgetGuard([PLANNER_DAILY]).before_send(prep, DAY1)
    with pytest.raises(BudgetExceeded, match="unknown price"):
        BudgetGuard([PLANNER_DAILY], unknown_price="refuse").before_send(prep, DAY1)


async def test_the_async_client_is_guarded_too(server: LoopbackLLM) -> None:
    guard = BudgetGuard([Budget("d", "agent_day", {"limit_usd": Decimal("0")}, agent="planner")])
    provider = make_provider("openai", api_key=KEY, base_url=server.url)
    async with AsyncClient(providers=[provider], ledger=_Rows(), strict=True, guard=guard) as c:
        with pytest.raises(BudgetExceeded):
            await c.chat(MESSAGES, model=MODEL, actor_id="planner", max_tokens=10)
        with pytest.raises(BudgetExceeded):
            async with c.stream(MESSAGES, model=MODEL, actor_id="planner", max_tokens=10):
                pass
    assert server.requests == []


def test_without_a_guard_the_client_sends_as_before(server: LoopbackLLM) -> None:
    provider = make_provider("openai", api_key=KEY, base_url=server.url)
    with Client(providers=[provider], ledger=_Rows(), strict=True) as client:
        assert client.guard is None
        client.chat(MESSAGES, model=MODEL, actor_id="planner", max_tokens=10)
    assert len(server.requests) == 1
