"""The SSE decoder gives the events of the straightforward line-by-line WHATWG decoder,
however the bytes are split: the speed-ups (one decode per chunk, the ``data:`` fast
path, ``(event, data)`` pairs) change nothing a parser can see."""

from __future__ import annotations

import time
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.providers.sse import MAX_LINE_BYTES, SSEDecoder, SSEEvent

PAYLOADS = Path(__file__).resolve().parent.parent / "fixtures" / "payloads"


class ReferenceDecoder:
    """The decoder as first written: one line at a time, each decoded on its own."""

    def __init__(self) -> None:
        self.buffer = b""
        self.event = ""
        self.data: list[str] = []
        self.comments = 0
        self.pending_cr = False

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        if not chunk:
            return []
        if self.pending_cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]
        self.pending_cr = chunk.endswith(b"\r")
        data = self.buffer + chunk
        data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = data.split(b"\n")
        self.buffer = lines.pop()
        events: list[SSEEvent] = []
        for line in lines:
            self.line(line, events)
        return events

    def close(self) -> list[SSEEvent]:
        events: list[SSEEvent] = []
        if self.buffer:
            self.line(self.buffer, events)
        self.dispatch(events)
        return events

    def line(self, raw: bytes, events: list[SSEEvent]) -> None:
        if not raw:
            self.dispatch(events)
            return
        line = raw.decode("utf-8", errors="replace")
        if line.startswith(":"):
            self.comments += 1
            return
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self.data.append(value)
        elif name == "event":
            self.event = value

    def dispatch(self, events: list[SSEEvent]) -> None:
        if self.data:
            events.append(SSEEvent(self.event or "message", "\n".join(self.data)))
        self.event = ""
        self.data = []


FRAGMENTS = [
    b"data:",
    b"data: ",
    b"data",
    b"event:",
    b"event: error",
    b"event:x",
    b": OPENROUTER PROCESSING",
    b":",
    b"id: 7",
    b"retry: 10",
    b"\n",
    b"\n\n",
    b"\r",
    b"\r\n",
    b" ",
    b"{}",
    b'{"a": "\xc3\xa9"}',
    b"[DONE]",
    b"\xff",
    b"\xe2\x82",
    b"\xe2\x82\xac",
    b"\xf0\x9f",
]
streams = st.lists(st.sampled_from(FRAGMENTS) | st.binary(max_size=6), max_size=40).map(b"".join)


def run(decoder: SSEDecoder | ReferenceDecoder, raw: bytes, cuts: list[int]) -> list[SSEEvent]:
    events: list[SSEEvent] = []
    start = 0
    for cut in [*sorted({c % (len(raw) + 1) for c in cuts}), len(raw)]:
        events += decoder.feed(raw[start:cut])
        start = max(start, cut)
    return events + decoder.close()


@settings(max_examples=400, deadline=None)
@given(raw=streams, cuts=st.lists(st.integers(0, 10_000), max_size=12))
def test_events_match_the_line_by_line_decoder(raw: bytes, cuts: list[int]) -> None:
    ours, reference = SSEDecoder(), ReferenceDecoder()
    assert run(ours, raw, cuts) == run(reference, raw, cuts)
    assert ours.comments == reference.comments


def test_real_streams_decode_the_same_split_anywhere() -> None:
    for path in sorted(PAYLOADS.glob("*.sse")):
        raw = path.read_bytes()
        whole = run(ReferenceDecoder(), raw, [])
        for step in (1, 7, 512):
            assert run(SSEDecoder(), raw, list(range(0, len(raw), step))) == whole, path.name


def test_pairs_are_the_events_fields() -> None:
    raw = b"event: ping\ndata: 1\ndata: 2\n\n: keep-alive\ndata: 3"
    pairs = SSEDecoder()
    decoder = SSEDecoder()
    assert pairs.feed_pairs(raw) + pairs.close_pairs() == [
        (e.event, e.data) for e in decoder.feed(raw) + decoder.close()
    ]
    assert pairs.feed_pairs(b"") == [] and pairs.comments == 1


def test_a_huge_line_fed_in_small_chunks_decodes_in_linear_time() -> None:
    # 8 MB of one data line in 4 KB network reads: re-joining the whole held line on every
    # read made this quadratic (3.4 s); pieces joined once take milliseconds.
    payload = b"x" * 8_000_000
    stream = b"data: " + payload + b"\n\n"
    decoder = SSEDecoder()
    started = time.perf_counter()
    events = []
    for i in range(0, len(stream), 4096):
        events.extend(decoder.feed(stream[i : i + 4096]))
    elapsed = time.perf_counter() - started
    assert [len(e.data) for e in events] == [len(payload)]
    assert decoder.dropped_lines == 0
    assert elapsed < 1.0, f"{elapsed:.2f} s"


def test_a_line_beyond_the_limit_is_dropped_not_buffered_forever() -> None:
    decoder = SSEDecoder()
    chunk = b"y" * 65_536
    for _ in range(MAX_LINE_BYTES // len(chunk) + 1):
        assert decoder.feed(chunk) == []
    assert decoder.dropped_lines == 1
    assert decoder.feed(b"\n\ndata: ok\n\n")[-1].data == "ok"
