"""Only the analytics layer writes SQL over the ledger: the dashboard and the demo call it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.dashboards.conftest import REPO

# A query in a string (SELECT … FROM, WITH … AS (), or a call of Analytics.sql().
SQL = re.compile(r"\bSELECT\b[\s\S]{0,400}?\bFROM\b|\bWITH\s+\w+\s+AS\s*\(|\.sql\(", re.I)
CALLERS = [*sorted((REPO / "dashboards").rglob("*.py")), REPO / "ledger" / "cli" / "demo.py"]


@pytest.mark.parametrize("module", CALLERS, ids=lambda p: str(p.relative_to(REPO)))
def test_the_module_writes_no_sql(module: Path) -> None:
    found = [m.group(0)[:60] for m in SQL.finditer(module.read_text("utf-8"))]
    assert not found, f"{module.relative_to(REPO)} holds SQL: {found}"
