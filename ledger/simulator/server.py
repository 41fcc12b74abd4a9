"""The simulator as a real HTTP server: an ASGI app, served by uvicorn.

:class:`SimulatorApp` is a plain ASGI callable (no framework: three routes do
not need one). Latency passes on the simulator's clock: with a
:class:`~ledger.simulator.clock.WallClock` the server really waits (scaled by
its ``latency_scale``); with a virtual clock it answers at once. A connection
reset sends the status line and part of the body, then drops the connection,
which is what a client sees when a socket dies mid-response.

How a reset is made: ASGI has no "drop the connection" message, and an
exception before the status line makes uvicorn answer 500. What uvicorn does
do is close the transport, sending nothing more, when the app returns a value
other than None; the app returns :data:`DROP` for that, and a log filter keeps
uvicorn's complaint about it out of the log.

:func:`serve_in_thread` runs it on a loopback port for tests and demos.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from typing import Any, Final

import uvicorn

from ledger.simulator.core import Simulator
from ledger.simulator.http import handle

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


#: Returned by the app to make uvicorn close the connection at once (a simulated reset).
DROP: Final = "drop-connection"


class _HideDrops(logging.Filter):
    """Drops uvicorn's error line for a connection the app closed on purpose."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        return not (str(record.msg).startswith("ASGI callable should return None") and DROP in args)


class SimulatorApp:
    """ASGI application serving a :class:`Simulator`."""

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> str | None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return None
        if scope["type"] != "http":
            return None
        body = await _read_body(receive)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        query = scope.get("query_string", b"").decode("latin-1")
        reply = handle(self.sim, scope["method"], scope["path"], headers, body, query)
        await self.sim.clock.asleep(reply.head_delay_s)
        if reply.status == 0:
            return DROP
        raw_headers = [(k.encode(), v.encode()) for k, v in reply.headers]
        await send({"type": "http.response.start", "status": reply.status, "headers": raw_headers})
        for delay, chunk in reply.chunks:
            await self.sim.clock.asleep(delay)
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        if reply.reset:
            return DROP
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return None

    @staticmethod
    async def _lifespan(receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return


async def _read_body(receive: Receive) -> bytes:
    parts: list[bytes] = []
    while True:
        message = await receive()
        parts.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(parts)


def make_server(sim: Simulator, host: str = "127.0.0.1", port: int = 8000) -> uvicorn.Server:
    """A uvicorn server for ``sim`` (call ``.run()``; it handles SIGINT/SIGTERM)."""
    error_log = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _HideDrops) for f in error_log.filters):
        error_log.addFilter(_HideDrops())
    config = uvicorn.Config(
        SimulatorApp(sim),
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        lifespan="on",
    )
    return uvicorn.Server(config)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def serve_in_thread(sim: Simulator, host: str = "127.0.0.1") -> Iterator[str]:
    """Serve ``sim`` on a free loopback port in a thread; yields the base URL."""
    server = make_server(sim, host, free_port(host))
    thread = threading.Thread(target=lambda: asyncio.run(server.serve()), daemon=True)
    thread.start()
    try:
        for _ in range(500):
            if server.started:
                break
            threading.Event().wait(0.01)
        else:
            raise RuntimeError("the simulator server did not start within 5 s")
        yield f"http://{host}:{server.config.port}"
    finally:
        server.should_exit = True
        thread.join(timeout=5)
