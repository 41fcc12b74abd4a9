#!/usr/bin/env python3
"""Project tasks for a fresh machine with only Python 3.11+: each sets itself up first.

    python3 dev.py demo [ARGS]       simulated multi-agent traffic -> ledger, report, dashboard
    python3 dev.py test [ARGS]       the whole test suite, one worker per core (at most 4);
                                     with ARGS, pytest ARGS in one process
    python3 dev.py lint              ruff and mypy
    python3 dev.py lock              uv.lock again after an edit of pyproject.toml (no upgrades)
    python3 dev.py upgrade [PKG ...] every locked version (or only PKG's) to the newest allowed,
                                     what changed, then the whole suite under the new lock

The first run creates .venv and installs exactly what uv.lock names (hashes checked);
later runs install again only when pyproject.toml or uv.lock changes. pyproject.toml
keeps ranges for users who install ledger into their own projects; the lock is what
the demo, the tests and CI run with.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
LOCK = ROOT / "uv.lock"
README = ROOT / "README.md"
STAMP = VENV / ".ledger-installed"

# What the README names as tested: the SDKs, frameworks and engines whose releases change
# what users see. `upgrade` writes their locked versions into the README's line.
TESTED_WITH = (
    "openai",
    "anthropic",
    "litellm",
    "langchain-openai",
    "pydantic-ai-slim",
    "openai-agents",
    "streamlit",
    "duckdb",
    "pyspark",
)
TESTED_LINE = re.compile(r"^Tested with .*$", re.MULTILINE)

# uv reads no pip.conf: it resolves against PyPI alone, and it never downloads a Python
# (the venv's own interpreter is the one to install into).
UV_ENV = {"UV_PYTHON_DOWNLOADS": "never", "UV_PROJECT_ENVIRONMENT": str(VENV)}


def run(*cmd: str | Path) -> None:
    code = subprocess.call([str(c) for c in cmd], cwd=ROOT, env={**os.environ, **UV_ENV})
    if code:
        sys.exit(code)


def locked_versions(lock: str | None = None) -> dict[str, str]:
    """Each locked package's version (the project itself left out)."""
    data = tomllib.loads(LOCK.read_text() if lock is None else lock)
    return {
        p["name"]: p["version"]
        for p in data["package"]
        if "version" in p and p.get("source", {}).get("editable") != "."
    }


def tested_line(versions: dict[str, str]) -> str:
    named = ", ".join(f"{name} {versions[name]}" for name in TESTED_WITH)
    return f"Tested with {named} (from `uv.lock`)."


def setup() -> None:
    if sys.version_info < (3, 11):  # noqa: UP036 - dev.py runs under any python3
        sys.exit(f"ledger needs Python 3.11 or newer (this is {sys.version.split()[0]})")
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + LOCK.read_bytes()).hexdigest()
    if STAMP.exists() and STAMP.read_text() == digest:
        return
    if not (BIN / "python").exists():
        print("creating .venv ...", flush=True)
        venv.create(VENV, with_pip=True)
    if not (BIN / "uv").exists():
        # The installer is itself locked (the dev extra names it): this bootstraps the
        # locked version, and the sync below keeps it.
        run(BIN / "python", "-m", "pip", "install", "--quiet", f"uv=={locked_versions()['uv']}")
    print("installing ledger and the versions uv.lock names into .venv ...", flush=True)
    # --locked: a pyproject.toml edited without `dev.py lock` is an error, not a silent
    # resolve to whatever is newest today.
    run(BIN / "uv", "sync", "--locked", "--extra", "dev", "--python", BIN / "python", "--quiet")
    STAMP.write_text(digest)


def whole_suite() -> list[str]:
    """pytest's options for the whole suite: a worker per core, at most 4.

    Most tests wait on sockets, subprocesses and a browser, so a second worker
    finishes the suite well before one would even on two loaded cores. Whole
    modules go to one worker (``loadfile``): their servers and Spark session are
    module fixtures, and each worker makes its own PostgreSQL database.
    """
    workers = min(os.cpu_count() or 1, 4)
    return ["-n", str(workers), "--dist", "loadfile"] if workers > 1 else []


def lock() -> None:
    run(BIN / "uv", "lock", "--python", BIN / "python")
    write_tested_line()


def upgrade(packages: list[str]) -> None:
    """Upgrade the lock, show what moved, and run the suite under it."""
    before = locked_versions()
    only = [arg for name in packages for arg in ("--upgrade-package", name)]
    run(BIN / "uv", "lock", "--python", BIN / "python", *(only or ["--upgrade"]))
    after = locked_versions()
    changes = [
        f"  {name:<40} {before.get(name, '-'):>14} -> {after.get(name, '-')}"
        for name in sorted(before.keys() | after.keys())
        if before.get(name) != after.get(name)
    ]
    print("uv.lock: " + (f"{len(changes)} changed" if changes else "nothing changed"))
    if changes:
        print("\n".join(changes))
    write_tested_line()
    setup()
    code = subprocess.call([str(BIN / "python"), "-m", "pytest"], cwd=ROOT)
    if code:
        sys.exit(
            f"the suite failed under the new lock (pytest exit {code}); fix the code, or "
            "`git checkout uv.lock README.md` and `python3 dev.py test` to go back"
        )
    print("the suite passed under the new lock: commit uv.lock and README.md")


def write_tested_line() -> None:
    text = README.read_text()
    new = TESTED_LINE.sub(tested_line(locked_versions()), text, count=1)
    if new != text:
        README.write_text(new)


def main() -> None:
    task, args = (sys.argv[1], sys.argv[2:]) if len(sys.argv) > 1 else ("", [])
    if task not in ("demo", "test", "lint", "lock", "upgrade"):
        sys.exit(__doc__)
    setup()
    if task == "demo":
        # exec, not a child: a SIGTERM to `dev.py demo` then reaches `ledger demo` (and its
        # dashboard) instead of orphaning it.
        ledger = str(BIN / "ledger")
        os.chdir(ROOT)
        os.execv(ledger, [ledger, "demo", *args])  # noqa: S606 (our own venv's ledger)
    elif task == "test":
        run(BIN / "python", "-m", "pytest", *(args or whole_suite()))
    elif task == "lock":
        lock()
    elif task == "upgrade":
        upgrade(args)
    else:
        run(BIN / "ruff", "check", ".")
        run(BIN / "ruff", "format", "--check", ".")
        run(BIN / "mypy")


if __name__ == "__main__":
    main()
