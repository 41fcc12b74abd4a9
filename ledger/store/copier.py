"""The copier: a helper process that writes large PostgreSQL batches off the caller's GIL.

Why a process: the writer thread shares the GIL with ``record()``. A busy caller
holds it; each time the writer's COPY gives it up to wait on the socket, getting
it back costs up to a switch interval (5 ms), and the server sits idle meanwhile.
At load the writer hardly ran while ``record()`` did, and ``flush()`` then paid
the whole backlog (bench/bench_ledger.py, "end to end"). The copier formats and
sends the rows in a process of its own, so the server is fed while the caller
records.

What it changes and what it does not: the journal stays the only durable copy,
written by ``record()`` as before, and the writer still deletes a sealed segment
only once the copier says its rows are committed. The copier is only a faster
hand: it is given a batch's journal lines (already encoded by ``record()``, so
it costs the caller nothing more), decodes them to the same rows replay would,
and inserts them through the same :class:`~ledger.store.sink.PostgresSink`
(COPY, change-log ranges, partitions, idempotent on ``event_id``). Whatever goes
wrong there (the database refuses a row or is down, the copier died or never
started) the writer writes that batch itself, as it always did, with its
retries, backoff and dead letters: the copier never decides a row's fate.

Protocol, one batch in flight: the writer puts the batch's lines into a shared
memory file (``memfd``; one ``pwrite``, no pipe to drain), sends its size on
the copier's stdin and reads one reply line: ``ok <inserted>`` or
``error <kind>``. The first line on stdin is the database URL (never argv,
which other users can read); the copier says ``ready`` once connected. It exits
when its stdin closes: when the ledger closes or its process dies.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import struct
import subprocess
import sys
from pathlib import Path
from typing import IO, Final

import msgspec

from ledger.store.sink import Row

_SIZE: Final = struct.Struct("!Q")
# The copier runs this ledger's own code, whatever the working directory holds, and
# imports only what it needs: ``ledger``'s __init__ (the client, the cascade,
# instrumentation) would cost it seconds of CPU at start on a loaded machine. So
# ``ledger`` is registered as a bare package over its directory, and its __init__
# never runs in the copier.
_START: Final = (
    "import sys, types; p = types.ModuleType('ledger'); p.__path__ = [{package!r}]; "
    "sys.modules['ledger'] = p; import ledger.store.copier as c; c.main()"
)
READY: Final = b"ready\n"


class CopierFailed(Exception):
    """The copier did not write the batch (``kind``: ``rejected``, ``outage`` or ``gone``)."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


class Copier:
    """The writer's end of one copier process."""

    def __init__(self, url: str) -> None:
        self._memfd = os.memfd_create("ledger-batch", os.MFD_CLOEXEC)
        start = _START.format(package=str(Path(__file__).resolve().parents[1]))
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", start, str(self._memfd)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                pass_fds=(self._memfd,),
            )
        except OSError:
            os.close(self._memfd)
            raise
        self._stdin: IO[bytes] = self._proc.stdin  # type: ignore[assignment]
        self._stdout: IO[bytes] = self._proc.stdout  # type: ignore[assignment]
        self._ready = False
        try:
            self._stdin.write(url.encode() + b"\n")
            self._stdin.flush()
        except OSError:
            self.close(timeout=0)
            raise

    @property
    def pid(self) -> int:
        return self._proc.pid

    def ready(self) -> bool:
        """True once the copier is connected; never blocks (it starts in ~0.5 s)."""
        waiting = not self._ready and self._proc.poll() is None
        if waiting and select.select([self._stdout], [], [], 0)[0]:
            self._ready = self._stdout.readline() == READY
        return self._ready and self._proc.poll() is None

    def insert(self, lines: bytes) -> int:
        """Have the copier insert the journal ``lines``; how many rows were new.

        Raises :class:`CopierFailed` when it did not (the caller writes them itself).
        """
        try:
            os.pwrite(self._memfd, lines, 0)
            self._stdin.write(_SIZE.pack(len(lines)))
            self._stdin.flush()
            reply = self._stdout.readline().split()
        except OSError:
            raise CopierFailed("gone") from None
        if len(reply) == 2 and reply[0] == b"ok":
            return int(reply[1])
        raise CopierFailed(reply[1].decode() if len(reply) == 2 else "gone")

    def alive(self) -> bool:
        return self._proc.poll() is None

    def close(self, timeout: float) -> None:
        """Close its stdin (it exits after the batch in hand); kill it past ``timeout``."""
        with contextlib.suppress(OSError):
            self._stdin.close()
        try:
            self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._stdout.close()
        os.close(self._memfd)

    def forget(self) -> None:
        """In a forked child: close our copies of the pipes, leave the process to the parent."""
        for f in (self._stdin, self._stdout):
            with contextlib.suppress(OSError):
                os.close(f.fileno())
        os.close(self._memfd)


# -- the copier process ------------------------------------------------------------------


def _serve(memfd: int, stdin: IO[bytes], stdout: IO[bytes]) -> None:
    from ledger.store.engine import make_engine
    from ledger.store.sink import make_sink, rejection_errors

    engine = make_engine(stdin.readline().decode().rstrip("\n"))
    sink = make_sink(engine)
    rejected = rejection_errors(engine)
    decode = msgspec.json.Decoder(tuple).decode_lines
    with engine.connect():  # connect now: the writer uses us once we are ready
        pass
    stdout.write(READY)
    stdout.flush()
    while header := stdin.read(_SIZE.size):
        (size,) = _SIZE.unpack(header)
        rows: list[Row] = decode(os.pread(memfd, size, 0))
        try:
            reply = b"ok %d\n" % sink.insert(rows)
        except rejected:
            reply = b"error rejected\n"
        except Exception:  # the writer retries it itself and reports why
            reply = b"error outage\n"
        stdout.write(reply)
        stdout.flush()
    sink.close()
    engine.dispose()


def main() -> None:
    # A Ctrl-C in a terminal reaches the whole process group: the copier ends when its
    # ledger closes its stdin, after the batch in hand, never halfway through one.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(BrokenPipeError):  # the ledger's process died: nobody to tell
        _serve(int(sys.argv[1]), sys.stdin.buffer, sys.stdout.buffer)
