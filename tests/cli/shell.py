"""Run the real ``ledger`` entry point, in this process or in one of its own, as a shell
would see it."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass

import pytest

from ledger.cli import main


@dataclass(frozen=True)
class Outcome:
    code: int
    out: str
    err: str


def ledger(capsys: pytest.CaptureFixture[str], *args: str) -> Outcome:
    """``ledger ARGS``: its exit status, stdout and stderr (main() always exits)."""
    capsys.readouterr()  # drop anything printed before
    saved = sys.argv
    sys.argv = ["ledger", *args]
    try:
        with pytest.raises(SystemExit) as exited:
            main()
    finally:
        sys.argv = saved
    captured = capsys.readouterr()
    code = exited.value.code
    return Outcome(code if isinstance(code, int) else 1, captured.out, captured.err)


def ledger_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``ledger ARGS`` in a process of its own with ``env``, its output on a pipe."""
    return subprocess.run(
        [sys.executable, "-c", "from ledger.cli import main; main()", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
