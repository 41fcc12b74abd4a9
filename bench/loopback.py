"""An LLM server that answers at once, for the benchmarks.

It runs in a child process so it never competes with the code being measured
for the GIL. Each reply is chosen by the request path's first segment
(``http://127.0.0.1:PORT/<name>/v1/chat/completions`` answers ``replies[name]``),
so one server plays every provider a benchmark needs. Streams go out as
HTTP/1.1 chunks of 512 bytes in one write.
"""

from __future__ import annotations

import multiprocessing
import os
import socket
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NamedTuple

PAYLOADS = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "payloads"


class Reply(NamedTuple):
    body: bytes
    status: int = 200
    sse: bool = False


def fixture(name: str, status: int = 200) -> Reply:
    """A real payload from tests/fixtures/payloads (``.sse`` files are streamed)."""
    return Reply((PAYLOADS / name).read_bytes(), status, name.endswith(".sse"))


def _chunked(body: bytes) -> bytes:
    pieces = (body[i : i + 512] for i in range(0, len(body), 512))
    return b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in pieces) + b"0\r\n\r\n"


class _QuietHTTPServer(ThreadingHTTPServer):
    """Prints no traceback when a client hangs up (a benchmark closing its pool)."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


def _serve(port_queue: Any, replies: Mapping[str, Reply]) -> None:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            # Instant means no Nagle/delayed-ACK stall between header and body writes.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", 0)))
            reply = replies[self.path.split("/")[1]]
            self.send_response(reply.status)
            if reply.sse:
                self.send_header("content-type", "text/event-stream")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                self.wfile.write(_chunked(reply.body))
                return
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(reply.body)))
            self.end_headers()
            self.wfile.write(reply.body)

    httpd = _QuietHTTPServer(("127.0.0.1", 0), Handler)
    port_queue.put(httpd.server_address[1])
    httpd.serve_forever()


@contextmanager
def instant_server(replies: Mapping[str, Reply], cpus: set[int] | None = None) -> Iterator[str]:
    """Serve ``replies`` from a child process; yields the base URL.

    ``cpus``: pin the server to these CPUs (``os.sched_setaffinity``), e.g. the one
    the benchmark does not run on, so client and server never queue for one core."""
    queue: Any = multiprocessing.Queue()
    server = multiprocessing.Process(target=_serve, args=(queue, dict(replies)), daemon=True)
    server.start()
    if cpus is not None and server.pid is not None:
        os.sched_setaffinity(server.pid, cpus)
    try:
        yield f"http://127.0.0.1:{queue.get(timeout=10)}"
    finally:
        server.terminate()
        server.join(5)
