"""``ledger budget check`` as CI runs it, and ``ledger budget status``, over real ledgers."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from ledger.cli import cli
from tests.analytics.builders import failed, insert_rows, row

WINDOW = ["--since", "2025-03-01", "--until", "2025-03-02"]
TURN_BUDGET = """
[tool.ledger.budgets.ci_turn]
kind = "turn"
mean_usd = 0.02
"""


def turns(costs: list[str], **values: Any) -> list[dict[str, Any]]:
    """One single-attempt turn per cost, a minute apart, on 2025-03-01."""
    return [
        row(i, cost_usd=None if c is None else Decimal(c), actor_id="planner", **values)
        for i, c in enumerate(costs)
    ]


@pytest.fixture
def project(ledger_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LEDGER_DATABASE_URL", ledger_url)
    monkeypatch.setenv("LEDGER_ANALYTICS_PATH", str(tmp_path / "analytics.duckdb"))
    monkeypatch.delenv("LEDGER_BUDGETS_FILE", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text(TURN_BUDGET)
    return tmp_path


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, ["budget", *args], env={"COLUMNS": "200"})


@pytest.mark.parametrize(
    ("costs", "exit_code"),
    [
        (["0.0199"] * 9 + ["0.0200"], 0),  # mean 0.01991: just under
        (["0.0201"] * 9 + ["0.0200"], 1),  # mean 0.02009: just over
    ],
)
def test_check_exits_by_the_mean_cost_per_turn(
    project: Path, ledger_url: str, costs: list[str], exit_code: int
) -> None:
    insert_rows(ledger_url, turns(costs))
    result = run("check", *WINDOW, "--format", "json")
    assert result.exit_code == exit_code, result.output
    report = json.loads(result.stdout)
    (line,) = report["results"]
    assert line["budget"] == "ci_turn" and line["metric"] == "mean_usd"
    assert line["count"] == 10 and line["exceeded"] is bool(exit_code)
    assert report["exceeded"] == (["ci_turn"] if exit_code else [])
    mean = sum(Decimal(c) for c in costs) / 10
    assert Decimal(line["actual_usd"]) == mean
    assert Decimal(line["headroom_usd"]) == Decimal("0.02") - mean


def test_check_table_puts_the_exceeded_budget_first_with_its_reason(
    project: Path, ledger_url: str
) -> None:
    (project / "pyproject.toml").write_text(
        TURN_BUDGET
        + """
[tool.ledger.budgets.planner_daily]
kind = "agent_day"
agent = "planner"
limit_usd = 1
"""
    )
    insert_rows(ledger_url, turns(["0.05", "0.03"]))
    result = run("check", *WINDOW)
    assert result.exit_code == 1, result.output
    first = result.stdout.splitlines()[0]
    assert first.startswith("EXCEEDED ci_turn (mean_usd)")
    assert "$0.0400 exceeds $0.0200 by $0.0200" in first
    body = result.stdout[result.stdout.index("Budgets") :]
    assert body.index("ci_turn") < body.index("planner_daily")
    assert "agent planner on 2025-03-01" in result.stdout


def test_tag_scoping_checks_only_that_runs_rows(project: Path, ledger_url: str) -> None:
    insert_rows(
        ledger_url,
        turns(["0.01"] * 3, tags={"run": "ci-1"})
        + turns(["0.50"] * 2, tags={"run": "ci-2"})
        + turns(["0.90"]),  # untagged
    )
    one = run("check", *WINDOW, "--tag", "run=ci-1", "--format", "json")
    assert one.exit_code == 0, one.output
    (line,) = json.loads(one.stdout)["results"]
    assert line["count"] == 3 and Decimal(line["actual_usd"]) == Decimal("0.01")
    two = run("check", *WINDOW, "--tag", "run=ci-2", "--format", "json")
    assert two.exit_code == 1
    assert json.loads(two.stdout)["results"][0]["count"] == 2


def test_unknown_cost_rows_are_reported_not_treated_as_free(project: Path, ledger_url: str) -> None:
    rows = turns(["0.01", "0.01", None, None])  # two served turns nobody priced
    rows.append(failed(10, None, cost_usd=None))  # a refused attempt: no tokens, not billed
    insert_rows(ledger_url, rows)
    result = run("check", *WINDOW, "--format", "json")
    assert result.exit_code == 0, result.output
    (line,) = json.loads(result.stdout)["results"]
    assert (line["unknown_cost_rows"], line["unknown_cost_calls"]) == (2, 2)
    assert line["count"] == 3  # two priced turns and the free failed one
    assert "2 turn(s), 2 row(s) of unknown cost not counted" in line["reason"]
    table = run("check", *WINDOW)
    assert "2 rows of unknown cost in scope, not counted in actual" in table.stdout

    (project / "pyproject.toml").write_text(
        '[tool.ledger.budgets]\nunknown_cost = "fail"\n' + TURN_BUDGET
    )
    strict = run("check", *WINDOW, "--format", "json")
    assert strict.exit_code == 1
    assert "unknown cost" in json.loads(strict.stdout)["results"][0]["reason"]


def test_a_quiet_window_shows_no_spend_as_zero_and_no_turns_as_nothing_to_measure(
    project: Path, ledger_url: str
) -> None:
    (project / "pyproject.toml").write_text(
        TURN_BUDGET + '[tool.ledger.budgets.daily]\nkind = "agent_day"\nlimit_usd = 1\n'
    )
    insert_rows(ledger_url, turns(["0.05"]))  # on 2025-03-01, outside the window below
    quiet = ["--since", "2025-03-05", "--until", "2025-03-06"]
    report = json.loads(run("check", *quiet, "--format", "json").stdout)
    lines = {line["budget"]: line for line in report["results"]}
    assert lines["daily"]["actual_usd"] == "0" and lines["daily"]["headroom_usd"] == "1"
    assert lines["ci_turn"]["actual_usd"] is None  # a mean of no turns, not $0
    table = run("check", *quiet).stdout
    (turn_line,) = [line for line in table.splitlines() if "ci_turn" in line]
    # "unknown" is for rows nobody could price; here there is nothing to measure
    assert "unknown" not in table and "–" in turn_line
    assert "no turns in the window" in turn_line


def test_bad_configuration_exits_2_naming_file_and_key(project: Path) -> None:
    (project / "pyproject.toml").write_text(TURN_BUDGET.replace("0.02", '"cheap"'))
    result = run("check")
    assert result.exit_code == 2
    assert str(project / "pyproject.toml") in result.stderr
    assert "tool.ledger.budgets.ci_turn.mean_usd" in result.stderr
    assert "expected a number of USD >= 0" in result.stderr
    assert "Traceback" not in result.output


def test_an_agent_the_ledger_never_saw_is_a_configuration_error(
    project: Path, ledger_url: str
) -> None:
    insert_rows(ledger_url, turns(["0.01"]))
    (project / "pyproject.toml").write_text(
        '[tool.ledger.budgets.d]\nkind = "agent_day"\nagent = "planer"\nlimit_usd = 1\n'
    )
    result = run("check", *WINDOW)
    assert result.exit_code == 2
    assert "tool.ledger.budgets.d.agent" in result.stderr and "planner" in result.stderr


def test_a_config_file_with_a_budgets_table_is_read_like_ledger_toml(
    project: Path, ledger_url: str
) -> None:
    insert_rows(ledger_url, turns(["0.03"] * 3))
    (project / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    ci = project / "ci-budgets.toml"
    ci.write_text(TURN_BUDGET.replace("tool.ledger.", ""))
    result = run("check", *WINDOW, "--config", str(ci), "--format", "json")
    assert result.exit_code == 1, result.output  # mean 0.03 > 0.02: read, and exceeded
    assert json.loads(result.stdout)["exceeded"] == ["ci_turn"]
    ci.write_text(TURN_BUDGET.replace("tool.ledger.", "").replace("0.02", '"cheap"'))
    result = run("check", *WINDOW, "--config", str(ci))
    assert result.exit_code == 2 and "budgets.ci_turn.mean_usd" in result.stderr
    assert "tool.ledger.budgets" not in result.stderr
    # a file of another name in pyproject.toml's layout still reads
    ci.write_text(TURN_BUDGET)
    assert run("check", *WINDOW, "--config", str(ci)).exit_code == 1


def test_no_budgets_file_exits_2(project: Path) -> None:
    (project / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    result = run("check")
    assert result.exit_code == 2 and "no budgets file" in result.stderr


def test_an_unreachable_ledger_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ledger.toml").write_text(TURN_BUDGET.replace("tool.ledger.", ""))
    monkeypatch.setenv("LEDGER_DATABASE_URL", "postgresql://nobody@127.0.0.1:9/nothing")
    monkeypatch.setenv("LEDGER_ANALYTICS_PATH", str(tmp_path / "a.duckdb"))
    result = run("check")
    assert result.exit_code == 2, result.output
    assert "ledger budget check:" in result.stderr


def test_a_bad_window_is_a_usage_error(project: Path) -> None:
    result = run("check", "--since", "yesterday-ish")
    assert result.exit_code == 2 and "expected a duration" in result.stderr


def test_status_lists_agents_closest_to_their_daily_limit_with_projection(
    project: Path, ledger_url: str
) -> None:
    (project / "pyproject.toml").write_text(
        '[tool.ledger.budgets.daily]\nkind = "agent_day"\nlimit_usd = 10\n'
    )
    insert_rows(
        ledger_url,
        [row(i, actor_id="planner", cost_usd=Decimal("1")) for i in range(3)]  # 09:00-09:02
        + [row(i, actor_id="coder", cost_usd=Decimal("0.5")) for i in range(2)],
    )
    result = run("status", "--at", "2025-03-01T12:00:00Z", "--format", "json")
    assert result.exit_code == 0, result.output
    lines = json.loads(result.stdout)["budgets"]
    assert [line["subject"] for line in lines] == ["planner", "coder"]
    # 3 USD in the first 12 hours of the day projects 6 USD by midnight.
    assert Decimal(lines[0]["spent_usd"]) == 3 and Decimal(lines[0]["projected_usd"]) == 6
    assert lines[0]["used"] == 0.6
    table = run("status", "--at", "2025-03-01T12:00:00Z")
    assert "planner" in table.stdout and "$6.0000" in table.stdout


def test_agent_names_in_budget_tables_are_shown_escaped_not_run_or_styled(
    project: Path, ledger_url: str
) -> None:
    (project / "pyproject.toml").write_text(
        '[tool.ledger.budgets.daily]\nkind = "agent_day"\nlimit_usd = 1\n'
    )
    agent = "\u202eplanner[bold]\x1b[2J"  # a bidi override, rich markup, a clear-screen
    insert_rows(ledger_url, [row(i, actor_id=agent, cost_usd=Decimal("1")) for i in range(3)])
    status = run("status", "--at", "2025-03-01T12:00:00Z")
    check = run("check", *WINDOW)
    assert (status.exit_code, check.exit_code) == (0, 1), (status.output, check.output)
    for output in (status.stdout, check.stdout):
        assert "\\u202eplanner[bold]\\x1b[2J" in output
        assert not {"\u202e", "\x1b"} & set(output)
