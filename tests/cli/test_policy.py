"""``ledger policy``: apply says what changes, list and stop keep who/when/why, and
status measures treatment against holdout with session-clustered intervals."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from ledger.analytics.read.experiment import SessionSums, effect, ratio
from tests.analytics.builders import insert_rows, served
from tests.cli.shell import ledger

MODEL = "anthropic/claude-sonnet-4.6"


@pytest.fixture
def env(sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("LEDGER_DATABASE_URL", sqlite_url)
    monkeypatch.setenv("LEDGER_ANALYTICS_PATH", str(tmp_path / "analytics.duckdb"))
    return sqlite_url


def test_apply_list_and_stop_say_what_changes_and_keep_who_and_why(
    env: str, capsys: pytest.CaptureFixture[str]
) -> None:
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
