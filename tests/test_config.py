"""One reader of configuration: the page lists what it reads, the docs say nothing else.

Every section is read through :mod:`ledger.config` from a real file. A key documented
on the generated page is read (its example changes what the section loads), a key
not documented is refused naming the file and the key, and every key and variable
the README shows is one the page lists.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from ledger import config as cfg
from ledger.config_page import OTHER_VARIABLES, SECTIONS, documented_keys, render
from ledger.errors import SettingError

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "configuration.md"
README = ROOT / "README.md"
#: Variables the README names that are not ledger's settings.
NOT_SETTINGS = {
    "LEDGER_GATEWAY_KEY": "the gateway key a user's own program reads (the TypeScript example)",
}
BY_NAME = {section.name: (section, load) for section, load in SECTIONS}

#: A complete table per section (raw TOML values), which one key at a time is changed.
BASES: dict[str, dict[str, Any]] = {
    "budgets": {"b": {"kind": '"turn"', "max_usd": "1"}},
    "gateway": {
        "keys": {"k": {"sha256": '"' + "ab" * 32 + '"'}},
        "providers": {"openai": {"base_url": '"http://127.0.0.1:9/v1"'}},
    },
    "prices": {
        "provider": '"p"',
        "model": '"m"',
        "effective_from": "2025-01-01",
        "input": "1",
        "output": "2",
    },
    "resilience": {},
    "analytics": {},
    "exporters": {},
}
#: A day budget for the keys a turn budget may not hold.
DAY_BUDGET = {"b": {"kind": '"model_day"', "limit_usd": "1"}}


@pytest.fixture(autouse=True)
def no_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests' own files, whatever the machine's environment names."""
    for section, _ in SECTIONS:
        for name in (section.env_file, cfg.ENV_CONFIG_FILE):
            if name:
                monkeypatch.delenv(name, raising=False)
        for _, _, found in documented_keys(section):
            if found.env:
                monkeypatch.delenv(found.env, raising=False)


def toml(section: cfg.Section, table: Mapping[str, Any]) -> str:
    """``table`` (leaves are raw TOML values) as a ledger.toml holding the section."""
    if section.array:
        return f"[[{section.name}]]\n" + "".join(f"{k} = {v}\n" for k, v in table.items())
    return _emit(section.name, table)


def _emit(header: str, table: Mapping[str, Any]) -> str:
    leaves = "".join(f'"{k}" = {v}\n' for k, v in table.items() if not isinstance(v, Mapping))
    tables = "".join(
        _emit(f'{header}."{k}"', v) for k, v in table.items() if isinstance(v, Mapping)
    )
    return f"[{header}]\n{leaves}{tables}"


def base(section: cfg.Section, key: str) -> dict[str, Any]:
    """A copy of the section's base table fit to hold ``key``."""
    budget_day = section.name == "budgets" and key in ("<budget>.kind", "<budget>.limit_usd")
    table = DAY_BUDGET if budget_day else BASES[section.name]
    return {k: dict(v) if isinstance(v, dict) else v for k, v in table.items()}


def with_key(section: cfg.Section, key: str, example: str) -> dict[str, Any]:
    """The section's base with ``key`` (a page's dotted key) set to ``example``."""
    table = base(section, key)
    for below, placeholder, _ in section.tables:
        prefix = ".".join(p for p in (below, placeholder) if p) + "."
        if key.startswith(prefix):
            entry = table[below] if below else table
            (name,) = [n for n, v in entry.items() if isinstance(v, dict)]
            entry[name] = {**entry[name], key.removeprefix(prefix): example}
            return table
    table[key] = example
    return table


def load(section: cfg.Section, path: Path, table: Mapping[str, Any]) -> object:
    path.write_text(toml(section, table))
    return BY_NAME[section.name][1](path)


def test_the_committed_page_is_the_generated_one() -> None:
    assert PAGE.read_text("utf-8") == render(), "python -m ledger.config_page > " + str(PAGE)


@pytest.mark.parametrize(
    ("section", "key", "example"),
    [
        pytest.param(section, key, found.example, id=f"{section.name}.{key}")
        for section, _ in SECTIONS
        for key, _, found in documented_keys(section)
    ],
)
def test_every_documented_key_is_read_by_the_one_reader(
    tmp_path: Path, section: cfg.Section, key: str, example: str
) -> None:
    path = tmp_path / "ledger.toml"
    before = load(section, path, base(section, key))
    after = load(section, path, with_key(section, key, example))
    assert after != before, f"{key} = {example} changed nothing: is it read?"


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_a_key_not_on_the_page_is_refused_naming_file_and_key(tmp_path: Path, name: str) -> None:
    section, _ = BY_NAME[name]
    path = tmp_path / "ledger.toml"
    table = {**BASES[name], "colour": '"blue"'}
    with pytest.raises(section.error) as caught:
        load(section, path, table)
    assert isinstance(caught.value, SettingError)
    assert caught.value.path == str(path) and caught.value.key.endswith("colour")
    assert caught.value.key.startswith(name)


def test_a_variable_wins_over_the_file_and_is_named_when_wrong(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ledger.resilience import ResilienceSettings

    path = tmp_path / "ledger.toml"
    path.write_text('[resilience]\ncache_ttl_s = 120\nrate_limit = "30/1m"\n')
    monkeypatch.setenv("LEDGER_CACHE_TTL_S", "60")
    settings = ResilienceSettings.load(path)
    assert (settings.cache_ttl_s, settings.rate_limit, settings.window_s) == (60.0, 30, 60.0)
    monkeypatch.setenv("LEDGER_CACHE_TTL_S", "soon")
    with pytest.raises(SettingError, match=r"<environment>: LEDGER_CACHE_TTL_S: expected a posit"):
        ResilienceSettings.load(path)


def test_one_variable_names_the_file_of_every_section(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ledger.budgets import load_config
    from ledger.exporters import ExporterSettings

    shared = tmp_path / "shared.toml"
    shared.write_text(
        '[budgets.b]\nkind = "turn"\nmax_usd = 1\n[exporters]\notel_endpoint = "http://c:4318"\n'
    )
    monkeypatch.setenv(cfg.ENV_CONFIG_FILE, str(shared))
    assert load_config(start=tmp_path / "elsewhere").source == shared
    assert ExporterSettings.load().otel_endpoint == "http://c:4318"
    own = tmp_path / "budgets.toml"
    own.write_text('[budgets.own]\nkind = "turn"\nmax_usd = 2\n')
    monkeypatch.setenv("LEDGER_BUDGETS_FILE", str(own))  # the section's own variable first
    assert [b.name for b in load_config().budgets] == ["own"]


def test_a_ledger_toml_without_the_section_lets_the_search_go_on(tmp_path: Path) -> None:
    from ledger.budgets import find_config

    (tmp_path / "pyproject.toml").write_text(
        '[tool.ledger.budgets.b]\nkind = "turn"\nmax_usd = 1\n'
    )
    inner = tmp_path / "svc"
    inner.mkdir()
    (inner / "ledger.toml").write_text('[gateway]\nauth = "none"\n')
    assert find_config(inner) == tmp_path / "pyproject.toml"


def _flatten(section: cfg.Section, table: Any) -> set[str]:
    """The page's dotted keys that ``table`` (as parsed) uses."""
    entries = table if section.array else [table]
    containers = {below: placeholder for below, placeholder, _ in section.tables}
    top = set(cfg.keys_of(section.settings))
    keys: set[str] = set()
    for entry in entries:
        for key, value in entry.items():
            if key in containers and isinstance(value, Mapping):
                for sub in value.values():
                    keys.update(f"{key}.{containers[key]}.{k}" for k in sub)
            elif "" in containers and key not in top and isinstance(value, Mapping):
                keys.update(f"{containers['']}.{k}" for k in value)
            else:
                keys.add(key)
    return keys


def _toml_blocks(text: str) -> list[str]:
    blocks = re.findall(r"```toml\n(.*?)```", text, re.DOTALL)
    # a commented-out key is documentation too
    return [re.sub(r"^# (\w+ = )", r"\1", b, flags=re.MULTILINE) for b in blocks]


def test_every_key_the_readme_shows_is_on_the_page_and_read() -> None:
    seen: set[str] = set()
    for block in _toml_blocks(README.read_text("utf-8")):
        document = tomllib.loads(block)
        tool = document.pop("tool", {}).get("ledger", {})
        for name, table in {**document, **tool}.items():
            assert name in BY_NAME, f"README shows [{name}], which no section reads"
            section = BY_NAME[name][0]
            documented = {key for key, _, _ in documented_keys(section)}
            assert _flatten(section, table) <= documented, (name, _flatten(section, table))
            seen.add(name)
    assert {"budgets", "gateway", "prices"} <= seen


def test_every_variable_in_the_docs_is_read_and_every_variable_read_is_on_the_page() -> None:
    page = PAGE.read_text("utf-8")
    named = set(re.findall(r"\bLEDGER_[A-Z_]+\b", README.read_text("utf-8")))
    declared = {cfg.ENV_CONFIG_FILE} | {name for name, _, _ in OTHER_VARIABLES}
    for section, _ in SECTIONS:
        declared |= {section.env_file} if section.env_file else set()
        declared |= {found.env for _, _, found in documented_keys(section) if found.env}
    tests_only = {n for n in named if n.startswith("LEDGER_TEST_")}
    assert named - tests_only - set(NOT_SETTINGS) <= declared
    in_code = set()
    for source in (ROOT / "ledger").rglob("*.py"):
        in_code |= set(re.findall(r'"(LEDGER_[A-Z_]+)"', source.read_text("utf-8")))
    assert in_code <= declared
    assert all(f"`{name}`" in page for name in declared)
