"""Budgets: spend limits as configuration, a CI check over the ledger, an in-process guard.

* :func:`load_config` reads ``[tool.ledger.budgets]`` (pyproject.toml) or
  ``[budgets]`` (ledger.toml); see :mod:`ledger.budgets.config` for the
  precedence and the format.
* :func:`evaluate` checks every budget over a window of the ledger
  (``ledger budget check``); :func:`budget_status` is today's burn
  (``ledger budget status``, the dashboard's Budgets page).
* :class:`BudgetGuard` makes the client refuse a call that could cross a
  budget, before it is sent (:class:`~ledger.errors.BudgetExceeded`).

The evaluation half needs the analytics stack (DuckDB, pandas) and is
imported on first use, so the client can take a guard without loading it.
"""

from __future__ import annotations

import importlib
from typing import Any

from ledger.budgets.config import Budget, BudgetConfig, find_config, load_config, parse_config
from ledger.budgets.guard import BudgetGuard
from ledger.errors import BudgetConfigurationError, BudgetExceeded

_LAZY = {
    "CheckReport": "ledger.budgets.evaluation",
    "Result": "ledger.budgets.evaluation",
    "evaluate": "ledger.budgets.evaluation",
    "BudgetStatus": "ledger.budgets.status",
    "budget_status": "ledger.budgets.status",
}

__all__ = [
    "Budget",
    "BudgetConfig",
    "BudgetConfigurationError",
    "BudgetExceeded",
    "BudgetGuard",
    "BudgetStatus",
    "CheckReport",
    "Result",
    "budget_status",
    "evaluate",
    "find_config",
    "load_config",
    "parse_config",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
