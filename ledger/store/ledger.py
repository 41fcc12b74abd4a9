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
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Final, Literal, cast

from sqlalchemy import Engine
from sqlalchemy.engine import URL

from ledger.errors import ConfigurationError, JournalError
from ledger.events import UsageEvent, to_row
from ledger.exporters import Exporter, exporters_from_env
from ledger.policies import PolicyBook
from ledger.store import journal
from ledger.store.engine import database_url, make_engine, sqlite_path
from ledger.store.held import StatusFile
from ledger.store.migrate import check_ledger
from ledger.store.sink import Row
from ledger.store.writer import Pending, ReplayResult, Writer, WriterSettings

ENV_JOURNAL_DIR: Final = "LEDGER_JOURNAL_DIR"
ENV_ON_JOURNAL_FULL: Final = "LEDGER_ON_JOURNAL_FULL"

#: What ``record()`` does with an event the journal's disk refuses.
OnJournalFull = Literal["memory", "refuse"]
_ON_JOURNAL_FULL: Final = ("memory", "refuse")

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

    ``on_journal_full`` chooses what ``record()`` does when the journal's disk
    refuses an event (full, read-only, gone); default ``LEDGER_ON_JOURNAL_FULL``,
    else ``"memory"``:

    * ``"memory"``: keep it in memory for the writer, up to ``max_pending_rows``
      such events, and return normally. It reaches the database as soon as the
      database takes it, but until then a kill (SIGKILL, OOM, power loss) loses
      it: :attr:`held_in_memory` and ``ledger db status`` count such events.
    * ``"refuse"``: raise :class:`~ledger.errors.JournalError` for it (not
      recorded), so every event ``record()`` accepted is on disk.

    Either way one warning is logged when the journal starts failing and one
    line when it is written again; events still held in memory then are
    journaled at once.
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
        on_journal_full: OnJournalFull | None = None,
        exporters: Sequence[Exporter] | None = None,
    ) -> None:
        self.on_journal_full = _on_journal_full(on_journal_full)
        self.url = engine.url if engine is not None else database_url(url)
        self.journal_dir = journal_dir or journal_dir_for(self.url)
        self._owns_engine = engine is None
        self._engine = engine or make_engine(self.url)
        self._segment_bytes = segment_bytes
        self._segment = journal.open_segment(self.journal_dir, segment_bytes)
        try:
            self._status = StatusFile.create(self.journal_dir)
        except JournalError:
            self._segment.release(delete=True)
            raise
        #: Why the journal refuses events (None while it takes them), and since when.
        self._journal_error: JournalError | None = None
        self._journal_failing_since = 0.0
        self._pending = self._new_pending(max_pending_rows)
        #: Attempts begun and not yet recorded: event id -> their journaled ``open`` line.
        self._open: dict[str, bytes] = {}
        self._recorded = 0
        self._closed = False
        self._settings = WriterSettings(batch_size=batch_size, flush_interval_s=flush_interval_s)
        self._batch_size = batch_size
        self._writer = Writer(self._engine, self.journal_dir, self._pending, self._settings)
        self._writer.start()
        self._exporters = tuple(exporters) if exporters is not None else exporters_from_env()
        self._exporter_failed = False
        self._policies: PolicyBook | None = None
        _live.add(self)

    @property
    def policies(self) -> PolicyBook:
        """The routing policies in this ledger's database, read in the background
        (:class:`~ledger.policies.PolicyBook`; started on first use)."""
        if self._policies is None:
            self._policies = PolicyBook(self._engine)
        return self._policies

    def _after_fork_in_child(self) -> None:
        """A forked child gets a segment, a queue and a writer of its own.

        What it inherited belongs to the parent: the child must neither write
        into the parent's segment nor delete it, nor reuse its database
        connections, and the writer thread did not survive the fork.
        """
        inherited = [self._segment, *(segment for _, segment in self._pending.seals)]
        for segment in inherited:
            segment.forget()
        self._status.forget()
        self._engine.dispose(close=False)
        self._pending = self._new_pending(self._pending.max_rows)
        self._open = {}  # the parent's attempts: the parent closes them
        self._recorded = 0
        self._journal_error = None
        self._segment = journal.open_segment(self.journal_dir, self._segment_bytes)
        self._status = StatusFile.create(self.journal_dir)
        self._writer = Writer(self._engine, self.journal_dir, self._pending, self._settings)
        self._writer.start()

    def _new_pending(self, max_rows: int) -> Pending:
        pending = Pending(max_rows)
        pending.seal_live = self._seal_live
        pending.on_held = lambda count, since: self._status.update(count, since)
        return pending

    @property
    def held_in_memory(self) -> int:
        """Events recorded but neither journaled nor in the database yet: a kill loses them.

        Always 0 while the journal's disk takes events, and with
        ``on_journal_full="refuse"``.
        """
        return self._pending.held

    def record(self, event: UsageEvent) -> str:
        """Keep ``event`` and return its ``event_id``; it reaches the database shortly.

        Raises ``ValueError`` (naming the field) if the event is invalid, and
        ``RuntimeError`` after :meth:`close`. Database trouble is the writer's
        to handle. If the journal's disk refuses the event, what happens is
        ``on_journal_full``'s choice (see the class): held in memory, or
        :class:`~ledger.errors.JournalError`. Held in memory, past
        ``max_pending_rows`` such events, ``JournalError`` all the same.
        """
        row = to_row(event)
        line = journal.encode_row(row)
        with self._pending.lock:
            if self._closed:
                raise RuntimeError("this Ledger is closed")
            if self._open:
                self._open.pop(event.event_id, None)  # before a rotation could carry it on
            backlog = self._keep(row, line, event.event_id)
        if backlog >= self._batch_size:
            self._writer.wake()
        for exporter in self._exporters:
            self._export(exporter, event)
        return event.event_id

    def _keep(self, row: Row, line: bytes, event_id: str) -> int:
        """Journal ``row`` and queue it for the writer (under the pending lock); the backlog."""
        pending = self._pending
        if self._journal(line):
            self._queue_journaled(row)
        elif self.on_journal_full == "refuse":
            raise JournalError(
                f"event {event_id} not recorded: the journal {self.journal_dir} "
                f"cannot be written ({self._journal_error}); on_journal_full='refuse'"
            )
        elif len(pending.unjournaled) >= pending.max_rows:
            raise JournalError(
                f"event {event_id} not recorded: the journal {self.journal_dir} "
                f"cannot be written ({self._journal_error}) and {len(pending.unjournaled)} "
                "events already wait in memory (max_pending_rows)"
            )
        else:
            pending.unjournaled.append(row)
            pending.change_held(1)
        self._recorded += 1
        pending.count += 1
        return len(pending.rows) + len(pending.unjournaled)

    def begin_attempt(self, event: UsageEvent) -> None:
        """Journal that an attempt has started; ``record()`` of an event with the same
        ``event_id`` closes it.

        ``event`` is the attempt as known when it is sent (its
        :data:`~ledger.events.SENT_FIELDS`; the rest is ignored). If this process dies
        before recording it, the next ledger on this journal, or ``ledger replay``,
        stores it as an ``error`` of type ``interrupted``, usage and cost unknown, so
        an attempt a provider may have served and billed is never missing from the
        ledger. Costs one short line in the journal, nothing in the database. Best
        effort: when the journal cannot be written the attempt is simply not journaled
        (``record()``'s own rules then apply to its event).
        """
        line = journal.encode_open(event)
        with self._pending.lock:
            if self._closed:
                raise RuntimeError("this Ledger is closed")
            if self._journal_error is None and self._journal(line, event=False):
                self._open[event.event_id] = line

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

    def _queue_journaled(self, row: Row) -> None:
        """Hand a journaled row to the writer: in memory, or on disk only past ``max_rows``."""
        pending = self._pending
        if not pending.spilled and len(pending.rows) < pending.max_rows:
            pending.rows.append(row)
        elif not pending.spilled:
            pending.spilled = True
            log.warning(
                "ledger: %d events are waiting for the database; new ones are kept in "
                "the journal %s only until it catches up",
                len(pending.rows),
                self.journal_dir,
            )

    def _journal(self, line: bytes, *, event: bool = True) -> bool:
        """Append to the live segment (sealing it when full); False if the disk refuses.

        A failing journal stays failing (one episode, one warning) until a new
        segment opens, even if shorter lines still fit in the old one meanwhile.
        """
        try:
            if not self._segment.fits(line):
                self._rotate(len(line))
                if self._journal_error is not None:
                    self._journal_held()
                    if not self._segment.fits(line):
                        self._rotate(len(line))
        except JournalError as exc:
            self._journal_refused(exc)
            return False
        journal.append(self._segment, line, event=event)
        return True

    def _journal_refused(self, exc: JournalError) -> None:
        first = self._journal_error is None
        self._journal_error = exc
        if not first:
            return
        self._journal_failing_since = time.monotonic()
        if self.on_journal_full == "refuse":
            log.warning(
                "ledger: %s; record() refuses new events with JournalError until the journal "
                "can be written (on_journal_full='refuse'; logged once until then)",
                exc,
            )
        else:
            log.warning(
                "ledger: %s; new events are held only in memory until the journal can be "
                "written: each reaches the database once it takes it, but is lost if this "
                "process dies first, killed or not (`ledger db status` counts them; "
                "on_journal_full='refuse' raises JournalError instead; logged once until then)",
                exc,
            )

    def _journal_held(self) -> None:
        """The journal takes events again: journal those still held in memory, end the episode.

        Called under the pending lock right after a new segment opened. Rows the
        writer already took stay in its hands until it commits them.
        """
        pending = self._pending
        moved = 0
        try:
            for row in pending.unjournaled:
                line = journal.encode_row(row)
                if not self._segment.fits(line):
                    self._rotate(len(line))
                journal.append(self._segment, line)
                self._queue_journaled(row)
                moved += 1
        finally:
            if moved:
                del pending.unjournaled[:moved]
                pending.change_held(-moved)
        since = time.monotonic() - self._journal_failing_since
        if moved or pending.held:
            log.warning(
                "ledger: the journal %s can be written again after %.1f s; %d event(s) held in "
                "memory were journaled, %d are still held until the database takes them",
                self.journal_dir,
                since,
                moved,
                pending.held,
            )
        else:
            log.warning(
                "ledger: the journal %s can be written again after %.1f s", self.journal_dir, since
            )
        self._journal_error = None

    def _rotate(self, line_bytes: int = 0) -> journal.Segment:
        """Seal the live segment and open the next (called under the pending lock).

        The attempts still open move into the new segment before the old one is
        marked sealed: a kill between the two leaves both open, and replay stores
        the same ``interrupted`` row twice under one event id, that is once.
        """
        sealed = self._segment
        carried = sum(map(len, self._open.values()))
        capacity = max(self._segment_bytes, 2 * line_bytes + carried + 4096)
        self._segment = journal.open_segment(self.journal_dir, capacity)
        for line in self._open.values():
            journal.append(self._segment, line, event=False)
        journal.seal(sealed)
        self._pending.seals.append((len(self._pending.rows), sealed))
        return self._segment

    def _seal_live(self) -> None:
        self._rotate()
        if self._journal_error is not None:
            moved = bool(self._pending.unjournaled)
            self._journal_held()
            if moved:  # a spilled hand-over reads sealed segments only: seal these rows too
                self._rotate()

    def _interrupt_open(self) -> None:
        """Closing with attempts still open: each is stored as what it would be after a
        kill (``interrupted``), not lost with the segment (under the pending lock)."""
        while self._open:
            event_id, line = self._open.popitem()
            try:
                row = journal.open_row(line)
                self._keep(row, journal.encode_row(row), event_id)
            except (JournalError, ValueError) as exc:
                log.error("ledger: closing with attempt %s open and unrecorded: %s", event_id, exc)

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
            self._interrupt_open()
            if self._journal_error is not None and self._pending.unjournaled:
                try:  # the disk may have room again: journaled, nothing is lost below
                    self._rotate()
                    self._journal_held()
                except JournalError:
                    pass
        done = self.flush(timeout)
        self._writer.stop(timeout=5.0)
        if self._pending.held:
            log.error(
                "ledger: closing with %d event(s) held only in memory (the journal %s could "
                "not be written and the database did not take them in time): they are lost",
                self._pending.held,
                self.journal_dir,
            )
        for exporter in self._exporters:
            try:
                exporter.close(timeout=5.0)
            except Exception:
                log.warning("ledger: exporter %r failed to close", exporter, exc_info=True)
        self._segment.release(delete=done and not self._pending.count)
        self._status.close()
        if self._policies is not None:
            self._policies.close()
        if self._owns_engine:
            self._engine.dispose()
        _live.discard(self)

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _on_journal_full(choice: str | None) -> OnJournalFull:
    value = choice if choice is not None else os.environ.get(ENV_ON_JOURNAL_FULL) or "memory"
    if value not in _ON_JOURNAL_FULL:
        source = "on_journal_full" if choice is not None else ENV_ON_JOURNAL_FULL
        raise ConfigurationError(f"{source}={value!r}: expected 'memory' or 'refuse'")
    return cast(OnJournalFull, value)


def replay(url: str | URL | None = None, *, journal_dir: Path | None = None) -> ReplayResult:
    """Write the events that processes which died left in a journal.

    Returns how many events were found, how many became new rows and how
    many the database refused; the rest were stored already.

    Safe beside running ledgers: their live segments are locked and skipped.
    Raises :class:`~ledger.errors.DatabaseError` when the database is missing,
    unreachable or out of date; the journal is then left as it was.
    """
    resolved = check_ledger(url)
    engine = make_engine(resolved)
    try:
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


#: Writers whose ``in_driver`` lock the forking thread holds, between before and after.
_held_for_fork: list[threading.Lock] = []


def _before_fork() -> None:
    # Wait until no writer is inside the database driver (one statement at most):
    # the child must not inherit a driver mutex locked by a thread it does not have.
    for ledger in list(_live):
        lock = ledger._writer.in_driver
        lock.acquire()
        _held_for_fork.append(lock)


def _after_fork_in_parent() -> None:
    while _held_for_fork:
        _held_for_fork.pop().release()


def _after_fork_in_child() -> None:
    global _default_lock
    _after_fork_in_parent()  # the locks of the writers the child is about to replace
    _default_lock = threading.Lock()  # another thread may have held it at the fork
    for ledger in list(_live):
        if not ledger._closed:
            ledger._after_fork_in_child()


os.register_at_fork(
    before=_before_fork,
    after_in_parent=_after_fork_in_parent,
    after_in_child=_after_fork_in_child,
)


@atexit.register
def _close_all() -> None:
    for ledger in list(_live):
        ledger.close(timeout=5.0)
