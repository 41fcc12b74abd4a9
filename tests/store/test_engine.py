"""Which ledger URLs are taken, and the one line a wrong one gets."""

from __future__ import annotations

import pytest

from ledger.errors import ConfigurationError
from ledger.store.engine import database_url


@pytest.mark.parametrize(
    ("url", "driver"),
    [
        ("postgresql://u@h/db", "psycopg"),
        ("postgres://u@h/db", "psycopg"),
        ("postgresql+psycopg://u@h/db", "psycopg"),
        ("sqlite:///ledger.db", "pysqlite"),
    ],
)
def test_postgresql_gets_psycopg_and_sqlite_its_own_driver(url: str, driver: str) -> None:
    assert database_url(url).get_driver_name() == driver


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("mysql://u@h/db", "unsupported database 'mysql'"),
        # not installed: these failed later with ModuleNotFoundError's traceback
        ("postgresql+asyncpg://u@h/db", "unsupported database driver 'asyncpg'"),
        ("postgresql+psycopg2://u@h/db", "unsupported database driver 'psycopg2'"),
        ("sqlite+aiosqlite:///l.db", "unsupported database driver 'aiosqlite'"),
    ],
)
def test_an_unsupported_database_or_driver_is_one_clear_error(url: str, said: str) -> None:
    with pytest.raises(ConfigurationError, match=said):
        database_url(url)
