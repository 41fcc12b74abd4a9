"""Terminal tables: escaped cells, a table only at its natural width, records otherwise."""

from __future__ import annotations

import io
from decimal import Decimal

import pandas as pd  # type: ignore[import-untyped]
from rich.console import Console

from ledger.cli.tables import print_frame, safe


def render(frame: pd.DataFrame, width: int, **kwargs: object) -> str:
    out = io.StringIO()
    console = Console(file=out, width=width, force_terminal=False)
    print_frame(console, "t", frame, list(frame.columns), **kwargs)  # type: ignore[arg-type]
    return out.getvalue()


def test_safe_escapes_every_control_character() -> None:
    assert safe("a\x1b]0;t\x07b\x9bc\x7f\t\n") == "a\\x1b]0;t\\x07b\\x9bc\\x7f\\x09\\x0a"


def test_a_table_that_does_not_fit_becomes_records_not_cut_values() -> None:
    frame = pd.DataFrame({"model": ["m" * 30] * 2, "calls": [1274, 5], "cost_usd": [Decimal(3)] * 2,
                          "note": ["n" * 40] * 2})  # fmt: skip
    wide = render(frame, 200)
    assert "record" not in wide and "1,274" in wide
    narrow = render(frame, 60)
    assert "one record per block" in narrow and "1,274" in narrow and "m" * 30 in narrow
    assert max(len(line) for line in narrow.splitlines()) <= 60


def test_grouped_rows_keep_the_group_on_a_heading() -> None:
    frame = pd.DataFrame({"agent": ["planner", "planner"], "model": ["x" * 40] * 2,
                          "key_sent": [True, False], "calls": [10, 20],
                          "stickiness": [0.5, 0.25], "share": [0.1, 0.2]})  # fmt: skip
    text = render(frame, 50, group_by=["agent", "model"])
    assert f"planner · {'x' * 40}" in text
    assert "50.0%" in text and "25.0%" in text
    assert max(len(line) for line in text.splitlines()) <= 50


def test_safe_shows_bidi_formatting_escaped_and_other_scripts_as_written() -> None:
    assert safe("\u202eAmazon Bedrock") == "\\u202eAmazon Bedrock"
    bidi = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u2028"
    assert safe(bidi) == "".join(f"\\u{ord(c):04x}" for c in bidi)
    # Arabic, Hebrew, accents and an emoji joined by U+200D are text, not formatting
    for text in ("نموذج", "מודל", "café", "\U0001f469\u200d\U0001f4bb"):
        assert safe(text) == text
