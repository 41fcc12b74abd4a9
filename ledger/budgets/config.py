"""Budgets as configuration: what they may say, and the checks.

They are read by :mod:`ledger.config` (section ``budgets``), so they are found
like every other section: an explicit path (``ledger budget check --config
FILE``, ``load_config(path=…)``), then the file named by ``LEDGER_BUDGETS_FILE``
(else ``LEDGER_CONFIG_FILE``), then the nearest directory upwards holding a
``ledger.toml`` with ``[budgets]`` or a ``pyproject.toml`` with
``[tool.ledger.budgets]`` (``ledger.toml`` wins). A file given by path is read
like ``ledger.toml`` (table ``[budgets]``) unless it is named ``pyproject.toml``
or has no ``[budgets]`` table but a ``[tool.ledger.budgets]`` one.

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

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Final, Literal, cast

from ledger import config as cfg
from ledger.errors import BudgetConfigurationError

ENV_BUDGETS_FILE: Final = "LEDGER_BUDGETS_FILE"
LEDGER_TOML: Final = cfg.LEDGER_TOML
PYPROJECT: Final = cfg.PYPROJECT
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
class BudgetLimits:
    """The limits a budget table may hold, USD (which ones depends on its ``kind``)."""

    mean_usd: Decimal | None = cfg.setting(
        default=None, doc="turn: the mean cost of a call, at most", example="0.02"
    )
    p95_usd: Decimal | None = cfg.setting(
        default=None, doc="turn: the 95th percentile of a call's cost, at most", example="0.05"
    )
    max_usd: Decimal | None = cfg.setting(
        default=None, doc="turn: the most any one call may cost", example="0.25"
    )
    limit_usd: Decimal | None = cfg.setting(
        default=None, doc="agent_day, model_day: the spend per UTC day, at most", example="5"
    )


@dataclass(frozen=True, slots=True)
class Budget:
    """One named budget: what it limits (``kind``, ``limits``) and over which rows (scope)."""

    name: str
    kind: Kind = cfg.setting(
        doc="turn (per call), agent_day (per agent per UTC day) or model_day (per requested "
        "model per UTC day)",
        example='"agent_day"',
    )
    limits: Mapping[str, Decimal] = field(default_factory=dict)
    agent: str | None = cfg.setting(
        default=None,
        doc="only this agent's rows (agent_day without it: every agent)",
        example='"planner"',
    )
    model: str | None = cfg.setting(
        default=None, doc="only calls requesting this model", example='"gpt-4o"'
    )
    tags: Mapping[str, str] = cfg.setting(
        default_factory=dict, doc="only rows carrying these tags", example='{ env = "ci" }'
    )
    #: Warn when a figure reaches this share of its limit (None: alert at the limit only).
    warn_at: Decimal | None = cfg.setting(
        default=None,
        doc="warn at this share of the limit (overrides the default)",
        example="0.9",
    )

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
    agents: tuple[str, ...] | None = cfg.setting(
        default=None,
        doc="the agents budgets may name (a typo guard)",
        example='["planner", "coder"]',
    )
    unknown_cost: UnknownCost = cfg.setting(
        default="report",
        doc='"fail": rows of unknown cost fail their budget',
        example='"fail"',
    )
    #: The dotted name of the table the budgets came from, for messages.
    table_key: str = PYPROJECT_KEY
    #: The default warning threshold of the file's budgets.
    warn_at: Decimal | None = cfg.setting(
        default=None, doc="the default warning threshold, a share of each limit", example="0.8"
    )

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
        where = SECTION.where(self.source, self.table_key)
        for b in self.budgets:
            if b.agent is not None and b.agent not in allowed:
                said = "the agents list" if self.agents is not None else "the ledger"
                where.fail(
                    where.key(b.name, "agent"),
                    f"one of the agents in {said} ({', '.join(sorted(allowed))})",
                    b.agent,
                )


SECTION: Final = cfg.Section(
    "budgets",
    BudgetConfig,
    BudgetConfigurationError,
    env_file=ENV_BUDGETS_FILE,
    summary="Cost budgets: `ledger budget check`, the budget guard, the gateway's "
    "`budgets = true`.",
    tables=(("", "<budget>", Budget), ("", "<budget>", BudgetLimits)),
)


# -- reading ------------------------------------------------------------------


def find_config(start: Path | None = None) -> Path | None:
    """The budgets file that applies from ``start`` (default: the working directory)."""
    return cfg.find_file(SECTION, start)


def load_config(path: Path | None = None, *, start: Path | None = None) -> BudgetConfig:
    """Read and check the budgets of ``path`` (else of :func:`find_config`)."""
    table, where = cfg.require_table(SECTION, path, start=start)
    return parse_config(table, where.path, table_key=where.prefix)


def parse_config(
    table: Any, path: Path | None = None, *, table_key: str | None = None
) -> BudgetConfig:
    """Check one budgets table (as parsed from TOML) and build the configuration.

    ``table_key`` names the table in messages (default: by the file's name).
    """
    where = SECTION.where(path, table_key)
    if not isinstance(table, Mapping):
        where.fail(where.prefix, "a table of budgets", table)
    budgets: list[Budget] = []
    default_warn = _warn_at(where, where.key("warn_at"), table.get("warn_at"))
    for name, value in table.items():
        if isinstance(value, Mapping):
            budgets.append(_budget(where, name, value, default_warn))
        elif name not in SETTINGS:
            expected = f"a budget table or a setting ({', '.join(SETTINGS)})"
            where.fail(where.key(name), expected, None, said="an unknown key")
    if not budgets:
        where.fail(where.prefix, "at least one budget table", None, said="none")
    return BudgetConfig(
        budgets=tuple(budgets),
        source=path,
        agents=_agents(where, table.get("agents")),
        unknown_cost=_unknown_cost(where, table.get("unknown_cost", "report")),
        table_key=where.prefix,
        warn_at=default_warn,
    )


def _agents(where: cfg.Where, value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(a, str) and a for a in value):
        where.fail(where.key("agents"), "a list of agent ids (strings)", value)
    return tuple(value)


def _unknown_cost(where: cfg.Where, value: Any) -> UnknownCost:
    if value not in UNKNOWN_COST_CHOICES:
        where.fail(where.key("unknown_cost"), '"report" or "fail"', value)
    return "fail" if value == "fail" else "report"


def _warn_at(where: cfg.Where, key: str, value: Any) -> Decimal | None:
    return None if value is None else cfg.share(where, key, value)


def _budget(
    where: cfg.Where, name: str, table: Mapping[str, Any], default_warn: Decimal | None
) -> Budget:
    key = where.key(name)
    if table.get("kind") not in LIMITS:
        where.fail(f"{key}.kind", f"one of {', '.join(LIMITS)}", table.get("kind"))
    kind = cast(Kind, table["kind"])
    allowed = ("kind", *LIMITS[kind], *SCOPE_KEYS, *ALERT_KEYS)
    for field_name in table:
        if field_name not in allowed:
            expected = f"one of {', '.join(allowed)} for a {kind} budget"
            where.fail(f"{key}.{field_name}", expected, None, said="an unknown key")
    limits = {m: cfg.usd(where, f"{key}.{m}", table[m]) for m in LIMITS[kind] if m in table}
    if not limits:
        where.fail(key, f"a limit ({' or '.join(LIMITS[kind])})", None, said="none")
    scope: dict[str, str | None] = {}
    for text_key in ("agent", "model"):
        value = table.get(text_key)
        if value is not None and (not isinstance(value, str) or not value):
            where.fail(f"{key}.{text_key}", f"an {text_key} id (a non-empty string)", value)
        scope[text_key] = value
    return Budget(
        name=name,
        kind=kind,
        limits=limits,
        agent=scope["agent"],
        model=scope["model"],
        tags=_tags(where, f"{key}.tags", table.get("tags", {})),
        warn_at=_warn_at(where, f"{key}.warn_at", table.get("warn_at", default_warn)),
    )


def _tags(where: cfg.Where, key: str, value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        where.fail(key, "a table of tag = value", value)
    tags: dict[str, str] = {}
    for name, tag in value.items():
        if isinstance(tag, Mapping | list):
            where.fail(f"{key}.{name}", "a string, number or boolean", tag)
        tags[name] = tag_text(tag)
    return tags
