"""Day budgets hold across gateway processes (``budgets = true`` with ``redis_url``): two
real ``ledger gateway`` processes, one shared Redis, calls alternating between them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import httpx
import pytest
import redis
from sqlalchemy import create_engine, text

from ledger.gateway import hash_key
from ledger.simulator import Simulator
from ledger.simulator.server import free_port
from tests.gateway.conftest import KEY
from tests.gateway.test_serve import _wait_up
from tests.resilience.conftest import redis_url  # noqa: F401  (the fixture: skips or fails in CI)

LIMIT = Decimal("0.0001")
ROOT = Path(__file__).resolve().parents[2]


def _config(path: Path, upstream: str, redis_at: str, budget: str) -> Path:
    path.write_text(
        f"""
[gateway]
passthrough = ["openai"]
budgets = true
redis_url = "{redis_at}"

[gateway.providers.openai]
base_url = "{upstream}/v1"
api_key_env = "GW_OPENAI_KEY"

[gateway.keys.search]
sha256 = "{hash_key(KEY)}"

[budgets.{budget}]
kind = "agent_day"
agent = "planner"
limit_usd = {LIMIT}
"""
    )
    return path


@pytest.fixture
def two_gateways(
    tmp_path: Path,
    sqlite_url: str,
    sim: tuple[Simulator, str],
    redis_url: str,  # noqa: F811
) -> Iterator[tuple[list[str], str]]:
    budget = f"planner_daily_{uuid.uuid4().hex[:8]}"  # its own fields in the shared Redis
    config = _config(tmp_path / "ledger.toml", sim[1], redis_url, budget)
    env = {
        **os.environ,
        "LEDGER_DATABASE_URL": sqlite_url,
        "GW_OPENAI_KEY": "sk-provider-1",
        # The processes run this checkout's ledger, not whichever one is installed.
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    subprocess.run(
        [str(Path(sys.executable).with_name("ledger")), "db", "upgrade"], env=env, check=True
    )
    processes: list[subprocess.Popen[str]] = []
    urls: list[str] = []
    try:
        for _ in range(2):
            port = free_port()
            args = ["gateway", "--config", str(config), "--port", str(port), "--no-access-log"]
            processes.append(
                subprocess.Popen(
                    [str(Path(sys.executable).with_name("ledger")), *args],
                    env=env,
                    cwd=tmp_path,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
            urls.append(f"http://127.0.0.1:{port}")
        for url, process in zip(urls, processes, strict=True):
            _wait_up(url, process)
        yield urls, sqlite_url
    finally:
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)  # drains and flushes the ledger
        for process in processes:
            try:
                process.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.communicate()
        client = redis.Redis.from_url(redis_url)
        for key in client.scan_iter("ledger:gateway:budget:*"):
            if client.type(key) == b"hash":
                fields = [f for f in client.hkeys(key) if f.startswith(budget.encode())]
                if fields:
                    client.hdel(key, *fields)
            if budget.encode() in key:
                client.delete(key)
        client.close()


def test_a_day_budget_holds_across_two_gateway_processes(
    two_gateways: tuple[list[str], str],
) -> None:
    urls, ledger_url = two_gateways
    body = {
        "model": "openai/gpt-4o-mini",
        "max_tokens": 8,
        "messages": [{"role": "user", "content": "Name three rivers in Europe, please."}],
    }
    headers = {"authorization": f"Bearer {KEY}", "x-actor-id": "planner"}
    served = [0, 0]
    refused = [False, False]
    with httpx.Client(timeout=30) as client:
        for turn in range(80):  # alternating; the budget allows a few dozen calls at most
            which = turn % 2
            answer = client.post(f"{urls[which]}/v1/chat/completions", json=body, headers=headers)
            if answer.status_code == 429:
                assert answer.json()["error"]["code"] == "budget_exceeded"
                refused[which] = True
                if all(refused):
                    break
                continue
            assert answer.status_code == 200, answer.text
            served[which] += 1
    assert all(refused), served
    assert min(served) >= 2, served  # both processes spent
    spent = _spend(ledger_url)
    # Each process counting alone lets the day reach LIMIT in each (about twice LIMIT in
    # all, as measured before the totals were shared): together they stay within it.
    assert 0 < spent <= LIMIT, spent


def _spend(ledger_url: str) -> Decimal:
    """The planner's recorded spend, once both processes flushed their rows (polled: the
    background writers commit shortly after each call)."""
    engine = create_engine(ledger_url)
    try:
        for _ in range(300):
            with engine.connect() as conn:
                total, count = conn.execute(
                    text(
                        "SELECT SUM(cost_usd), COUNT(*) FROM token_usage "
                        "WHERE actor_id = 'planner' AND status = 'ok'"
                    )
                ).one()
            if count and total is not None:
                last = Decimal(str(total))
                with engine.connect() as conn:
                    again = conn.execute(
                        text("SELECT COUNT(*) FROM token_usage WHERE actor_id = 'planner'")
                    ).scalar_one()
                if again == count:
                    return last
            subprocess.run(["sleep", "0.1"], check=True)
    finally:
        engine.dispose()
    raise AssertionError("no rows reached the ledger")
