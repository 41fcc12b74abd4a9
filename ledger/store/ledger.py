"""The recording API: :class:`Ledger` and the process-wide default.

``record()`` is on the caller's hot path, so it does the least that makes the
event safe: validate it (a bad event fails here, at the caller), append one
line to this ledger's journal segment, and leave the row for the background
:class:`~ledger.store.writer.Writer`. It never touches the database, so a slow
or dead database never slows or breaks an LLM call.
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import os
import threading
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from sqlalchemy import Engine
from sqlalchemy.engine import URL

from ledger.events import UsageEvent, to_row
from ledger.exporters import Exporter, exporters_from_env
from ledger.store import journal
from ledger.store.engine import database_url, make_engine, sqlite_path
from ledger.store.journal import JournalError
from ledger.store.migrate import check_schema
from ledger.store.writer import Pending, Writer, WriterSettings

ENV_JOURNAL_DIR: Final = "LEDGER_JOURNAL_DIR"

log = logging.getLogger("ledger")


def journal_dir_for(url: URL) -> Path:
    """Where a ledger's journal lives unless told otherwise.

    Beside a SQLite file (``ledger.db`` -> ``ledger.db.journal/``), so the
    journal travels with the data; for a server database, in the user's state
    directory under a hash of the URL (password excluded).
    """
    if env := os.environ.get(ENV_JOURNAL_DIR):
        base = Path(env)
    elif (path := sqlite_path(url)) is not None:
        return path.with_name(path.name + ".journal")
    else:
        state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
        base = Path(state) / "ledger"
    key = url.render_as_string(hide_password=True).encode()
    return base / f"journal-{hashlib.sha256(key).hexdigest()[:16]}"


class Ledger:
    """Records usage events durably and writes them to the ledger database in the background.

    ``url`` is an SQLAlchemy URL (default: ``LEDGER_DATABASE_URL``, else
    ``ledger.db`` in the working directory); the database must be migrated
    (``ledger db upgrade``). ``journal_dir`` overrides where events wait for
    the database. Events left in a journal by a process that died are written
    when the next ledger on that journal starts. ``exporters`` mirror every
    recorded event elsewhere, off the caller's thread (default: what
    ``LEDGER_OTEL_ENDPOINT`` asks for, see :mod:`ledger.exporters`).
    """

    def __init__(
        self,
        url: str | URL | None = None,
        *,
        journal_dir: Path | None = None,
        batch_size: int = 5_000,
        max_pending_rows: int = 200_000,
        flush_interval_s: float = 0.2,
        segment_bytes: int = journal.DEFAULT_SEGMENT_BYTES,
        engine: Engine | None = None,
        exporters: Sequence[Exporter] | None = None,
    ) -> None:
        self.url = engine.url if engine is not None else database_url(url)
        self.journal_dir = journal_dir or journal_dir_for(self.url)
        self._owns_engine = engine is None
        self._engine = engine or make_engine(self.url)
        self._segment_bytes = segment_bytes
        self._segment = journal.open_segment(self.journal_dir, segment_bytes)
        self._journal_failing = False
        self._pending = Pending(max_pending_rows)
        self._pending.seal_live = self._seal_live
        self._recorded = 0
        self._closed = False
        self._settings = WriterSettings(batch_size=batch_size, flush_interval_s=flush_interval_s)
        self._batch_size = batch_size
        self._writer = Writer(self._engine, self.journal_dir, self._pending, self._settings)
        self._writer.start()
        self._exporters = tuple(exporters) if exporters is not None else exporters_from_env()
        self._exporter_failed = False
        _live.add(self)

    def _after_fork_in_child(self) -> None:
        """A forked child gets a segment, a queue and a writer of its own.

        What it inherited belongs to the parent: the child must neither write
        into the parent's segment nor delete it, nor reuse its database
        connections, and the writer thread did not survive the fork.
        """
        inherited = [self._segment, *(segment for _, segment in self._pending.seals)]
        for segment in inherited:
            segment.forget()
        self._engine.dispose(close=False)
        self._pending = Pending(self._pending.max_rows)
        self._pending.seal_live = self._seal_live
        self._recorded = 0
        self._journal_failing = False
        self._segment = journal.open_segment(self.journal_dir, self._segment_bytes)
        self._writer = Writer(self._engine, self.journal_dir, self._pending, self._settings)
        self._writer.start()

    def record(self, event: UsageEvent) -> str:
        """Keep ``event`` and return its ``event_id``; it reaches the database shortly.

        Raises ``ValueError`` (naming the field) if the event is invalid, and
        ``RuntimeError`` after :meth:`close`. Database trouble is the writer's
        to handle. If the journal's disk refuses writes, events are held in
        memory (with one warning) up to ``max_pending_rows``; past that,
        :class:`~ledger.store.journal.JournalError` says the event cannot be kept.
        """
        row = to_row(event)
        line = journal.encode_row(row)
        pending = self._pending
        with pending.lock:
            if self._closed:
                raise RuntimeError("this Ledger is closed")
            if not self._journal(line):
                if len(pending.unjournaled) >= pending.max_rows:
                    raise JournalError(
                        f"the journal {self.journal_dir} cannot be written and "
                        f"{len(pending.unjournaled)} events already wait in memory"
                    )
                pending.unjournaled.append(row)
            elif len(pending.rows) < pending.max_rows:
                pending.rows.append(row)
            elif not pending.spilled:
                pending.spilled = True
                log.warning(
                    "ledger: %d events are waiting for the database; new ones are kept in "
                    "the journal %s only until it catches up",
                    len(pending.rows),
                    self.journal_dir,
                )
            self._recorded += 1
            pending.count += 1
            backlog = len(pending.rows) + len(pending.unjournaled)
        if backlog >= self._batch_size:
            self._writer.wake()
        for exporter in self._exporters:
            self._export(exporter, event)
        return event.event_id

    def _export(self, exporter: Exporter, event: UsageEvent) -> None:
        """Hand ``event`` to ``exporter``; its failure is logged once, never raised."""
        try:
            exporter.submit(event)
        except Exception:
            if not self._exporter_failed:
                self._exporter_failed = True
                log.warning(
                    "ledger: exporter %r failed; rows are unaffected", exporter, exc_info=True
                )

    def _journal(self, line: bytes) -> bool:
        """Append to the live segment (sealing it when full); False if the disk refuses."""
        try:
            if not self._segment.fits(line):
                self._rotate(len(line))
        except JournalError as exc:
            if not self._journal_failing:
                self._journal_failing = True
                log.warning(
                    "ledger: %s; events are held in memory only until it can be written", exc
                )
            return False
        self._journal_failing = False
        journal.append(self._segment, line)
        return True

    def _rotate(self, line_bytes: int = 0) -> journal.Segment:
        """Seal the live segment and open the next (called under the pending lock)."""
        sealed = self._segment
        capacity = max(self._segment_bytes, 2 * line_bytes + 4096)
        self._segment = journal.open_segment(self.journal_dir, capacity)
        self._pending.seals.append((len(self._pending.rows), sealed))
        return self._segment

    def _seal_live(self) -> None:
        self._rotate()

    def flush(self, timeout: float | None = 10.0) -> bool:
        """Wait until every event recorded so far is in the database (or dead-lettered).

        Returns False if ``timeout`` seconds pass first (the database is down,
        say); the events stay safe in the journal either way.
        """
        with self._pending.lock:
            target = self._recorded
        return self._writer.wait_handled(target, timeout)

    def close(self, timeout: float | None = 10.0) -> None:
        """Flush (up to ``timeout``), stop the writer and release the journal.

        Events not yet written stay in the journal for the next ledger or
        ``ledger replay``.
        """
        with self._pending.lock:
            if self._closed:
                return
            self._closed = True
        done = self.flush(timeout)
        self._writer.stop(timeout=5.0)
        for exporter in self._exporters:
            try:
                exporter.close(timeout=5.0)
            except Exception:
                log.warning("ledger: exporter %r failed to close", exporter, exc_info=True)
        self._segment.release(delete=done and not self._pending.count)
        if self._owns_engine:
            self._engine.dispose()
        _live.discard(self)

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def replay(url: str | URL | None = None, *, journal_dir: Path | None = None) -> int:
    """Write the events that processes which died left in a journal; returns how many.

    Safe beside running ledgers: their live segments are locked and skipped.
    Raises :class:`~ledger.errors.DatabaseError` when the database is
    unreachable or out of date; the journal is then left as it was.
    """
    resolved = database_url(url)
    engine = make_engine(resolved)
    try:
        check_schema(engine)
        directory = journal_dir or journal_dir_for(resolved)
        writer = Writer(engine, directory, Pending(), WriterSettings())
        try:
            return writer.replay()
        finally:
            writer.stop(timeout=0)
    finally:
        engine.dispose()


_live: weakref.WeakSet[Ledger] = weakref.WeakSet()
_default: Ledger | None = None
_default_lock = threading.Lock()


def default_ledger() -> Ledger:
    """The process-wide ledger, built from the environment on first use."""
    global _default
    with _default_lock:
        if _default is None or _default._closed:
            _default = Ledger()
        return _default


def _after_fork_in_child() -> None:
    global _default_lock
    _default_lock = threading.Lock()  # another thread may have held it at the fork
    for ledger in list(_live):
        if not ledger._closed:
            ledger._after_fork_in_child()


os.register_at_fork(after_in_child=_after_fork_in_child)


@atexit.register
def _close_all() -> None:
    for ledger in list(_live):
        ledger.close(timeout=5.0)
