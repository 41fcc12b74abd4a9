"""Serving the OTLP receiver with uvicorn: ``ledger otlp`` and loopback tests."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator

import uvicorn

from ledger.events import Recorder
from ledger.otel.receiver import OTLPReceiver
from ledger.simulator.server import free_port


def make_server(ledger: Recorder, host: str, port: int) -> tuple[uvicorn.Server, OTLPReceiver]:
    """A uvicorn server recording into ``ledger`` (call ``.run()``), and its receiver."""
    receiver = OTLPReceiver(ledger.record)
    config = uvicorn.Config(
        receiver, host=host, port=port, log_level="warning", access_log=False, lifespan="on"
    )
    return uvicorn.Server(config), receiver


@contextlib.contextmanager
def serve_in_thread(
    ledger: Recorder, host: str = "127.0.0.1"
) -> Iterator[tuple[str, OTLPReceiver]]:
    """Serve a receiver on a free loopback port in a thread; yields its base URL and itself."""
    server, receiver = make_server(ledger, host, free_port(host))
    thread = threading.Thread(target=lambda: asyncio.run(server.serve()), daemon=True)
    thread.start()
    try:
        for _ in range(3000):
            if server.started:
                break
            threading.Event().wait(0.01)
        else:
            raise RuntimeError("the OTLP receiver did not start within 30 s")
        yield f"http://{host}:{server.config.port}", receiver
    finally:
        server.should_exit = True
        thread.join(timeout=10)
