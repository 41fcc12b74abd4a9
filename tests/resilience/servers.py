"""Loopback helpers: a real uvicorn server in a thread, and a TCP relay to Redis
that can be cut to make Redis "go away" mid-run, or slowed to make it far away."""

from __future__ import annotations

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
