"""A loopback TCP relay that can be cut and restored, to take a real server away.

Used against the real PostgreSQL (ledger outages) and Redis (fallback to the
in-process limiter, single flight through a slow link).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time


class TcpRelay:
    """Forwards 127.0.0.1:<port> to ``target``. :meth:`cut` closes the port and every
    relayed connection (clients then see resets and refused connects);
    :meth:`restore` listens on the same port again. ``delay_s`` holds every chunk
    that long before passing it on, each way: a round trip through the relay costs
    ``2 * delay_s`` more, like a Redis in another zone. :meth:`hold` keeps every chunk
    (connections are still accepted) until :meth:`release`: a server that stalls, so
    a test can put as many requests in flight as it wants before any is answered."""

    def __init__(self, target: tuple[str, int], *, delay_s: float = 0.0) -> None:
        self.target = target
        self.delay_s = delay_s
        probe = socket.create_server(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._flowing = threading.Event()
        self.accepted = 0  # connections relayed so far
        self._flowing.set()
        self.restore()

    def restore(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, args=(self._listener,), daemon=True).start()

    def hold(self) -> None:
        self._flowing.clear()

    def release(self) -> None:
        self._flowing.set()

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
        self._flowing.set()  # held pump threads see their closed sockets and end

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            with self._lock:
                self._conns += [client, upstream]
                self.accepted += 1
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                if self.delay_s:
                    time.sleep(self.delay_s)
                self._flowing.wait()
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)
