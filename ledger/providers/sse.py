"""An incremental Server-Sent Events decoder (WHATWG "event stream" parsing), no I/O.

Fed raw bytes in whatever pieces the network delivers, it yields complete
events as soon as their terminating blank line arrives. Comment lines (such as
OpenRouter's ``: OPENROUTER PROCESSING`` keep-alives) are counted and dropped.
:meth:`SSEDecoder.close` dispatches an event still pending at end of stream,
because real streams (Anthropic's SDK fixture) end without the final blank line.
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
        self._buffer = b""
        self._event = ""
        self._data: list[str] = []
        self.comments = 0
        self.dropped_lines = 0
        self._pending_cr = False

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Decode ``chunk``; return the events it completed."""
        if not chunk:
            return []
        if self._pending_cr and chunk.startswith(b"\n"):
            # The "\r\n" of one line ending was split across two chunks.
            chunk = chunk[1:]
        self._pending_cr = chunk.endswith(b"\r")
        data = self._buffer + chunk
        if b"\r" in data:
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = data.split(b"\n")
        self._buffer = lines.pop()
        if len(self._buffer) > MAX_LINE_BYTES:
            self._buffer = b""
            self.dropped_lines += 1
        events: list[SSEEvent] = []
        for line in lines:
            self._line(line, events)
        return events

    def close(self) -> list[SSEEvent]:
        """End of stream: dispatch whatever is pending."""
        events: list[SSEEvent] = []
        if self._buffer:
            self._line(self._buffer, events)
            self._buffer = b""
        self._dispatch(events)
        return events

    def _line(self, raw: bytes, events: list[SSEEvent]) -> None:
        if not raw:
            self._dispatch(events)
            return
        line = raw.decode("utf-8", errors="replace")
        if line.startswith(":"):
            self.comments += 1
            return
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        # "id" and "retry" do not matter to a one-shot response stream.

    def _dispatch(self, events: list[SSEEvent]) -> None:
        if self._data:
            events.append(SSEEvent(self._event or "message", "\n".join(self._data)))
        self._event = ""
        self._data = []
