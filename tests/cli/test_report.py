"""The sync progress bar: drawn for a person at a terminal, never into data output."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from ledger.cli import report


@pytest.fixture(autouse=True)
def no_delay(monkeypatch: pytest.MonkeyPatch) -> None:
    # The bar's delay is what made its appearance depend on the machine's load:
    # without it, every run takes the path a slow sync takes.
    monkeypatch.setattr(report, "PROGRESS_DELAY_S", 0.0)


def test_the_bar_is_drawn_on_a_terminal() -> None:
    screen = io.StringIO()
    console = Console(file=screen, force_terminal=True, width=80)
    with report.progress_bar("syncing the ledger", console) as update:
        update(1, 4)
        update(4, 4)
    assert "syncing the ledger" in screen.getvalue()


def test_nothing_is_drawn_into_a_pipe_or_a_file() -> None:
    piped = io.StringIO()
    console = Console(file=piped, force_terminal=False, width=80)
    with report.progress_bar("syncing the ledger", console) as update:
        update(1, 4)
        update(4, 4)
    assert piped.getvalue() == ""
