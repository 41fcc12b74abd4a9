"""Bidi formatting from the ledger never reaches the browser raw: every page's tables,
charts, labels and filter options show ``\\u202e`` where the ledger holds U+202E.

A user would otherwise read an upstream ``\\u202eAmazon Bedrock`` as "kcordeB
nozamA" (and an override left open reorders what follows it). The check is on
what the app sends: every element's message, table and chart data included, is
searched for the characters' UTF-8 bytes.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from dashboards import fmt
from ledger.store.engine import ENV_URL
from tests.dashboards.conftest import APP
from tests.dashboards.workload import (
    BIDI_AGENT,
    BIDI_MODEL,
    BIDI_UPSTREAM,
    record_bidi_rows,
    record_workload,
)

BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
UPSTREAM, AGENT, MODEL = BIDI_UPSTREAM, BIDI_AGENT, BIDI_MODEL
PAGES = [
    "screens/overview.py",
    "screens/stickiness.py",
    "screens/cache.py",
    "screens/cost.py",
    "screens/upstreams.py",
]


@pytest.fixture
def bidi_url(sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    record_workload(sqlite_url, tmp_path)
    at = dt.datetime(2025, 6, 2, 10, 0, tzinfo=dt.UTC)
    record_bidi_rows(sqlite_url, tmp_path / "journal-bidi", at=at, every_session_keyed=False)
    monkeypatch.setenv(ENV_URL, sqlite_url)
    return sqlite_url


def raw_bidi(element: Any) -> set[str]:
    """The bidi characters in what ``element`` and everything under it send to the browser."""
    found: set[str] = set()
    proto = getattr(element, "proto", None)
    if proto is not None:
        data = proto.SerializeToString()
        found |= {c for c in BIDI if c.encode("utf-8") in data}
    children = getattr(element, "children", None)
    for child in (children or {}).values():
        found |= raw_bidi(child)
    return found


def test_printable_escapes_bidi_formatting_and_keeps_other_scripts() -> None:
    assert fmt.printable(UPSTREAM) == "\\u202eAmazon Bedrock"
    assert fmt.printable(BIDI) == "".join(f"\\u{ord(c):04x}" for c in BIDI)
    assert fmt.plain(UPSTREAM) == "` \\u202eAmazon Bedrock `"
    assert fmt.printable("نموذج · מודל · \U0001f469\u200d\U0001f4bb") == (
        "نموذج · מודל · \U0001f469\u200d\U0001f4bb"
    )


def test_no_page_sends_a_bidi_character_raw(bidi_url: str) -> None:
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    for page in PAGES:
        if page != PAGES[0]:
            at.switch_page(page).run()
        assert not at.exception, [e.value for e in at.exception]
        assert raw_bidi(at._tree) == set(), page
    cells = "".join(frame.to_string() for frame in (d.value for d in at.dataframe))
    assert "\\u202eAmazon Bedrock" in cells  # the upstreams page's scorecard


def test_the_agent_filter_shows_the_name_escaped_and_filters_by_it_as_stored(
    bidi_url: str,
) -> None:
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    actors = at.multiselect(key="filter_actors")
    assert "\\u2067planner\\u2069-rtl" in actors.options
    assert raw_bidi(actors) == set()
    at.multiselect(key="filter_actors").set_value([AGENT]).run()
    assert not at.exception, [e.value for e in at.exception]
    calls = {m.label: m.value for m in at.metric}["Calls"]
    assert calls == "6"
    assert raw_bidi(at._tree) == set()
