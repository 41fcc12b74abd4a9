"""The background writer: moves journaled events into the database, in batches.

It runs on one daemon thread per :class:`~ledger.store.ledger.Ledger` and owns
every database error, so none reaches a caller:

* *Transient* errors (the database is down, locked, restarting) keep the batch
  and the journal and retry with capped exponential backoff. One warning is
  logged when an outage starts and one line when it ends, never one per event.
* A batch the database *rejects* (a constraint or data error no retry fixes) is
  split row by row; the rows that still fail go to a dead-letter file in the
  journal directory, named in a warning. Nothing is dropped silently.
* A schema that is not at the code's Alembic head is refused (nothing written,
  the journal kept) with an error naming ``ledger db upgrade``; writing resumes
  by itself once the database is upgraded.

Recorded rows wait in :class:`Pending`, which the writer swaps out whole: the
writer does no per-row Python work while holding the GIL beyond the driver's
own loop, which keeps ``record()`` latency flat while a batch is written.
Pending also notes, for each segment the ledger sealed, how many rows preceded
the seal; once those rows are committed the segment's file can go.

Memory stays bounded through a long outage: past ``max_rows`` waiting rows,
the ledger keeps new events in the journal only and marks the batch
*spilled*; the writer then reads the spilled segments back from disk once
the database returns (inserts are idempotent, so rows it already wrote are
skipped).
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import Engine

from ledger.errors import DatabaseError, JournalError
from ledger.store import held, journal
from ledger.store.engine import display_url
from ledger.store.migrate import check_schema
from ledger.store.sink import Row, Sink, make_sink, rejection_errors

log = logging.getLogger("ledger")


@dataclass(slots=True)
class Taken:
    """One hand-over from the ledger to the writer."""

    rows: list[Row]
    #: (rows before the seal, sealed segment), in order.
    seals: list[tuple[int, journal.Segment]]
    #: Events recorded since the previous hand-over.
    count: int
    #: Some events are only on disk: read ``seals`` back instead of ``rows``.
    spilled: bool = False
    #: Events the journal could not take (a full disk): only here, in memory.
    unjournaled: list[Row] = field(default_factory=list)


class Pending:
    """Rows recorded but not yet taken by the writer, and the segments sealed among them.

    The owner appends under ``lock``; :meth:`take` swaps everything out at once.
    """

    def __init__(self, max_rows: int = 200_000) -> None:
        self.lock = threading.Lock()
        self.max_rows = max_rows
        self.rows: list[Row] = []
        self.seals: list[tuple[int, journal.Segment]] = []
        self.unjournaled: list[Row] = []
        self.count = 0
        self.spilled = False
        #: Events not journaled and not yet committed: ``unjournaled`` and those the
        #: writer holds. A kill loses them.
        self.held = 0
        self.held_since: dt.datetime | None = None
        #: Called under ``lock`` to seal the live segment before a spilled hand-over.
        self.seal_live: Callable[[], None] | None = None
        #: Called under ``lock`` with (held, held_since) each time ``held`` changes.
        self.on_held: Callable[[int, dt.datetime | None], None] | None = None

    def change_held(self, delta: int) -> None:
        """Count events held only in memory up or down (call it under ``lock``)."""
        before, self.held = self.held, self.held + delta
        if before == 0 and self.held:
            self.held_since = dt.datetime.now(dt.UTC)
        elif not self.held:
            self.held_since = None
        if self.on_held is not None:
            self.on_held(self.held, self.held_since)

    def committed_held(self, count: int) -> None:
        """The writer committed ``count`` events that were held only in memory."""
        with self.lock:
            self.change_held(-count)

    def take(self) -> Taken:
        with self.lock:
            if self.spilled and self.seal_live is not None:
                try:
                    self.seal_live()  # every spilled event is now in a sealed segment
                except JournalError:
                    return self._take_memory_only()
            taken = Taken(self.rows, self.seals, self.count, self.spilled, self.unjournaled)
            self.rows, self.seals, self.count, self.spilled = [], [], 0, False
            self.unjournaled = []
        return taken

    def _take_memory_only(self) -> Taken:
        # Sealing failed (a full disk): hand over the rows held in memory and
        # keep the seals and the spill for a later hand-over, which reads every
        # sealed segment back (rows written twice are skipped by the database).
        rows, self.rows = self.rows, []
        unjournaled, self.unjournaled = self.unjournaled, []
        count = len(rows) + len(unjournaled)
        self.count -= count
        return Taken(rows, [], count, unjournaled=unjournaled)


@dataclass(slots=True)
class WriterSettings:
    batch_size: int = 5_000
    flush_interval_s: float = 0.2
    backoff_initial_s: float = 0.05
    backoff_max_s: float = 2.0


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """What a replay did with the events it found in orphaned journal segments.

    ``events``: journaled events read and handled. ``inserted``: those that
    became new rows. ``dead_lettered``: those the database refused (moved to a
    dead-letter file). The rest were stored already (a journal whose process
    died after its rows committed but before it deleted the segment).
    """

    events: int
    inserted: int
    dead_lettered: int

    @property
    def already_present(self) -> int:
        return self.events - self.inserted - self.dead_lettered


@dataclass
class _Progress:
    """Counts shared between callers and the writer, under ``cond``."""

    cond: threading.Condition = field(default_factory=threading.Condition)
    handled: int = 0  # rows committed or dead-lettered, in recording order


class Writer:
    def __init__(
        self,
        engine: Engine,
        directory: Path,
        pending: Pending,
        settings: WriterSettings,
    ) -> None:
        self._engine = engine
        self._directory = directory
        self._pending = pending
        self._settings = settings
        self._sink: Sink = make_sink(engine)
        self._rejected = rejection_errors(engine)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self.progress = _Progress()
        #: Held while this writer is inside the database driver. A fork waits for it
        #: (see ledger.store.ledger): a thread inside SQLite holds SQLite's own
        #: mutexes, and a child forked then inherits them locked and hangs on its
        #: first connect.
        self.in_driver = threading.Lock()
        self._schema_ok = False
        self._failing_since: float | None = None
        #: New rows written and rows moved to dead-letter files (the writer's thread only).
        self.inserted = 0
        self.dead_lettered = 0
        self._thread = threading.Thread(target=self._run, name="ledger-writer", daemon=True)

    # -- control, from any thread -------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        # record() calls this on every event while a batch's worth waits (the writer
        # busy with the previous one): setting a set Event takes its Condition's lock
        # and notifies, ~1 us a call; reading the flag costs next to nothing. A wake
        # seen set is one the writer has not cleared yet: it takes this row with the rest.
        if not self._wake.is_set():
            self._wake.set()

    def wait_handled(self, target: int, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.progress.cond:
            while self.progress.handled < target:
                self._wake.set()
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self.progress.cond.wait(remaining if remaining is not None else 1.0)
        return True

    def stop(self, timeout: float | None) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        with self.in_driver:
            self._sink.close()

    # -- the thread ------------------------------------------------------------------

    def _run(self) -> None:
        # The writer must outlive any bug of its own: a dead writer would
        # silently stop the ledger for the rest of the process.
        while not self._stop.is_set():
            try:
                self._loop()
                return
            except Exception:
                log.exception("ledger: the writer hit an unexpected error; restarting it")
                self._stop.wait(self._settings.backoff_max_s)

    def _loop(self) -> None:
        self._replay_orphans()
        while True:
            self._wake.wait(self._settings.flush_interval_s)
            self._wake.clear()
            taken = self._pending.take()
            if (taken.count or taken.seals) and not self._write_all(taken):
                return  # stopping mid-outage: the rows stay in the journal
            if self._stop.is_set():
                return

    def _write_all(self, taken: Taken) -> bool:
        """Write a hand-over in batches; delete each sealed segment once its rows are in."""
        if taken.unjournaled:
            if not self._write(taken.unjournaled):
                return False
            # Before _advance wakes flush(): once it returns, nothing it covered is held.
            self._pending.committed_held(len(taken.unjournaled))
            self._advance(len(taken.unjournaled))
        if taken.spilled:
            return self._write_from_disk(taken)
        rows, seals = taken.rows, taken.seals
        size, seal = self._settings.batch_size, 0
        for start in range(0, len(rows) or 1, size):
            chunk = rows[start : start + size]
            if chunk and not self._commit(chunk):
                return False
            done = start + len(chunk)
            while seal < len(seals) and seals[seal][0] <= done:
                seals[seal][1].release(delete=True)
                seal += 1
        return True

    def _write_from_disk(self, taken: Taken) -> bool:
        size = self._settings.batch_size
        for _, segment in taken.seals:
            rows, bad = journal.read(segment)
            if bad:
                self._dead_letter(bad, "unreadable journal lines")
            for start in range(0, len(rows), size):
                if not self._write(rows[start : start + size]):
                    return False
            segment.release(delete=True)
        self._advance(taken.count - len(taken.unjournaled))
        return True

    def _commit(self, batch: list[Row]) -> bool:
        if not self._write(batch):
            return False
        self._advance(len(batch))
        return True

    def _advance(self, handled: int) -> None:
        with self.progress.cond:
            self.progress.handled += handled
            self.progress.cond.notify_all()

    def replay(self) -> ReplayResult:
        """Write every orphaned segment in the directory now; what became of their events."""
        inserted, dead = self.inserted, self.dead_lettered
        events = self._replay_orphans(retry=False)
        return ReplayResult(events, self.inserted - inserted, self.dead_lettered - dead)

    def _replay_orphans(self, *, retry: bool = True) -> int:
        """Write the orphaned segments; how many events (rows and unreadable lines) were handled."""
        for lost in held.sweep(self._directory):
            log.error(
                "ledger: process %d ended holding %d event(s) only in memory (its journal %s "
                "could not be written and the database had not taken them): they were lost",
                lost.pid,
                lost.held_in_memory,
                self._directory,
            )
        total = 0
        for found in journal.orphans(self._directory):
            if found.bad_lines:
                self._dead_letter(found.bad_lines, "unreadable journal lines")
                total += len(found.bad_lines)
            ok = True
            for start in range(0, len(found.rows), self._settings.batch_size):
                chunk = found.rows[start : start + self._settings.batch_size]
                ok = self._write(chunk, retry=retry)
                if not ok:
                    break
                total += len(chunk)
            found.segment.release(delete=ok)
            if ok and found.rows:
                log.info(
                    "ledger: replayed %d journaled events from %s",
                    len(found.rows),
                    found.segment.path,
                )
        return total

    def _write(self, rows: Sequence[Row], *, retry: bool = True) -> bool:
        """Insert ``rows``; True once they are committed or dead-lettered.

        With ``retry`` it keeps trying through transient errors until the
        writer is stopped; without, it gives up after the first.
        """
        delay = self._settings.backoff_initial_s
        while True:
            try:
                with self.in_driver:
                    if not self._schema_ok:
                        check_schema(self._engine)
                        self._schema_ok = True
                    inserted = self._sink.insert(rows)
            except self._rejected as exc:
                if self._reject(rows, exc):
                    self._recovered()
                    return True
            except DatabaseError as exc:  # unreachable, or the schema is out of date
                self._outage(str(exc))
            except Exception as exc:
                self._outage(f"cannot write to {display_url(self._engine.url)}: {exc}")
            else:
                self.inserted += inserted
                self._recovered()
                return True
            if not retry or self._stop.is_set():
                return False
            self._stop.wait(delay)
            delay = min(delay * 2, self._settings.backoff_max_s)

    def _outage(self, message: str) -> None:
        self._schema_ok = False
        if self._failing_since is None:
            self._failing_since = time.monotonic()
            log.warning(
                "ledger: %s; events are kept in the journal %s and retried with backoff "
                "(logged once per outage)",
                message,
                self._directory,
            )

    def _recovered(self) -> None:
        if self._failing_since is not None:
            log.warning(
                "ledger: writing to the database again after %.1f s",
                time.monotonic() - self._failing_since,
            )
            self._failing_since = None

    def _reject(self, rows: Sequence[Row], exc: BaseException) -> bool:
        """Find the rows the database refuses, one by one, and move them aside.

        False when something else failed meanwhile (an outage): the caller
        retries the whole batch, and rows already written are skipped then.
        """
        refused: list[str] = []
        reasons: set[str] = set()
        for row in rows:
            try:
                with self.in_driver:
                    self.inserted += self._sink.insert([row])
            except self._rejected as row_exc:
                refused.append(journal.encode_row(row).decode("utf-8"))
                reasons.add(f"{type(row_exc).__name__}: {row_exc}".splitlines()[0])
            except Exception as outage:
                self._outage(f"cannot write to {display_url(self._engine.url)}: {outage}")
                return False
        if refused:
            self._dead_letter(refused, "; ".join(sorted(reasons)) or str(exc))
        return True

    def _dead_letter(self, lines: Sequence[str], reason: str) -> None:
        path = journal.dead_letter(self._directory, lines, reason)
        self.dead_lettered += len(lines)
        log.warning(
            "ledger: the database refused %d event(s) (%s); they were moved to %s",
            len(lines),
            reason,
            path,
        )
