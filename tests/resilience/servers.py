"""Loopback helpers: a real uvicorn server in a thread, and a TCP relay to Redis
that can be cut to make Redis "go away" mid-run, or slowed to make it far away."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from typing import Any

import uvicorn


class LoopbackServer:
    """``app`` served by uvicorn on 127.0.0.1 (a free port) in a background thread."""

    def __init__(self, app: Any) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        config = uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,
            # uvicorn trusts X-Forwarded-For from 127.0.0.1 by default and rewrites the
            # peer; the middleware must see the real peer to decide trust itself.
            proxy_headers=False,
            lifespan="off",
            ws="none",
            http="h11",
            backlog=1024,
            timeout_graceful_shutdown=2,
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]})

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> LoopbackServer:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()


class TcpRelay:
    """Forwards 127.0.0.1:<port> to ``target``. :meth:`cut` closes the port and every
    relayed connection (clients then see resets and refused connects);
    :meth:`restore` listens on the same port again. ``delay_s`` holds every chunk
    that long before passing it on, each way: a round trip through the relay costs
    ``2 * delay_s`` more, like a Redis in another zone."""

    def __init__(self, target: tuple[str, int], *, delay_s: float = 0.0) -> None:
        self.target = target
        self.delay_s = delay_s
        probe = socket.create_server(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self.restore()

    def restore(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, args=(self._listener,), daemon=True).start()

    def cut(self) -> None:
        if self._listener is not None:
            # shutdown() wakes the thread blocked in accept(); close() alone would
            # leave the port listening on Linux until accept() returned.
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)
            self._listener.close()
            self._listener = None
        with self._lock:
            conns, self._conns = self._conns, []
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    def close(self) -> None:
        self.cut()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            with self._lock:
                self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                if self.delay_s:
                    time.sleep(self.delay_s)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)
