"""How many events each running ledger holds only in memory, readable from another process.

When the journal's disk refuses writes and a :class:`~ledger.store.ledger.Ledger`
keeps events in memory (``on_journal_full="memory"``), those events are lost if
the process dies before the database takes them. Only that process knows how
many there are, and ``ledger db status`` runs in another one. So each ledger
keeps a small *status file* beside its journal segments::

    held-<pid>-<random>.json
    {"ledger_held":1,"pid":4242,"held_in_memory":17,"since":"2026-11-30T12:00:00Z"}

Why this shape:

* It must be writable while the disk is full, which is exactly when it matters.
  It is created and preallocated when the ledger starts (a disk already full
  then fails the ledger's start, as its first segment does) and rewritten in
  place through a shared memory map: no new disk block, no system call, and a
  reader in another process sees the page cache at once. It is rewritten,
  under the ledger's lock, every time the count changes.
* It must say whether its process still runs. The owner holds an exclusive
  ``flock`` on it for its whole life, as on its journal segment; a reader that
  can take a shared lock has found the file of a process that died. A dead
  process's file with a count above zero records events that were *lost*; the
  next ledger on the directory (or ``ledger replay``) logs them and deletes it.
* A reader may catch a rewrite half-done: it reads until two reads agree.

The record is one JSON line padded with spaces to a fixed size, so every
rewrite covers the previous one entirely.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import mmap
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from ledger.errors import JournalError

HELD_GLOB: Final = "held-*.json"
FORMAT_VERSION: Final = 1
_SIZE: Final = 256


@dataclass(frozen=True, slots=True)
class Held:
    """One ledger's count of events held only in memory, as its status file says."""

    path: Path
    pid: int
    held_in_memory: int
    #: When the count last rose from zero (None while it is zero).
    since: dt.datetime | None
    #: False: the process died; its ``held_in_memory`` events were lost.
    alive: bool


def _render(pid: int, count: int, since: dt.datetime | None) -> bytes:
    stamp = None if since is None else since.strftime("%Y-%m-%dT%H:%M:%SZ")
    record = {"ledger_held": FORMAT_VERSION, "pid": pid, "held_in_memory": count, "since": stamp}
    line = json.dumps(record, separators=(",", ":")).encode()
    return line.ljust(_SIZE - 1) + b"\n"


class StatusFile:
    """This process's status file: created, locked and mapped by :meth:`create`."""

    def __init__(self, path: Path, fd: int, mapping: mmap.mmap) -> None:
        self.path = path
        self._fd = fd
        self._mapping: mmap.mmap | None = mapping
        self._pid = os.getpid()

    @classmethod
    def create(cls, directory: Path) -> StatusFile:
        """Create, lock, preallocate and publish a status file saying 0 in ``directory``.

        Published under its public name only once locked, so no reader or
        sweeper ever takes it for a dead process's file.
        """
        stem = f"held-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        tmp = directory / f".{stem}.tmp"
        fd = -1
        try:
            directory.mkdir(parents=True, exist_ok=True)
            fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.posix_fallocate(fd, 0, _SIZE)
            mapping = mmap.mmap(fd, _SIZE)
            mapping[:] = _render(os.getpid(), 0, None)
            path = directory / f"{stem}.json"
            tmp.rename(path)
        except OSError as exc:
            if fd >= 0:
                os.close(fd)
                tmp.unlink(missing_ok=True)
            raise JournalError(f"cannot create a status file in {directory}: {exc}") from exc
        return cls(path, fd, mapping)

    def update(self, count: int, since: dt.datetime | None) -> None:
        """Say ``count`` events are held only in memory, since ``since`` (see :class:`Held`)."""
        if self._mapping is not None:
            self._mapping[:] = _render(self._pid, count, since)

    def forget(self) -> None:
        """Close our copy in a forked child: the parent keeps its file and its lock."""
        if self._mapping is not None:
            self._mapping.close()
            self._mapping = None
        os.close(self._fd)

    def close(self) -> None:
        """Delete the file, then unlock it (never a moment when it looks dead)."""
        if self._mapping is None:
            return
        self._mapping.close()
        self._mapping = None
        self.path.unlink(missing_ok=True)
        os.close(self._fd)


def _parse(path: Path, data: bytes) -> tuple[int, int, dt.datetime | None]:
    record = json.loads(data)
    if not isinstance(record, dict) or record.get("ledger_held") != FORMAT_VERSION:
        raise ValueError(f"{path}: not a ledger status file")
    since = record.get("since")
    stamp = None if since is None else dt.datetime.fromisoformat(since.replace("Z", "+00:00"))
    return int(record["pid"]), int(record["held_in_memory"]), stamp


def _read_stable(path: Path) -> bytes:
    previous = None
    for _ in range(10):
        data = path.read_bytes()
        if data == previous:
            return data
        previous = data
    return data


def _alive(path: Path) -> bool | None:
    """Whether the file's owner still holds it; None if the file is gone."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops a lock we took: nothing is changed
    return False


def read_all(directory: Path) -> Iterator[Held]:
    """Every status file in ``directory``, live or left by a dead process. Reads only."""
    if not directory.is_dir():
        return
    for path in sorted(directory.glob(HELD_GLOB)):
        alive = _alive(path)
        if alive is None:
            continue
        try:
            pid, count, since = _parse(path, _read_stable(path))
        except FileNotFoundError:
            continue
        except (OSError, ValueError, KeyError, TypeError):
            continue  # not ours, or torn beyond repair: nothing it says can be trusted
        yield Held(path=path, pid=pid, held_in_memory=count, since=since, alive=alive)


def sweep(directory: Path) -> list[Held]:
    """Delete the status files of dead processes; returns those that recorded a loss."""
    lost = []
    for found in read_all(directory):
        if found.alive:
            continue
        try:
            fd = os.open(found.path, os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # another sweeper has it
            os.close(fd)
            continue
        if found.path.exists():  # else another sweeper deleted (and reported) it meanwhile
            found.path.unlink()
            if found.held_in_memory:
                lost.append(found)
        os.close(fd)
    return lost
