"""Reading ahead on a thread: every item in order, the source's error in the caller, and
the thread ended when the block is left early."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from ledger.analytics.copy.prefetch import prefetched


def test_every_item_arrives_in_order() -> None:
    with prefetched(iter(range(1_000)), depth=2) as items:
        assert list(items) == list(range(1_000))


def test_an_error_in_the_source_is_raised_in_the_caller_after_the_items_before_it() -> None:
    def source() -> Iterator[int]:
        yield 1
        yield 2
        raise ValueError("the ledger went away")

    seen: list[int] = []
    with pytest.raises(ValueError, match="went away"), prefetched(source()) as items:
        seen.extend(items)
    assert seen == [1, 2]


def test_leaving_early_stops_the_reader_before_the_source_is_used_again() -> None:
    reading: list[str] = []

    def source() -> Iterator[int]:
        for n in range(1_000_000):
            reading.append(threading.current_thread().name)
            yield n

    with prefetched(source()) as items:
        assert next(items) == 0
    read = len(reading)
    assert not any(t.name == "ledger-prefetch" for t in threading.enumerate())
    assert read < 10  # at most the queue's depth and one in hand were read ahead
    assert len(reading) == read  # nothing read after the block ended
