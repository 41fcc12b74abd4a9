"""A tiny real HTTP server on 127.0.0.1 that answers LLM requests with scripted replies.

It shares no code with ledger's parsing: replies are raw bytes (the real
payload fixtures), sent whole with a Content-Length or chunk by chunk with
HTTP/1.1 chunked encoding (SSE), optionally pausing between chunks or
dropping the connection mid-stream. Every request is captured for assertions.
"""

from __future__ import annotations

import json
import socket
import struct
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from ledger.events import UsageEvent, to_row

PAYLOADS = Path(__file__).resolve().parent / "fixtures" / "payloads"


@dataclass
class Reply:
    body: bytes = b"{}"
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    chunk_size: int | None = None  # set: stream with chunked encoding
    delay_s: float = 0.0  # pause between chunks
    drop_after: int | None = None  # close the connection after this many chunks
    reset: bool = False  # answer nothing (with drop_after: break off): TCP RST, not FIN

    @classmethod
    def payload(cls, name: str, **kw: Any) -> Reply:
        body = (PAYLOADS / name).read_bytes()
        if name.endswith(".sse"):
            kw.setdefault("chunk_size", 64)
            kw.setdefault("headers", {"content-type": "text/event-stream"})
        else:
            kw.setdefault("headers", {"content-type": "application/json"})
        return cls(body=body, **kw)


@dataclass
class Captured:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    raw: bytes = b""  # the body's bytes as sent


#: A client that goes away mid-request or mid-reply (an abandoned stream, a
#: cascade dropping a slow attempt, a reset scripted with ``Reply.reset``).
DISCONNECTS = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)


class QuietHTTPServer(ThreadingHTTPServer):
    """A ThreadingHTTPServer that counts a client's disconnect instead of printing it.

    socketserver prints a traceback for every exception a handler raises,
    from the handler's thread, so a test whose client hangs up on purpose
    scatters tracebacks through the run. Any other exception is still printed.
    """

    daemon_threads = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.disconnects = 0

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], DISCONNECTS):
            self.disconnects += 1
            return
        super().handle_error(request, client_address)


class LoopbackLLM:
    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.default: Reply | None = None
        self.requests: list[Captured] = []
        self.connections = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                server.connections += 1

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                raw = self.rfile.read(length)
                server.requests.append(
                    Captured(
                        self.path,
                        {k.lower(): v for k, v in self.headers.items()},
                        json.loads(raw) if raw else {},
                        raw,
                    )
                )
                reply = server.replies.popleft() if server.replies else server.default
                assert reply is not None, "no reply scripted"
                if reply.reset and reply.drop_after is None:
                    self._reset()
                    return
                self.send_response(reply.status)
                for key, value in reply.headers.items():
                    self.send_header(key, value)
                if reply.chunk_size is None:
                    self.send_header("content-length", str(len(reply.body)))
                    self.end_headers()
                    self.wfile.write(reply.body)
                    return
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                self._stream(reply)

            # Billing endpoints (OpenRouter's /generation) are GETs: same script.
            do_GET = do_POST

            def _reset(self) -> None:
                # SO_LINGER 0: close() sends RST, the client sees "connection reset".
                linger = struct.pack("ii", 1, 0)
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
                self.close_connection = True
                self.connection.close()

            def _stream(self, reply: Reply) -> None:
                size = reply.chunk_size or 64
                for n, i in enumerate(range(0, len(reply.body), size)):
                    if reply.drop_after is not None and n >= reply.drop_after:
                        self.close_connection = True
                        self.wfile.flush()
                        if reply.reset:
                            self._reset()
                        return
                    piece = reply.body[i : i + size]
                    self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                    self.wfile.flush()
                    if reply.delay_s:
                        time.sleep(reply.delay_s)
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

        self._httpd = QuietHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.01,), daemon=True)

    @property
    def disconnects(self) -> int:
        """Requests that ended because the client hung up."""
        return self._httpd.disconnects

    def queue(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    def __enter__(self) -> LoopbackLLM:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def running() -> Iterator[LoopbackLLM]:
    with LoopbackLLM() as server:
        yield server


class Rows:
    """A thread-safe recorder that keeps events in memory, validating each as the ledger
    would: the one in-memory ledger of the tests."""

    def __init__(self) -> None:
        self.events: list[UsageEvent] = []
        self._lock = threading.Lock()

    def record(self, event: UsageEvent) -> str:
        to_row(event)
        with self._lock:
            self.events.append(event)
        return event.event_id

    @property
    def only(self) -> UsageEvent:
        assert len(self.events) == 1, self.events
        return self.events[0]

    def wait(self, count: int, timeout: float = 30.0) -> list[UsageEvent]:
        """The rows once ``count`` are there (a stream's row lands after its last byte)."""
        done = threading.Event()
        for _ in range(int(timeout / 0.02)):
            with self._lock:
                if len(self.events) >= count:
                    return list(self.events)
            done.wait(0.02)
        raise AssertionError(f"expected {count} rows, have {len(self.events)}: {self.events}")
