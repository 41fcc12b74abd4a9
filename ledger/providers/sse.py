"""An incremental Server-Sent Events decoder (WHATWG "event stream" parsing), no I/O.

Fed raw bytes in whatever pieces the network delivers, it yields complete
events as soon as their terminating blank line arrives. Comment lines (such as
OpenRouter's ``: OPENROUTER PROCESSING`` keep-alives) are counted and dropped.
:meth:`SSEDecoder.close` dispatches an event still pending at end of stream,
because real streams (Anthropic's SDK fixture) end without the final blank line.

It runs once per chunk of every metered stream, so it is written for speed: the
complete lines of a chunk are decoded in one ``bytes.decode`` (the same text as
decoding line by line: ``\\n`` is ASCII, so it never falls inside a UTF-8
sequence and replacement characters land in the same places), the common
``data:`` line takes a fast path, and the stream parsers read ``(event, data)``
pairs from :meth:`SSEDecoder.feed_pairs` instead of building :class:`SSEEvent`
objects they would take apart again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

#: A line longer than this is garbage, not an event; we drop it rather than buffer it forever.
MAX_LINE_BYTES: Final = 8 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class SSEEvent:
    event: str
    data: str


class SSEDecoder:
    def __init__(self) -> None:
        # The unfinished last line, as the pieces it arrived in: joined only once its
        # newline arrives, so a long line fed in small chunks costs linear time.
        self._pieces: list[bytes] = []
        self._held = 0
        self._event = ""
        self._data: list[str] = []
        self.comments = 0
        self.dropped_lines = 0
        self._pending_cr = False

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Decode ``chunk``; return the events it completed."""
        return [SSEEvent(name, data) for name, data in self.feed_pairs(chunk)]

    def close(self) -> list[SSEEvent]:
        """End of stream: dispatch whatever is pending."""
        return [SSEEvent(name, data) for name, data in self.close_pairs()]

    def feed_pairs(self, chunk: bytes) -> list[tuple[str, str]]:
        """:meth:`feed`, as ``(event, data)`` pairs."""
        if not chunk:
            return []
        # Line endings become "\n" as chunks arrive, so the held-back buffer never has a
        # "\r" and only the new chunk needs looking at (most streams have none at all).
        if self._pending_cr:
            if chunk[:1] == b"\n":
                # The "\r\n" of one line ending was split across two chunks.
                chunk = chunk[1:]
            self._pending_cr = False
        if b"\r" in chunk:
            self._pending_cr = chunk[-1:] == b"\r"
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        cut = chunk.rfind(b"\n")
        if cut < 0:
            self._hold(chunk)
            return []
        if self._pieces:
            self._pieces.append(chunk[:cut])
            data = b"".join(self._pieces)
            self._pieces, self._held = [], 0
        else:
            data = chunk[:cut]
        self._hold(chunk[cut + 1 :])
        events: list[tuple[str, str]] = []
        self._lines(data.decode("utf-8", errors="replace").split("\n"), events)
        return events

    def close_pairs(self) -> list[tuple[str, str]]:
        """:meth:`close`, as ``(event, data)`` pairs."""
        events: list[tuple[str, str]] = []
        rest = b"".join(self._pieces)
        lines = [rest.decode("utf-8", errors="replace")] if rest else []
        self._pieces, self._held = [], 0
        self._lines([*lines, ""], events)  # the blank line dispatches what is pending
        return events

    def _hold(self, partial: bytes) -> None:
        """Hold a piece of the unfinished last line until its end arrives (or drop the
        line held so far if it grew absurd)."""
        if not partial:
            return
        self._pieces.append(partial)
        self._held += len(partial)
        if self._held > MAX_LINE_BYTES:
            self._pieces, self._held = [], 0
            self.dropped_lines += 1

    def _lines(self, lines: list[str], events: list[tuple[str, str]]) -> None:
        # State in locals for the loop: attribute access per line is what made this slow.
        name, data = self._event, self._data
        for line in lines:
            if not line:
                if data:
                    # One data line is the usual event: its text as is, no join.
                    text = data[0] if len(data) == 1 else "\n".join(data)
                    events.append((name or "message", text))
                    data = []
                name = ""
            elif line.startswith("data:"):
                data.append(line[6:] if line.startswith(" ", 5) else line[5:])
            elif line[0] == ":":
                self.comments += 1
            else:
                field, sep, value = line.partition(":")
                if field == "event":
                    name = value[1:] if sep and value.startswith(" ") else value
                elif field == "data":  # "data" with no colon: an empty data line
                    data.append(value)
                # "id" and "retry" do not matter to a one-shot response stream.
        self._event, self._data = name, data
