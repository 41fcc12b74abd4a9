"""Budgets files: where they are found, what they hold, and one clear error per mistake."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from ledger.budgets import BudgetConfigurationError, find_config, load_config
from ledger.budgets.config import ENV_BUDGETS_FILE

GOOD = """
[tool.ledger.budgets]
agents = ["planner", "coder"]

[tool.ledger.budgets.ci_turn]
kind = "turn"
mean_usd = 0.02
p95_usd = 0.05
tags = { env = "ci", shard = 3, nightly = true }

[tool.ledger.budgets.planner_daily]
kind = "agent_day"
agent = "planner"
limit_usd = 5

[tool.ledger.budgets.gpt_daily]
kind = "model_day"
model = "gpt-4o"
limit_usd = 20.10
"""


@pytest.fixture(autouse=True)
def no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_BUDGETS_FILE, raising=False)


def write(directory: Path, name: str, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(text)
    return path


def test_pyproject_budgets_are_read_exactly(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, "pyproject.toml", GOOD))
    assert [b.name for b in config.budgets] == ["ci_turn", "planner_daily", "gpt_daily"]
    turn = config.budget("ci_turn")
    assert turn.limits == {"mean_usd": Decimal("0.02"), "p95_usd": Decimal("0.05")}
    assert dict(turn.tags) == {"env": "ci", "shard": "3", "nightly": "true"}
    assert config.budget("gpt_daily").limits["limit_usd"] == Decimal("20.10")
    assert config.budget("planner_daily").agent == "planner"
    assert config.agents == ("planner", "coder") and config.unknown_cost == "report"


def test_ledger_toml_wins_over_pyproject_in_the_same_directory(tmp_path: Path) -> None:
    write(tmp_path, "pyproject.toml", GOOD)
    write(tmp_path, "ledger.toml", '[budgets.only]\nkind = "turn"\nmax_usd = 1\n')
    assert find_config(tmp_path) == tmp_path / "ledger.toml"
    assert [b.name for b in load_config(start=tmp_path).budgets] == ["only"]


def test_the_nearest_directory_wins_and_a_pyproject_without_budgets_is_skipped(
    tmp_path: Path,
) -> None:
    write(tmp_path, "pyproject.toml", GOOD)
    inner = tmp_path / "pkg" / "sub"
    write(tmp_path / "pkg", "pyproject.toml", "[project]\nname = 'pkg'\n")
    inner.mkdir()
    assert find_config(inner) == tmp_path / "pyproject.toml"
    write(inner, "ledger.toml", '[budgets.x]\nkind = "turn"\nmax_usd = 1\n')
    assert find_config(inner) == inner / "ledger.toml"


def test_the_environment_names_the_file_over_discovery(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path, "ledger.toml", '[budgets.x]\nkind = "turn"\nmax_usd = 1\n')
    other = write(tmp_path / "elsewhere", "budgets.toml", "")
    monkeypatch.setenv(ENV_BUDGETS_FILE, str(other))
    assert find_config(tmp_path) == other


BUDGET = '[tool.ledger.budgets.b]\nkind = "agent_day"\nlimit_usd = 1\n'


@pytest.mark.parametrize(
    ("text", "key", "expected"),
    [
        pytest.param(
            BUDGET.replace("limit_usd", "limt_usd"),
            "tool.ledger.budgets.b.limt_usd",
            "one of kind, limit_usd, agent, model, tags",
            id="unknown-budget-key",
        ),
        pytest.param(BUDGET.replace("= 1", "= = 1"), "(file)", "valid TOML", id="toml-syntax"),
        pytest.param(
            "[tool.ledger.budgets]\nagentz = ['a']\n" + BUDGET,
            "tool.ledger.budgets.agentz",
            "a budget table or a setting",
            id="unknown-setting",
        ),
        pytest.param(
            BUDGET.replace("= 1", "= -0.5"),
            "tool.ledger.budgets.b.limit_usd",
            "a number of USD >= 0",
            id="negative-limit",
        ),
        pytest.param(
            BUDGET.replace("= 1", '= "lots"'),
            "tool.ledger.budgets.b.limit_usd",
            "a number of USD >= 0",
            id="non-numeric-limit",
        ),
        pytest.param(
            BUDGET.replace("= 1", "= nan"),
            "tool.ledger.budgets.b.limit_usd",
            "a number of USD >= 0",
            id="nan-limit",
        ),
        pytest.param(
            BUDGET.replace('"agent_day"', '"hourly"'),
            "tool.ledger.budgets.b.kind",
            "one of turn, agent_day, model_day",
            id="unknown-kind",
        ),
        pytest.param(
            BUDGET.replace("limit_usd = 1", "agent = 'planner'"),
            "tool.ledger.budgets.b",
            "a limit (limit_usd)",
            id="no-limit",
        ),
        pytest.param(
            BUDGET + "mean_usd = 0.1\n",
            "tool.ledger.budgets.b.mean_usd",
            "for a agent_day budget",
            id="limit-of-another-kind",
        ),
        pytest.param(
            '[tool.ledger.budgets]\nagents = ["planner"]\n' + BUDGET + 'agent = "planer"\n',
            "tool.ledger.budgets.b.agent",
            "one of the agents in the agents list (planner)",
            id="unknown-agent",
        ),
        pytest.param(
            BUDGET + "agent = 7\n",
            "tool.ledger.budgets.b.agent",
            "an agent id",
            id="agent-not-a-string",
        ),
        pytest.param(
            BUDGET + "tags = { env = ['a'] }\n",
            "tool.ledger.budgets.b.tags.env",
            "a string, number or boolean",
            id="tag-not-a-scalar",
        ),
        pytest.param(
            "[tool.ledger.budgets]\nunknown_cost = 'ignore'\n" + BUDGET,
            "tool.ledger.budgets.unknown_cost",
            '"report" or "fail"',
            id="unknown-cost-policy",
        ),
        pytest.param(
            "[tool.ledger.budgets]\nagents = []\n",
            "tool.ledger.budgets",
            "at least one budget table",
            id="no-budgets",
        ),
    ],
)
def test_each_bad_configuration_names_file_key_and_expectation(
    tmp_path: Path, text: str, key: str, expected: str
) -> None:
    path = write(tmp_path, "pyproject.toml", text)
    with pytest.raises(BudgetConfigurationError) as info:
        config = load_config(path)
        config.check_agents(set())
    err = info.value
    assert err.path == str(path) and err.key == key
    assert expected in err.expected
    assert str(err).startswith(f"{path}: {key}: expected ")


def test_ledger_toml_errors_use_its_own_table_names(tmp_path: Path) -> None:
    path = write(tmp_path, "ledger.toml", '[budgets.b]\nkind = "turn"\nmean_usd = -1\n')
    with pytest.raises(BudgetConfigurationError, match=r"ledger.toml: budgets\.b\.mean_usd"):
        load_config(path)


def test_an_agent_unknown_to_the_ledger_is_rejected_once_it_has_agents(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, "pyproject.toml", BUDGET + 'agent = "planer"\n'))
    config.check_agents(set())  # an empty ledger has no agents to compare with yet
    with pytest.raises(BudgetConfigurationError) as info:
        config.check_agents({"planner", "coder"})
    assert info.value.key == "tool.ledger.budgets.b.agent"
    assert "in the ledger (coder, planner)" in str(info.value) and "'planer'" in str(info.value)


def test_a_missing_table_in_a_named_file_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, "ledger.toml", "[something]\n")
    with pytest.raises(BudgetConfigurationError, match="no such table"):
        load_config(path)


def test_no_file_anywhere_says_where_budgets_go(tmp_path: Path) -> None:
    with pytest.raises(BudgetConfigurationError, match=r"\[tool.ledger.budgets\] table in"):
        load_config(start=tmp_path / "nowhere")
