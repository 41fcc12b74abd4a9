"""Reading the next item of an iterator on a thread while the caller works on the current one.

A bulk sync reads Arrow chunks from the ledger (ADBC) and inserts them into
DuckDB; both release the GIL, so reading chunk n+1 while DuckDB inserts chunk
n overlaps the two instead of adding them. :func:`prefetched` runs the source
iterator on one background thread, at most ``depth`` items ahead; the source
is only ever touched by that thread, one item at a time, and the thread has
ended when the ``with`` block is left (so the caller may use the source's
connection again). An exception in the source is raised in the caller.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Final, Generic, TypeVar

T = TypeVar("T")

#: How long the reader waits for room in the queue before looking at the stop flag.
_POLL_S: Final = 0.1


@dataclass(frozen=True, slots=True)
class _Failed:
    error: BaseException


class _End:
    """The source is exhausted."""


_END: Final = _End()


class _Reader(Generic[T]):
    def __init__(self, source: Iterator[T], depth: int) -> None:
        self._source = source
        self._queue: queue.Queue[T | _Failed | _End] = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ledger-prefetch", daemon=True)

    def _put(self, item: T | _Failed | _End) -> bool:
        """Queue ``item`` unless told to stop first; whether it was queued."""
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=_POLL_S)
            except queue.Full:
                continue
            return True
        return False

    def _run(self) -> None:
        try:
            for item in self._source:
                if not self._put(item):
                    return
        except BaseException as exc:  # handed to the caller, raised there
            self._put(_Failed(exc))
            return
        self._put(_END)

    def items(self) -> Iterator[T]:
        while True:
            item = self._queue.get()
            if isinstance(item, _End):
                return
            if isinstance(item, _Failed):
                raise item.error
            yield item

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


@contextmanager
def prefetched(source: Iterator[T], depth: int = 1) -> Iterator[Iterator[T]]:
    """``source``'s items, read on a thread up to ``depth`` ahead of the caller."""
    reader = _Reader(source, depth)
    reader.start()
    try:
        yield reader.items()
    finally:
        reader.stop()
