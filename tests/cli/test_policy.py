"""``ledger policy``: apply says what changes, list and stop keep who/when/why, and
status measures treatment against holdout with session-clustered intervals."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from ledger.analytics.read.experiment import SessionSums, effect, ratio
from tests.analytics.builders import insert_rows, served
from tests.cli.shell import ledger
from tests.llm_loopback import LoopbackLLM, Reply

MODEL = "anthropic/claude-sonnet-4.6"


@pytest.fixture
def env(sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("LEDGER_DATABASE_URL", sqlite_url)
    monkeypatch.setenv("LEDGER_ANALYTICS_PATH", str(tmp_path / "analytics.duckdb"))
    return sqlite_url


def test_apply_list_and_stop_say_what_changes_and_keep_who_and_why(
    env: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "160")  # the list's eight columns, none folded
    applied = ledger(
        capsys, "policy", "apply", MODEL, "--provider", '{"ignore": ["amazon-bedrock"]}',
        "--holdout", "0.2", "--reason", "bedrock slow", "--by", "ana",
    )  # fmt: skip
    assert applied.code == 0, applied.err
    assert 'provider = {"ignore": ["amazon-bedrock"]}' in applied.out
    assert "80% of sessions (treatment)" in applied.out and "20% are sent as today" in applied.out
    again = ledger(capsys, "policy", "apply", MODEL, "--provider", '{"sort": "price"}')
    assert again.code == 2 and "active policy already" in again.err
    listed = ledger(capsys, "policy", "list")
    assert listed.code == 0 and "ana" in listed.out and "bedrock slow" in listed.out
    stopped = ledger(capsys, "policy", "stop", MODEL, "--reason", "measured", "--by", "bo")
    assert stopped.code == 0 and "stopped" in stopped.out
    assert ledger(capsys, "policy", "stop", MODEL).code == 2  # nothing active to stop


def test_a_bad_provider_object_is_refused_with_exit_2(
    env: str, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = ledger(capsys, "policy", "apply", MODEL, "--provider", '{"oder": ["a"]}')
    assert bad.code == 2 and "unknown provider field" in bad.err
    assert ledger(capsys, "policy", "apply", MODEL, "--provider", "{nope").code == 2


def test_status_measures_a_cheaper_treatment_beyond_its_interval(
    env: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert ledger(capsys, "policy", "apply", MODEL, "--provider", '{"sort": "price"}').code == 0
    rows = []
    for s in range(60):
        arm = "treatment" if s % 2 else "holdout"
        cost = Decimal("0.0010") if arm == "treatment" else Decimal("0.0020")
        for turn in range(3):
            rows.append(
                served(
                    s * 3 + turn,
                    "A",
                    session_id=f"s-{s}",
                    actor_id="planner",
                    requested_model=MODEL,
                    cost_usd=cost + Decimal(turn) / 100_000,
                    cost_source="provider",
                    policy_id=1,
                    arm=arm,
                )
            )
    insert_rows(env, rows)
    shown = ledger(capsys, "policy", "status", MODEL)
    assert shown.code == 0, shown.err
    assert "treatment" in shown.out and "holdout" in shown.out
    assert "costs less per attempt, beyond its interval" in shown.out


def test_the_interval_is_clustered_by_session() -> None:
    """Sessions, not calls, are the unit: ten calls of one session are one observation."""
    one_heavy = [SessionSums("treatment", 10, 0, 10, 10 * 2.0, 0, 0)] + [
        SessionSums("treatment", 1, 0, 1, 1.0, 0, 0) for _ in range(10)
    ]
    found = ratio([s.cost_usd for s in one_heavy], [s.costed for s in one_heavy])
    assert found is not None
    value, variance = found
    assert value == pytest.approx(30 / 20)
    naive = [2.0] * 10 + [1.0] * 10  # the calls as if independent
    mean = sum(naive) / 20
    naive_var = sum((x - mean) ** 2 for x in naive) / 19 / 20
    assert variance > 2 * naive_var
    no_holdout = effect(one_heavy, {})
    assert no_holdout.cost_per_attempt.value is None  # nothing to compare against


def test_status_of_a_model_without_policies_is_exit_2(
    env: str, capsys: pytest.CaptureFixture[str]
) -> None:
    result = ledger(capsys, "policy", "status", "none/model")
    assert result.code == 2 and "never had a policy" in result.err


def test_a_sticky_key_experiment_is_measured_per_agent(
    env: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--session-key``: the holdout goes without the key; status shows what the key did
    for each agent: here it halves the planner's cost and does nothing for the coder."""
    both = ledger(capsys, "policy", "apply", MODEL, "--session-key", "--provider", "{}")
    assert both.code == 2 and "one of --provider or --session-key" in both.err
    monkeypatch.setenv("COLUMNS", "160")
    applied = ledger(capsys, "policy", "apply", MODEL, "--session-key", "--holdout", "0.1")
    assert applied.code == 0, applied.err
    assert "with their sticky key in 90% of sessions" in applied.out
    assert "10% are sent without it (holdout)" in applied.out
    listed = ledger(capsys, "policy", "list")
    assert "holdout without the sticky key" in listed.out
    rows, n = [], 0
    for agent, saving in (("planner", True), ("coder", False)):
        for s in range(40):
            arm = "treatment" if s % 2 else "holdout"
            cost = Decimal("0.0010") if arm == "treatment" and saving else Decimal("0.0020")
            for turn in range(3):
                n += 1
                row = served(
                    n, "A", session_id=f"{agent}-{s}", actor_id=agent,
                    requested_model=MODEL, cost_usd=cost + Decimal(turn) / 100_000,
                    cost_source="provider", policy_id=1, arm=arm,
                )  # fmt: skip
                rows.append(row)
    insert_rows(env, rows)
    monkeypatch.setenv("COLUMNS", "100")
    shown = ledger(capsys, "policy", "status", MODEL)
    assert shown.code == 0, shown.err
    assert "the sticky key (treatment: sent, holdout: not)" in shown.out
    lines = {line.split()[0]: line for line in shown.out.splitlines() if line.strip()}
    planner, coder = lines["planner"], lines["coder"]
    assert "20 + 20 = 40" in planner and "-0.001000" in planner
    assert "+0.000000" in coder


def _arms(cost: dict[str, str], n: int = 60) -> list[Any]:
    """Sessions of policy 1 alternating between arms, three turns each, at ``cost``."""
    rows = []
    for s in range(n):
        arm = "treatment" if s % 2 else "holdout"
        for turn in range(3):
            extra = {"actor_id": "planner", "requested_model": MODEL, "policy_id": 1}
            price = Decimal(cost[arm]) + Decimal(turn) / 100_000
            session = f"s-{s}"
            rows.append(
                served(
                    s * 3 + turn,
                    "A",
                    session_id=session,
                    cost_usd=price,
                    arm=arm,
                    cost_source="provider",
                    **extra,
                )
            )
    return rows


def test_check_alerts_once_when_a_policy_is_worse_and_exits_1(
    env: str, capsys: pytest.CaptureFixture[str], server: LoopbackLLM
) -> None:
    """In cron: exit 1 says look; the webhook hears of a worse policy once, not every run,
    and its URL (a credential) is never printed."""
    server.default = Reply(body=b"ok", headers={"content-type": "text/plain"})
    hook = server.url + "/hooks/T0/B0/secret-token"
    assert ledger(capsys, "policy", "check").out.strip() == "no active routing policy"
    assert ledger(capsys, "policy", "apply", MODEL, "--provider", '{"sort": "price"}').code == 0
    insert_rows(env, _arms({"treatment": "0.0030", "holdout": "0.0020"}))
    server.queue(Reply(body=b"down", status=500))  # not delivered: the next run retries
    failed = ledger(capsys, "policy", "check", "--notify", hook, "--retries", "0")
    assert failed.code == 1 and "alert for policy 1 NOT delivered" in failed.err
    first = ledger(capsys, "policy", "check", "--notify", hook)
    assert first.code == 1
    assert f"policy 1 on {MODEL}: worse: the treatment costs more" in first.out
    assert "alert for policy 1 sent (http://127.0.0.1)" in first.err
    again = ledger(capsys, "policy", "check", "--notify", hook)
    assert again.code == 1 and "alert for policy 1 already sent" in again.err
    assert "secret-token" not in first.out + first.err + again.out + again.err
    _failed, posted = [r for r in server.requests if r.path.startswith("/hooks/")]
    body = posted.body
    assert body["ledger"]["policy_id"] == 1 and body["ledger"]["outcome"] == "worse"
    low = body["ledger"]["cost_per_attempt"][1]
    assert 0.0009 < body["ledger"]["cost_per_attempt"][0] < 0.0011 and low > 0
    assert "ledger policy stop" in body["text"]


def test_check_of_a_better_policy_exits_0_and_posts_nothing(
    env: str, capsys: pytest.CaptureFixture[str], server: LoopbackLLM
) -> None:
    server.default = Reply(body=b"ok", headers={"content-type": "text/plain"})
    assert ledger(capsys, "policy", "apply", MODEL, "--provider", '{"sort": "price"}').code == 0
    insert_rows(env, _arms({"treatment": "0.0010", "holdout": "0.0020"}))
    checked = ledger(capsys, "policy", "check", "--notify", server.url + "/hooks/x")
    assert checked.code == 0, checked.err
    assert "costs less per attempt, beyond its interval" in checked.out
    assert server.requests == []
