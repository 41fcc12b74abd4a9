"""Fixtures for the dashboard tests: a recorded workload ledger and clean Streamlit caches."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import streamlit as st

from ledger.store.engine import ENV_URL
from tests.dashboards.workload import record_workload

REPO = Path(__file__).resolve().parents[2]
APP = REPO / "dashboards" / "app.py"


@pytest.fixture(autouse=True)
def clean_caches(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test starts with no cached Analytics or results (streamlit issue #9139)."""
    monkeypatch.delenv("LEDGER_ANALYTICS_PATH", raising=False)
    st.cache_data.clear()
    st.cache_resource.clear()
    yield
    st.cache_data.clear()
    st.cache_resource.clear()  # closes the cached Analytics (its on_release)


@pytest.fixture
def workload_url(sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A SQLite ledger holding the test workload, selected through LEDGER_DATABASE_URL."""
    record_workload(sqlite_url, tmp_path)
    monkeypatch.setenv(ENV_URL, sqlite_url)
    return sqlite_url
