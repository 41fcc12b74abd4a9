"""The write-ahead journal: what makes ``record()`` durable before the database is.

A journal is a directory of *segments*, files of JSON lines. Each live
:class:`~ledger.store.ledger.Ledger` owns one segment and holds an exclusive
``flock`` on it while the process lives. A segment is preallocated
(``posix_fallocate``, so a full disk fails at creation, not as a SIGBUS later)
and memory-mapped; ``record()`` copies its line into the shared mapping. Once
the copy is done the bytes belong to the kernel's page cache, so the event
survives the process being killed. A memory copy, unlike ``os.write``, does not
release the GIL: the caller is never parked behind the writer thread waiting to
get it back, which is what keeps ``record()``'s tail latency flat.

When a segment is full it is *sealed* and a new one opened; a sealed segment
is deleted once the writer has committed every event in it, so the journal
stays small. Unused space at the end of a segment reads as NUL bytes.

A segment nobody holds a lock on belongs to a process that died (or closed with
events still unwritten): an *orphan*. The next ledger on the same directory, or
``ledger replay``, locks it, writes its events (inserts are idempotent on
``event_id``) and deletes it.

Segment format: the first line is a header naming the columns, so a journal
written by an older version replays into a newer schema::

    {"ledger_journal": 2, "columns": ["event_id", "call_id", ...]}
    {"open": {"event_id": "9a4d...", "call_id": "5f2c...", "attempt": 1, ...}}
    ["0b1e...", "5f2c...", 1, "2026-11-30 10:00:00.000000", ...]
    {"sealed": true}

An array is an event. An ``open`` line is an attempt that has started (sent to a
provider, maybe served and billed) and has no event yet: what was known when it was
sent, from which replay makes an ``error`` row of type ``interrupted`` under the
event id its own event will carry. The event, when it comes, closes it. A segment that is rotated
out carries its still-open attempts into the next one and then ends with the
``sealed`` line, so an attempt is open in at most one unsealed segment: replay
stores the open attempts of an unsealed orphan that no event of that segment
closed (inserts are idempotent on ``event_id``, so a second replay adds nothing).
Version 1 segments (no ``open`` lines) replay as before.
"""

from __future__ import annotations

import fcntl
import json
import logging
import mmap
import os
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import msgspec

from ledger.errors import JournalError
from ledger.events import SENT_FIELDS, UsageEvent, interrupted_row, sent_values
from ledger.schema import EVENT_COLUMNS, OLD_ROW_DEFAULTS

log = logging.getLogger(__name__)

FORMAT_VERSION: Final = 2
_READABLE_VERSIONS: Final = frozenset({1, FORMAT_VERSION})
SEGMENT_GLOB: Final = "segment-*.jsonl"
DEAD_LETTER_PREFIX: Final = "dead-letter-"
DEFAULT_SEGMENT_BYTES: Final = 8 * 1024 * 1024

_HEADER: Final = (
    json.dumps({"ledger_journal": FORMAT_VERSION, "columns": list(EVENT_COLUMNS)}) + "\n"
).encode()


# A row is a flat tuple of str, int, float and None (to_row made it). msgspec writes it
# straight to UTF-8 bytes in about a sixth of json's time (the C encoder builds a str,
# which then has to be encoded): record() pays this on the caller's thread for every
# event. Its text can differ from json.dumps' (1e16, not 1e+16) but reads back as the
# same values. enc_hook: a str subclass to_row kept is written as its text.
_encode: Final = msgspec.json.Encoder(enc_hook=str).encode


def encode_row(row: Sequence[Any]) -> bytes:
    return _encode(row) + b"\n"


def encode_open(event: UsageEvent) -> bytes:
    """The line of an attempt that has started: what was known when it was sent
    (:data:`~ledger.events.SENT_FIELDS`, by name). Not checked here, on the caller's
    thread: replay makes its row (:func:`~ledger.events.interrupted_row`) and repairs
    what the row cannot hold."""
    return b'{"open":' + _encode(dict(zip(SENT_FIELDS, sent_values(event), strict=True))) + b"}\n"


def open_row(line: bytes) -> tuple[Any, ...]:
    """The row replay makes of the ``open`` line ``line`` (an attempt never recorded)."""
    return interrupted_row(json.loads(line)["open"])


#: Ends a segment that was rotated out (its open attempts live on in the next one).
SEALED: Final = b'{"sealed":true}\n'


@dataclass(slots=True)
class Segment:
    """One locked journal file and the events appended to it so far."""

    path: Path
    fd: int
    size: int
    capacity: int = 0
    mapping: mmap.mmap | None = None
    events: int = 0

    def fits(self, line: bytes) -> bool:
        # room is always kept for the sealed line that ends a rotated segment
        return self.size + len(line) + len(SEALED) <= self.capacity

    def forget(self) -> None:
        """Close our copy of the file in a forked child: the parent keeps its lock and file."""
        if self.mapping is not None:
            self.mapping.close()
            self.mapping = None
        os.close(self.fd)

    def release(self, *, delete: bool) -> None:
        """Unlock and close; delete first when every event in it is committed.

        Deleting before unlocking means no other process can lock a file whose
        events we already wrote and replay them needlessly.
        """
        if self.mapping is not None:
            self.mapping.close()
            self.mapping = None
        if delete:
            self.path.unlink(missing_ok=True)
        os.close(self.fd)


@dataclass(frozen=True, slots=True)
class Replay:
    """The events read from an orphaned segment."""

    segment: Segment
    rows: list[tuple[Any, ...]]
    bad_lines: list[str]


def _lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def open_segment(directory: Path, capacity: int = DEFAULT_SEGMENT_BYTES) -> Segment:
    """Create, lock, preallocate, map and publish a new live segment in ``directory``.

    The file is created under a temporary name, locked, and only then renamed
    to its public name: an orphan scan in another process can never lock (and
    delete) a segment between its creation and our lock.
    """
    stem = f"segment-{time.time_ns():020d}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp = directory / f".{stem}.tmp"
    fd = -1
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        _lock(fd)
        os.posix_fallocate(fd, 0, capacity)
        mapping = mmap.mmap(fd, capacity)
        mapping[: len(_HEADER)] = _HEADER
        path = directory / f"{stem}.jsonl"
        tmp.rename(path)
    except OSError as exc:
        if fd >= 0:
            os.close(fd)
            tmp.unlink(missing_ok=True)
        raise JournalError(f"cannot create a journal segment in {directory}: {exc}") from exc
    return Segment(path=path, fd=fd, size=len(_HEADER), capacity=capacity, mapping=mapping)


def append(segment: Segment, line: bytes, *, event: bool = True) -> None:
    """Append one encoded line (the caller checked it :meth:`~Segment.fits`); ``event``:
    it is an event (not an ``open`` or ``sealed`` line).

    Durable against a process kill once this returns.
    """
    assert segment.mapping is not None
    end = segment.size + len(line)
    segment.mapping[segment.size : end] = line
    segment.size = end
    segment.events += event


def seal(segment: Segment) -> None:
    """End a rotated segment: its open attempts were carried into the next one."""
    append(segment, SEALED, event=False)


def _decode(path: Path, data: bytes) -> tuple[list[tuple[Any, ...]], list[str]]:
    """The segment's events, then the attempts it left open (unless sealed), as rows;
    and its unreadable lines."""
    # JSON escapes NUL, so the first NUL byte is where the appended lines end.
    lines = data.split(b"\0", 1)[0].split(b"\n")
    header = json.loads(lines[0])
    if header.get("ledger_journal") not in _READABLE_VERSIONS:
        raise JournalError(f"{path}: unknown journal format {header!r}")
    columns: list[str] = header["columns"]
    position = {name: columns.index(name) for name in EVENT_COLUMNS if name in columns}

    def as_row(values: list[Any]) -> tuple[Any, ...]:
        return tuple(
            values[position[c]] if c in position else OLD_ROW_DEFAULTS.get(c) for c in EVENT_COLUMNS
        )

    rows: list[tuple[Any, ...]] = []
    opened: dict[Any, tuple[Any, ...]] = {}
    sealed = False
    bad: list[str] = []
    for number, raw in enumerate(lines[1:], start=2):
        if not raw:
            continue
        try:
            values = json.loads(raw)
            if isinstance(values, list):
                rows.append(as_row(values))
            elif "open" in values:
                row = interrupted_row(values["open"])
                opened[row[0]] = row
            else:
                sealed = sealed or values.get("sealed") is True
        except (ValueError, IndexError, TypeError, AttributeError):
            # A torn last line is an event whose record() never returned.
            if number < len(lines):
                bad.append(raw.decode("utf-8", "replace"))
    if not sealed:
        closed = {row[0] for row in rows}
        rows.extend(row for event_id, row in opened.items() if event_id not in closed)
    return rows, bad


def orphans(directory: Path) -> Iterator[Replay]:
    """Lock and read every segment in ``directory`` that no live process holds."""
    if not directory.is_dir():
        return
    for path in sorted(directory.glob(SEGMENT_GLOB)):
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:  # another process replayed it meanwhile
            continue
        if not _lock(fd):
            os.close(fd)
            continue
        segment = Segment(path=path, fd=fd, size=0)
        if not path.exists():  # replayed and deleted between our open and lock
            segment.release(delete=False)
            continue
        try:
            rows, bad = read(segment)
        except (OSError, ValueError) as exc:
            log.warning("ledger: skipping unreadable journal segment %s: %s", path, exc)
            segment.release(delete=False)
            continue
        segment.events = len(rows)
        yield Replay(segment=segment, rows=rows, bad_lines=bad)


def read(segment: Segment) -> tuple[list[tuple[Any, ...]], list[str]]:
    """The events in a segment we hold the lock of (ours, or an orphan we took)."""
    if segment.mapping is not None:
        data = bytes(segment.mapping[: segment.size])
    else:
        with os.fdopen(os.dup(segment.fd), "rb") as f:
            data = f.read()
        segment.size = len(data)
    return _decode(segment.path, data) if data else ([], [])


def dead_letter(directory: Path, lines: Sequence[str], reason: str) -> Path:
    """Move events no retry will write into a file of their own, with the reason."""
    path = (
        directory
        / f"{DEAD_LETTER_PREFIX}{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}.jsonl"
    )
    # 0600 like the segments: the events carry the same agents, tags and costs.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(
            json.dumps({"ledger_dead_letter": 1, "reason": reason, "columns": list(EVENT_COLUMNS)})
        )
        f.write("\n")
        for line in lines:
            f.write(line.rstrip("\n") + "\n")
    return path
