#!/usr/bin/env python3
"""Project tasks for a fresh machine with only Python 3.11+: each sets itself up first.

    python3 dev.py demo [ARGS]   simulated multi-agent traffic -> ledger, report, dashboard
    python3 dev.py test [ARGS]   the whole test suite (ARGS go to pytest)
    python3 dev.py lint          ruff and mypy

The first run creates .venv and installs the project with its dev extra; later
runs reinstall only when pyproject.toml changes.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
STAMP = VENV / ".ledger-installed"


def run(*cmd: str | Path) -> None:
    code = subprocess.call([str(c) for c in cmd], cwd=ROOT)
    if code:
        sys.exit(code)


def setup() -> None:
    if sys.version_info < (3, 11):  # noqa: UP036 - dev.py runs under any python3
        sys.exit(f"ledger needs Python 3.11 or newer (this is {sys.version.split()[0]})")
    if not (BIN / "python").exists():
        print("creating .venv ...", flush=True)
        venv.create(VENV, with_pip=True)
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if not STAMP.exists() or STAMP.read_text() != digest:
        print("installing ledger and its dependencies into .venv ...", flush=True)
        run(BIN / "python", "-m", "pip", "install", "--quiet", "--upgrade", "pip")
        run(BIN / "python", "-m", "pip", "install", "--quiet", "-e", ".[dev]")
        STAMP.write_text(digest)


def main() -> None:
    task, args = (sys.argv[1], sys.argv[2:]) if len(sys.argv) > 1 else ("", [])
    if task not in ("demo", "test", "lint"):
        sys.exit(__doc__)
    setup()
    if task == "demo":
        # exec, not a child: a SIGTERM to `dev.py demo` then reaches `ledger demo` (and its
        # dashboard) instead of orphaning it.
        ledger = str(BIN / "ledger")
        os.chdir(ROOT)
        os.execv(ledger, [ledger, "demo", *args])  # noqa: S606 (our own venv's ledger)
    elif task == "test":
        run(BIN / "python", "-m", "pytest", *args)
    else:
        run(BIN / "ruff", "check", ".")
        run(BIN / "ruff", "format", "--check", ".")
        run(BIN / "mypy")


if __name__ == "__main__":
    main()
