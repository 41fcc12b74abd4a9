"""The ``--port`` option every ``ledger`` server takes: 0 asks the system for a free port."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def port_option(default: int) -> Callable[[F], F]:
    """``--port/-p``, 0 to 65535 (0: a free one, printed once bound)."""
    return click.option(
        "--port",
        "-p",
        type=click.IntRange(0, 65535),
        default=default,
        show_default=True,
        help="TCP port (0: a free one, printed).",
    )
