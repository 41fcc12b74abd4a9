"""The Python API reads only, and no query installs or loads an extension."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger.errors import ReadOnlyQuery
from tests.analytics.builders import insert_rows, open_analytics, served


def test_sql_refuses_a_write_and_the_copy_keeps_its_rows(sqlite_url: str, tmp_path: Path) -> None:
    insert_rows(sqlite_url, [served(0, "A"), served(1, "B")])
    with open_analytics(sqlite_url, tmp_path) as analytics:
        with pytest.raises(ReadOnlyQuery, match="DELETE statements are refused") as refused:
            analytics.sql("DELETE FROM token_usage")
        assert refused.value.statement == "DELETE"
        with pytest.raises(ReadOnlyQuery):
            analytics.relation("DROP VIEW calls")
        with pytest.raises(ValueError, match="empty"):
            analytics.sql("")
        assert analytics.sql("SELECT count(*) AS n FROM token_usage").n[0] == 2
        assert len(analytics.calls()) == 2


def test_extensions_are_neither_installed_nor_loaded_on_the_fly(
    sqlite_url: str, tmp_path: Path
) -> None:
    with open_analytics(sqlite_url, tmp_path) as analytics:
        settings = analytics.sql(
            "SELECT current_setting('autoinstall_known_extensions') AS install, "
            "current_setting('autoload_known_extensions') AS load"
        ).iloc[0]
    assert (bool(settings.install), bool(settings.load)) == (False, False)
