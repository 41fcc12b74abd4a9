"""DuckDB's transactions, checkpoints, threads and memory, as the folds and the copy use them."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from typing import Final

import duckdb


def checkpoint(con: duckdb.DuckDBPyConnection) -> None:
    """Write what committed transactions left in memory to the file, if DuckDB can now.

    Only memory is at stake (the WAL already holds the data), so a checkpoint
    DuckDB refuses (another transaction in the way) is not worth failing for.
    """
    with contextlib.suppress(duckdb.TransactionException):
        con.execute("CHECKPOINT")


@contextlib.contextmanager
def one_thread(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """DuckDB on one thread for the block (the setting is the database's), then as before."""
    (threads,) = con.execute("SELECT current_setting('threads')").fetchall()[0]
    con.execute("SET threads = 1")
    try:
        yield
    finally:
        con.execute(f"SET threads = {int(threads)}")


@contextlib.contextmanager
def memory_at_most(
    con: duckdb.DuckDBPyConnection, limit: str, configured: str | None
) -> Iterator[None]:
    """DuckDB's memory limit (the database's) lowered to ``limit`` for the block, then set
    back to ``configured`` (what the file was opened with: DuckDB shows its limit rounded,
    so it is not read back). Nothing changes when ``configured`` is None or not higher."""
    if configured is None or _bytes(configured) <= _bytes(limit):
        yield
        return
    con.execute(f"SET memory_limit = '{_bytes(limit)}B'")
    try:
        yield
    finally:
        con.execute(f"SET memory_limit = '{_bytes(configured)}B'")


_SIZE: Final = re.compile(r"\s*([0-9.]+)\s*([KMGT]?)(I?)B\s*", re.IGNORECASE)


def _bytes(size: str) -> int:
    """Bytes in a DuckDB size setting: ``'3GB'``, ``'512 MiB'``, ``'100B'``."""
    match = _SIZE.fullmatch(size)
    if match is None:
        raise ValueError(f"not a memory size: {size!r}")
    number, prefix, binary = match.groups()
    power = "KMGT".index(prefix.upper()) + 1 if prefix else 0
    return int(float(number) * ((1024 if binary else 1000) ** power))


def in_transaction(con: duckdb.DuckDBPyConnection, work: Callable[[], None]) -> None:
    """``work`` in a DuckDB transaction of its own: all of it, or none."""
    con.execute("BEGIN TRANSACTION")
    try:
        work()
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
