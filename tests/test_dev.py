"""dev.py: the versions the README names as tested are the ones uv.lock installs."""

from __future__ import annotations

import importlib.util
import re
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def dev_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dev", ROOT / "dev.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_names_the_locked_versions_as_tested() -> None:
    lines = re.findall(
        r"^Tested with (.*) \(from `uv.lock`\)\.$", (ROOT / "README.md").read_text(), re.M
    )
    assert len(lines) == 1, "README.md needs one 'Tested with ...' line (python3 dev.py lock)"
    named = dict(pair.rsplit(" ", 1) for pair in lines[0].split(", "))
    locked = {
        p["name"]: p["version"]
        for p in tomllib.loads((ROOT / "uv.lock").read_text())["package"]
        if "version" in p
    }
    assert named == {name: locked[name] for name in dev_module().TESTED_WITH}


def test_the_environment_runs_the_locked_versions() -> None:
    """What the suite imports is what uv.lock names: no stale or hand-installed SDK."""
    from importlib.metadata import version

    dev = dev_module()
    locked = dev.locked_versions()
    assert {name: version(name) for name in dev.TESTED_WITH} == {
        name: locked[name] for name in dev.TESTED_WITH
    }


def test_the_whole_suite_runs_on_a_worker_per_core_up_to_four(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import os

    dev = dev_module()
    for cores, workers in ((1, None), (2, "2"), (16, "4")):
        monkeypatch.setattr(os, "cpu_count", lambda cores=cores: cores)
        expected = [] if workers is None else ["-n", workers, "--dist", "loadfile"]
        assert dev.whole_suite() == expected
