"""The budget guard's cost on the hot path: before_send + observe per attempt, in memory.

Baseline, measured in the same run: ``prepare()`` (building the request the
client sends anyway). Prints microseconds per attempt and the ratio.

    .venv/bin/python bench/bench_budget_guard.py
"""

from __future__ import annotations

import datetime as dt
import time
from decimal import Decimal

from ledger.attempt import Attempt, Call, build_event, prepare
from ledger.budgets import Budget, BudgetGuard
from ledger.pricing import Cost
from ledger.providers import make_provider

N = 5_000
NOW = dt.datetime(2025, 3, 1, 12, tzinfo=dt.UTC)
MESSAGES = [
    {"role": "system", "content": "You are a careful planner. " * 40},
    {"role": "user", "content": "Plan the next step of the migration. " * 20},
]


def main() -> None:
    provider = make_provider("openai", api_key="sk-bench", base_url="http://127.0.0.1:9")
    call = Call(MESSAGES, max_tokens=800, actor_id="planner", tags={"env": "prod"})
    budgets = [
        Budget("daily", "agent_day", {"limit_usd": Decimal("1000000")}),
        Budget("model", "model_day", {"limit_usd": Decimal("1000000")}),
        Budget("turn", "turn", {"max_usd": Decimal("10")}),
    ]
    guard = BudgetGuard(budgets)

    def target(i: int) -> Attempt:
        return Attempt(provider, "gpt-4o-mini", f"call-{i}", 1, "openai", "gpt-4o-mini")

    guard.worst_case(prepare(call, target(-1), stream=False))  # warm the price table
    t0 = time.perf_counter()
    preps = [prepare(call, target(i), stream=False) for i in range(N)]
    baseline = (time.perf_counter() - t0) / N
    events = [
        build_event(p, latency_ms=1.0, ttft_ms=None, parsed=None, error=None, http_status=200,
                    streamed=False, cost=Cost(Decimal("0.001"), "computed"))
        for p in preps
    ]  # fmt: skip
    t0 = time.perf_counter()
    for prep, event in zip(preps, events, strict=True):
        guard.before_send(prep, NOW)
        guard.observe(event)
    guarded = (time.perf_counter() - t0) / N
    print(f"prepare() baseline     : {baseline * 1e6:8.1f} us/attempt")
    print(f"guard before_send+observe: {guarded * 1e6:8.1f} us/attempt "
          f"({guarded / baseline:.2f}x the baseline; 3 budgets, no I/O)")  # fmt: skip


if __name__ == "__main__":
    main()
