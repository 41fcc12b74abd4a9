"""Budgets as configuration: where they are read from, what they may say, and the checks.

Where (first found wins, never merged)::

    1. an explicit path (``ledger budget check --config FILE``, ``load_config(path=…)``)
    2. the file named by ``LEDGER_BUDGETS_FILE``

    A file given by path is read like ``ledger.toml`` (table ``[budgets]``)
    unless it is named ``pyproject.toml`` or has no ``[budgets]`` table but a
    ``[tool.ledger.budgets]`` one.
    3. the nearest directory, from the working directory upwards, holding
       ``ledger.toml`` (table ``[budgets]``) or a ``pyproject.toml`` with a
       ``[tool.ledger.budgets]`` table; when one directory holds both,
       ``ledger.toml`` wins (as ``ruff.toml`` beats ``pyproject.toml``).

What::

    [tool.ledger.budgets]              # in ledger.toml: [budgets]
    agents = ["planner", "coder"]      # optional: the agents budgets may name (typo guard)
    unknown_cost = "report"            # or "fail": rows of unknown cost fail their budget
    warn_at = 0.8                      # optional: default warning threshold (share of a limit)

    [tool.ledger.budgets.ci_turn]      # one sub-table per budget; its name is the table's
    kind = "turn"                      # a call (all its attempts): mean_usd, p95_usd, max_usd
    mean_usd = 0.02
    p95_usd = 0.05
    tags = { env = "ci" }              # scope: only rows carrying these tags

    [tool.ledger.budgets.planner_daily]
    kind = "agent_day"                 # per agent per UTC day: limit_usd
    agent = "planner"                  # optional: without it, every agent has this limit
    limit_usd = 5
    warn_at = 0.9                      # optional: warn at 90 % (overrides the default)

    [tool.ledger.budgets.gpt4o_daily]
    kind = "model_day"                 # per requested model per UTC day: limit_usd
    model = "gpt-4o"
    limit_usd = 20

Every budget may be scoped by ``agent``, ``model`` (the requested model) and
``tags``. ``warn_at`` (a share of the limit, above 0 and below 1) is where
``ledger budget check --notify`` and ``ledger budget watch`` send a warning
before the limit itself. Limits are USD, read exactly (TOML floats become ``Decimal``).
Any mistake raises :class:`~ledger.errors.BudgetConfigurationError` naming the
file, the dotted key and what was expected.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Final, Literal, NoReturn, cast

from ledger.errors import BudgetConfigurationError

ENV_BUDGETS_FILE: Final = "LEDGER_BUDGETS_FILE"
LEDGER_TOML: Final = "ledger.toml"
PYPROJECT: Final = "pyproject.toml"
#: The budgets' table in each kind of file.
LEDGER_TOML_KEY: Final = "budgets"
PYPROJECT_KEY: Final = "tool.ledger.budgets"

Kind = Literal["turn", "agent_day", "model_day"]
UnknownCost = Literal["report", "fail"]

#: The limits each kind accepts (at least one is required).
LIMITS: Final[dict[str, tuple[str, ...]]] = {
    "turn": ("mean_usd", "p95_usd", "max_usd"),
    "agent_day": ("limit_usd",),
    "model_day": ("limit_usd",),
}
SCOPE_KEYS: Final = ("agent", "model", "tags")
ALERT_KEYS: Final = ("warn_at",)
SETTINGS: Final = ("agents", "unknown_cost", "warn_at")
UNKNOWN_COST_CHOICES: Final = ("report", "fail")


def tag_text(value: Any) -> str:
    """A tag value as text, the way DuckDB's ``json_extract_string`` renders it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclass(frozen=True, slots=True)
class Budget:
    """One named budget: what it limits (``kind``, ``limits``) and over which rows (scope)."""

    name: str
    kind: Kind
    limits: Mapping[str, Decimal]
    agent: str | None = None
    model: str | None = None
    tags: Mapping[str, str] = field(default_factory=dict)
    #: Warn when a figure reaches this share of its limit (None: alert at the limit only).
    warn_at: Decimal | None = None

    @property
    def per_day(self) -> bool:
        return self.kind != "turn"

    def applies_to(self, actor_id: str | None, model: str, tags: Mapping[str, Any] | None) -> bool:
        """Whether a call with these labels falls in this budget's scope."""
        if self.agent is not None and actor_id != self.agent:
            return False
        if self.model is not None and model != self.model:
            return False
        have = tags or {}
        return all(k in have and tag_text(have[k]) == v for k, v in self.tags.items())

    @property
    def by(self) -> Literal["agent", "model"]:
        """What a per-day budget counts separately."""
        return "agent" if self.kind == "agent_day" else "model"

    def subject_of(self, actor_id: str | None, model: str) -> str:
        """What a per-day budget counts separately: the agent or the requested model."""
        if self.kind == "agent_day":
            return actor_id or ""
        return model


@dataclass(frozen=True, slots=True)
class BudgetConfig:
    """Every budget of one file, and the file's settings."""

    budgets: tuple[Budget, ...]
    source: Path | None = None
    agents: tuple[str, ...] | None = None
    unknown_cost: UnknownCost = "report"
    #: The dotted name of the table the budgets came from, for messages.
    table_key: str = PYPROJECT_KEY

    def budget(self, name: str) -> Budget:
        for b in self.budgets:
            if b.name == name:
                return b
        raise KeyError(name)

    def check_agents(self, known: set[str]) -> None:
        """Reject a budget naming an agent outside ``known`` (declared ones, else the ledger's)."""
        allowed = set(self.agents) if self.agents is not None else known
        if self.agents is None and not known:
            return  # an empty ledger knows no agent yet: nothing to compare with
        for b in self.budgets:
            if b.agent is not None and b.agent not in allowed:
                where = "the agents list" if self.agents is not None else "the ledger"
                _fail(
                    self.source,
                    f"{self.table_key}.{b.name}.agent",
                    f"one of the agents in {where} ({', '.join(sorted(allowed))})",
                    b.agent,
                )


# -- reading ------------------------------------------------------------------


def _prefix(path: Path | None) -> str:
    return LEDGER_TOML_KEY if path is not None and path.name == LEDGER_TOML else PYPROJECT_KEY


def _table_key(path: Path, document: Mapping[str, Any]) -> str:
    """Where ``path`` keeps its budgets: ``[tool.ledger.budgets]`` in a pyproject.toml,
    ``[budgets]`` in ledger.toml and in any other file that has that table."""
    if path.name == PYPROJECT:
        return PYPROJECT_KEY
    if path.name == LEDGER_TOML or LEDGER_TOML_KEY in document:
        return LEDGER_TOML_KEY
    return PYPROJECT_KEY


def _fail(
    path: Path | None, key: str, expected: str, got: Any, *, said: str | None = None
) -> NoReturn:
    """Raise the error naming the file, the key, what was expected and what was found."""
    where = str(path) if path is not None else "<budgets>"
    raise BudgetConfigurationError(
        f"{where}: {key}: expected {expected}, got {said or repr(got)}",
        path=where,
        key=key,
        expected=expected,
    )


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text("utf-8")
    except OSError as exc:
        _fail(path, "(file)", "a readable TOML file", None, said=f"{exc.strerror}")
    try:
        return tomllib.loads(text, parse_float=Decimal)
    except tomllib.TOMLDecodeError as exc:
        _fail(path, "(file)", "valid TOML", None, said=f"a syntax error ({exc})")
    raise AssertionError("unreachable")


def _budgets_table(path: Path, document: Mapping[str, Any]) -> Any:
    if _table_key(path, document) == LEDGER_TOML_KEY:
        return document.get(LEDGER_TOML_KEY)
    return document.get("tool", {}).get("ledger", {}).get("budgets")


def _has_budgets(path: Path) -> bool:
    try:
        document = tomllib.loads(path.read_text("utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return True  # let load_config say what is wrong with it
    return _budgets_table(path, document) is not None


def find_config(start: Path | None = None) -> Path | None:
    """The budgets file that applies from ``start`` (default: the working directory)."""
    if env := os.environ.get(ENV_BUDGETS_FILE):
        return Path(env)
    here = (start or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        if (directory / LEDGER_TOML).is_file():
            return directory / LEDGER_TOML
        pyproject = directory / PYPROJECT
        if pyproject.is_file() and _has_budgets(pyproject):
            return pyproject
    return None


def load_config(path: Path | None = None, *, start: Path | None = None) -> BudgetConfig:
    """Read and check the budgets of ``path`` (else of :func:`find_config`)."""
    chosen = path if path is not None else find_config(start)
    if chosen is None:
        _fail(
            None,
            "tool.ledger.budgets",
            f"a [tool.ledger.budgets] table in {PYPROJECT} or a [budgets] table in {LEDGER_TOML} "
            f"(or a file named by {ENV_BUDGETS_FILE})",
            None,
            said="no budgets file",
        )
    document = _read_toml(chosen)
    key = _table_key(chosen, document)
    table = _budgets_table(chosen, document)
    if table is None:
        _fail(chosen, key, "a table of budgets", None, said="no such table")
    return parse_config(table, chosen, table_key=key)


def parse_config(
    table: Any, path: Path | None = None, *, table_key: str | None = None
) -> BudgetConfig:
    """Check one budgets table (as parsed from TOML) and build the configuration.

    ``table_key`` names the table in messages (default: by the file's name).
    """
    prefix = table_key or _prefix(path)
    if not isinstance(table, Mapping):
        _fail(path, prefix, "a table of budgets", table)
    budgets: list[Budget] = []
    default_warn = _warn_at(path, f"{prefix}.warn_at", table.get("warn_at"))
    for name, value in table.items():
        if isinstance(value, Mapping):
            budgets.append(_budget(path, f"{prefix}.{name}", name, value, default_warn))
        elif name not in SETTINGS:
            expected = f"a budget table or a setting ({', '.join(SETTINGS)})"
            _fail(path, f"{prefix}.{name}", expected, None, said="an unknown key")
    if not budgets:
        _fail(path, prefix, "at least one budget table", None, said="none")
    return BudgetConfig(
        budgets=tuple(budgets),
        source=path,
        agents=_agents(path, prefix, table.get("agents")),
        unknown_cost=_unknown_cost(path, prefix, table.get("unknown_cost", "report")),
        table_key=prefix,
    )


def _agents(path: Path | None, prefix: str, value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(a, str) and a for a in value):
        _fail(path, f"{prefix}.agents", "a list of agent ids (strings)", value)
    return tuple(value)


def _unknown_cost(path: Path | None, prefix: str, value: Any) -> UnknownCost:
    if value not in UNKNOWN_COST_CHOICES:
        _fail(path, f"{prefix}.unknown_cost", '"report" or "fail"', value)
    return "fail" if value == "fail" else "report"


def _limit(path: Path | None, key: str, value: Any) -> Decimal:
    expected = "a number of USD >= 0"
    if isinstance(value, bool) or not isinstance(value, int | Decimal):
        _fail(path, key, expected, value)
    amount = Decimal(value)
    if not amount.is_finite() or amount < 0:
        _fail(path, key, expected, value)
    return amount


def _warn_at(path: Path | None, key: str, value: Any) -> Decimal | None:
    if value is None:
        return None
    expected = "a share of the limit above 0 and below 1 (e.g. 0.8)"
    if isinstance(value, bool) or not isinstance(value, int | Decimal):
        _fail(path, key, expected, value)
    share = Decimal(value)
    if not share.is_finite() or not 0 < share < 1:
        _fail(path, key, expected, value)
    return share


def _budget(
    path: Path | None,
    key: str,
    name: str,
    table: Mapping[str, Any],
    default_warn: Decimal | None = None,
) -> Budget:
    if table.get("kind") not in LIMITS:
        _fail(path, f"{key}.kind", f"one of {', '.join(LIMITS)}", table.get("kind"))
    kind = cast(Kind, table["kind"])
    allowed = ("kind", *LIMITS[kind], *SCOPE_KEYS, *ALERT_KEYS)
    for field_name in table:
        if field_name not in allowed:
            expected = f"one of {', '.join(allowed)} for a {kind} budget"
            _fail(path, f"{key}.{field_name}", expected, None, said="an unknown key")
    limits = {m: _limit(path, f"{key}.{m}", table[m]) for m in LIMITS[kind] if m in table}
    if not limits:
        _fail(path, key, f"a limit ({' or '.join(LIMITS[kind])})", None, said="none")
    scope: dict[str, str | None] = {}
    for text_key in ("agent", "model"):
        value = table.get(text_key)
        if value is not None and (not isinstance(value, str) or not value):
            _fail(path, f"{key}.{text_key}", f"an {text_key} id (a non-empty string)", value)
        scope[text_key] = value
    return Budget(
        name=name,
        kind=kind,
        limits=limits,
        agent=scope["agent"],
        model=scope["model"],
        tags=_tags(path, f"{key}.tags", table.get("tags", {})),
        warn_at=_warn_at(path, f"{key}.warn_at", table.get("warn_at", default_warn)),
    )


def _tags(path: Path | None, key: str, value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        _fail(path, key, "a table of tag = value", value)
    tags: dict[str, str] = {}
    for name, tag in value.items():
        if isinstance(tag, Mapping | list):
            _fail(path, f"{key}.{name}", "a string, number or boolean", tag)
        tags[name] = tag_text(tag)
    return tags
