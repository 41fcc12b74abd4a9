"""The one reader of ledger's configuration: where a section's file is, and its checks.

Every subsystem that can be configured declares a :class:`Section`: its table's
name, the frozen dataclass its settings are read into (each field a
:func:`setting` carrying its documentation, an example and, where one exists,
the environment variable that overrides it) and the precise
:class:`~ledger.errors.SettingError` subclass it raises. ``docs/configuration.md``
is generated from these declarations (:mod:`ledger.config_page`).

Where a section is read from (first found wins; files are never merged)::

    1. an explicit path (``--config FILE``, ``--prices FILE``, ``load_config(path=…)``)
    2. the file named by the section's own variable (LEDGER_BUDGETS_FILE,
       LEDGER_GATEWAY_FILE, LEDGER_PRICES_FILE…), else by LEDGER_CONFIG_FILE
    3. the nearest directory, from the working directory upwards, holding a
       ``ledger.toml`` with the section's table (``[budgets]``) or a
       ``pyproject.toml`` with ``[tool.ledger.<section>]``; when one directory
       holds both, ``ledger.toml`` wins (as ``ruff.toml`` beats ``pyproject.toml``).

A file named by path or variable keeps its section in ``[tool.ledger.<section>]``
when it is a ``pyproject.toml``, else in ``[<section>]`` (or, when it has only
that, ``[tool.ledger.<section>]``). TOML floats are read as ``Decimal``, so money
is exact; a section that wants seconds converts them. Every mistake raises the
section's error naming the file, the dotted key, what was expected (the fix) and
what was found: ``ledger.toml: gateway.timeout_s: expected a positive number of
seconds, got 0``.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import MISSING, dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, Final, NoReturn

from ledger.errors import SettingError

LEDGER_TOML: Final = "ledger.toml"
PYPROJECT: Final = "pyproject.toml"
#: Names one file for every section that has no variable of its own set.
ENV_CONFIG_FILE: Final = "LEDGER_CONFIG_FILE"
#: Where an environment variable's value came from, in messages.
ENVIRONMENT: Final = "<environment>"
_SETTING: Final = "ledger.setting"


@dataclass(frozen=True, slots=True)
class Setting:
    """What the documentation says of one key: what it does, a TOML example, its variable."""

    doc: str
    example: str
    #: An environment variable that overrides the file's value (None: the file alone).
    env: str | None = None
    #: The key in the file when it is not the field's name.
    key: str | None = None
    #: The default as the page shows it, when the field's own would mislead.
    default_text: str | None = None


def setting(
    *,
    doc: str,
    example: str,
    env: str | None = None,
    key: str | None = None,
    default: Any = MISSING,
    default_factory: Any = MISSING,
    default_text: str | None = None,
) -> Any:
    """A dataclass field that is a documented configuration key."""
    meta = {_SETTING: Setting(doc, example, env, key, default_text)}
    if default_factory is not MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def settings_of(cls: type) -> Iterator[tuple[str, dataclasses.Field[Any], Setting]]:
    """``(key in the file, field, setting)`` for each documented field of ``cls``."""
    for f in dataclasses.fields(cls):
        found = f.metadata.get(_SETTING)
        if isinstance(found, Setting):
            yield found.key or f.name, f, found


def keys_of(cls: type) -> tuple[str, ...]:
    return tuple(key for key, _, _ in settings_of(cls))


@dataclass(frozen=True, slots=True)
class Section:
    """A table of the configuration and how it is read."""

    name: str
    #: The dataclass the table's settings are read into (its documented fields).
    settings: type
    error: type[SettingError]
    #: The variable naming this section's file (None: only LEDGER_CONFIG_FILE).
    env_file: str | None = None
    #: One line for the generated page.
    summary: str = ""
    #: Sub-tables of free names below a key (``"models"``, ``""`` for the table
    #: itself): the dataclass each one's keys are documented by, and its placeholder.
    tables: tuple[tuple[str, str, type], ...] = ()
    #: ``[[prices]]``: an array of tables rather than one table.
    array: bool = False

    @property
    def pyproject_key(self) -> str:
        return f"tool.ledger.{self.name}"

    def where(self, path: Path | None = None, prefix: str | None = None) -> Where:
        """Messages about ``path``; keys start with ``prefix`` (default: by the file's name)."""
        if prefix is None:
            named = path is not None and path.name == LEDGER_TOML
            prefix = self.name if named else self.pyproject_key
        return Where(self, path, prefix)


@dataclass(frozen=True, slots=True)
class Where:
    """The file (None: given in code) and table a value comes from, for its error."""

    section: Section
    path: Path | None
    prefix: str

    def key(self, *parts: str) -> str:
        return ".".join((self.prefix, *parts))

    def fail(self, key: str, expected: str, got: Any, *, said: str | None = None) -> NoReturn:
        """Raise the section's error naming the file, the key, the fix and what was found."""
        where = str(self.path) if self.path is not None else f"<{self.section.name}>"
        raise self.section.error(
            f"{where}: {key}: expected {expected}, got {said or repr(got)}",
            path=where,
            key=key,
            expected=expected,
        )

    def unknown(
        self, key: str, allowed: tuple[str, ...], *, said: str = "an unknown key"
    ) -> NoReturn:
        self.fail(key, f"one of {', '.join(allowed)}", None, said=said)


def environment_where(section: Section) -> Where:
    """Where a variable's value came from: its name is the key."""
    return Where(section, Path(ENVIRONMENT), "")


# -- finding and reading files --------------------------------------------------------------


def _document(path: Path, where: Where) -> dict[str, Any]:
    try:
        text = path.read_text("utf-8")
    except OSError as exc:
        where.fail("(file)", "a readable TOML file", None, said=str(exc.strerror))
    except UnicodeDecodeError:
        where.fail("(file)", "a UTF-8 TOML file", None, said="other bytes")
    try:
        return tomllib.loads(text, parse_float=Decimal)
    except tomllib.TOMLDecodeError as exc:
        where.fail("(file)", "valid TOML", None, said=f"a syntax error ({exc})")


def _in_tool(document: Mapping[str, Any], name: str) -> Any:
    tool = document.get("tool")
    ledger = tool.get("ledger") if isinstance(tool, Mapping) else None
    return ledger.get(name) if isinstance(ledger, Mapping) else None


def table_of(section: Section, path: Path, document: Mapping[str, Any]) -> tuple[Any, Where]:
    """The section's table in ``document`` (None: absent) and where its keys are named."""
    own = path.name != PYPROJECT and (path.name == LEDGER_TOML or section.name in document)
    if own:
        return document.get(section.name), section.where(path, section.name)
    return _in_tool(document, section.name), section.where(path, section.pyproject_key)


def _holds(section: Section, path: Path) -> bool:
    try:
        document = tomllib.loads(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return True  # the reader says what is wrong with it
    return table_of(section, path, document)[0] is not None


def find_file(
    section: Section, start: Path | None = None, environ: Mapping[str, str] | None = None
) -> Path | None:
    """The file ``section`` is read from, seen from ``start`` (default: the working directory)."""
    env = os.environ if environ is None else environ
    for variable in (section.env_file, ENV_CONFIG_FILE):
        if variable and (named := env.get(variable)):
            return Path(named)
    here = (start or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        for name in (LEDGER_TOML, PYPROJECT):
            candidate = directory / name
            if candidate.is_file() and _holds(section, candidate):
                return candidate
    return None


def where_to_put(section: Section) -> str:
    """The fix when no file holds the section."""
    variables = " or ".join(v for v in (section.env_file, ENV_CONFIG_FILE) if v)
    table = f"[[{section.name}]]" if section.array else f"[{section.name}]"
    tool = f"[[{section.pyproject_key}]]" if section.array else f"[{section.pyproject_key}]"
    named = f"(or a file named by {variables})"
    return f"a {tool} table in {PYPROJECT} or {table} in {LEDGER_TOML} {named}"


def read_table(
    section: Section, path: Path | None = None, *, start: Path | None = None
) -> tuple[Any, Where] | None:
    """The section's table as written, and where it is; None when no file holds it.

    A file given by ``path`` (or named by a variable) that lacks the table yields
    ``(None, where)``: the section decides whether that is an error.
    """
    chosen = path if path is not None else find_file(section, start)
    if chosen is None:
        return None
    return table_of(section, chosen, _document(chosen, section.where(chosen)))


def require_table(
    section: Section, path: Path | None = None, *, start: Path | None = None
) -> tuple[Any, Where]:
    """As :func:`read_table`, for a section that must be configured to be used."""
    found = read_table(section, path, start=start)
    if found is None:
        section.where(None, section.pyproject_key).fail(
            section.pyproject_key,
            where_to_put(section),
            None,
            said=f"no {section.name} file",
        )
    table, where = found
    if table is None:
        where.fail(where.prefix, "a table", None, said="no such table")
    return table, where


# -- checks every section shares ------------------------------------------------------------


def only_known(where: Where, key: str, table: Mapping[str, Any], allowed: tuple[str, ...]) -> None:
    """Refuse a key of ``table`` that is not documented (a typo would otherwise be ignored)."""
    for name in table:
        if name not in allowed:
            where.unknown(f"{key}.{name}" if key else name, allowed)


def text(where: Where, key: str, value: Any, *, empty: bool = False) -> str:
    if not isinstance(value, str) or (not (value.strip() or empty)):
        where.fail(key, "a string" if empty else "a non-empty string", value)
    return value


def optional_text(where: Where, key: str, value: Any) -> str | None:
    return None if value is None else text(where, key, value)


def flag(where: Where, key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        where.fail(key, "true or false", value)
    return value


def positive(where: Where, key: str, value: Any, *, unit: str = "") -> float:
    """A number above 0 (text from a variable too); TOML's ``Decimal`` becomes a float."""
    expected = f"a positive number{unit}"
    if isinstance(value, str):
        try:
            value = Decimal(value.strip())
        except ArithmeticError:
            where.fail(key, expected, value)
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal) or not value > 0:
        where.fail(key, expected, value)  # ``not value > 0`` also refuses NaN
    if not Decimal(value).is_finite():
        where.fail(key, expected, value)
    return float(value)


def seconds(where: Where, key: str, value: Any) -> float:
    """A positive duration (time is not money: a float)."""
    return positive(where, key, value, unit=" of seconds")


def count(where: Where, key: str, value: Any) -> int:
    """A whole number >= 1 (digits from a variable too)."""
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        where.fail(key, "a positive whole number", value)
    return value


def usd(
    where: Where, key: str, value: Any, *, unit: str = "USD", most: int | None = None
) -> Decimal:
    """Money, exactly: an integer or TOML decimal >= 0 (a float given in code is refused)."""
    expected = f"a number of {unit} >= 0"
    if isinstance(value, bool) or not isinstance(value, int | Decimal):
        where.fail(key, expected, value)
    amount = Decimal(value)
    if not amount.is_finite() or amount < 0 or (most is not None and amount > most):
        where.fail(key, expected, value)
    return amount


def share(where: Where, key: str, value: Any) -> Decimal:
    """A share strictly between 0 and 1, exactly."""
    expected = "a share of the limit above 0 and below 1 (e.g. 0.8)"
    if isinstance(value, bool) or not isinstance(value, int | Decimal):
        where.fail(key, expected, value)
    amount = Decimal(value)
    if not amount.is_finite() or not 0 < amount < 1:
        where.fail(key, expected, value)
    return amount


# -- reading a table of plain settings, with their variables over the file -----------------

#: Reads one value: (where, the dotted key or variable, the value as written) -> the field's.
Reader = Callable[[Where, str, Any], Any]


def read_settings(
    section: Section,
    found: tuple[Any, Where] | None,
    readers: Mapping[str, Reader],
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The fields of ``section.settings`` that the file or the environment sets.

    ``found`` is :func:`read_table`'s answer; ``readers`` checks each field by name.
    A documented variable that is set (not blank) wins over the file: the
    environment is how a deployment overrides one value of a shared file.
    """
    table, where = found if found is not None else (None, section.where())
    if table is None:
        table = {}
    if not isinstance(table, Mapping):
        where.fail(where.prefix, "a table", table)
    cls = section.settings
    only_known(where, where.prefix, table, keys_of(cls))
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for key, f, declared in settings_of(cls):
        if declared.env is not None and (raw := env.get(declared.env, "").strip()):
            values[f.name] = readers[f.name](environment_where(section), declared.env, raw)
        elif key in table:
            values[f.name] = readers[f.name](where, where.key(key), table[key])
    return values
