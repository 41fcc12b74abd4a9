"""Running the gateway: uvicorn, one process or several, with a graceful shutdown.

On SIGTERM (or SIGINT) uvicorn stops accepting connections, waits for the
requests in flight, streams included, to finish (up to ``graceful_s``), then
runs the app's lifespan shutdown, which closes the upstream pool and flushes the
ledger so every row of the drained requests reaches the database.

Several workers (``workers > 1``) each load the configuration themselves
(:func:`ledger.gateway.app.from_environment`); give them ``redis_url`` so the
rate limiter counts across them.

Connections that never finish a request: uvicorn closes an idle keep-alive
connection after ``timeout_keep_alive`` (5 s), but that timer runs only after a
response and any byte stops it, and nothing times a connection that has not sent
its request head yet, so idle or trickling (slowloris) connections were held for
ever, one file descriptor each. :class:`HeadTimeoutProtocol` gives every request
head ``header_timeout_s`` from its first byte (the first one: from the connection's
start) and closes the connection when it is not complete by then. ``max_connections``
is uvicorn's ``limit_concurrency`` (beyond it, 503 at once).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any, ClassVar

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from ledger.gateway.access_log import ACCESS_LOG_ENV, configure_access_log
from ledger.gateway.app import create_app
from ledger.gateway.config import ENV_GATEWAY_FILE, GatewayConfig


class HeadTimeoutProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, with a deadline for each request head."""

    #: Set from the configuration by :func:`serve` (and each worker's app factory).
    head_timeout_s: ClassVar[float] = 10.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_timer()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._head_timer is None:  # the next request on a kept-alive connection
            self._arm_head_timer()

    def on_headers_complete(self) -> None:
        self._disarm_head_timer()
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        super().connection_lost(exc)

    def _arm_head_timer(self) -> None:
        self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_expired)

    def _disarm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_expired(self) -> None:
        self._head_timer = None
        if not self.transport.is_closing():
            self.transport.close()


def configure_server(config: GatewayConfig) -> None:
    """What the configuration says about connections, for :class:`HeadTimeoutProtocol`."""
    HeadTimeoutProtocol.head_timeout_s = config.header_timeout_s


def serve(
    config: GatewayConfig,
    *,
    host: str,
    port: int,
    workers: int = 1,
    graceful_s: float = 30.0,
    access_log: bool = True,
) -> None:
    """Serve ``config`` until SIGTERM/SIGINT; see the module docstring."""
    if access_log:
        configure_access_log()
    configure_server(config)
    common = {
        "host": host,
        "port": port,
        "log_level": "warning",
        "access_log": False,  # ours has no query strings, no bodies, no keys
        "lifespan": "on",
        "proxy_headers": False,  # the limiter's identity alone judges X-Forwarded-For
        "timeout_graceful_shutdown": graceful_s,
        "http": HeadTimeoutProtocol,
        "limit_concurrency": config.max_connections,
    }
    if workers > 1:
        # Workers are fresh processes: they find the file and the log setting here.
        if config.source is not None:
            os.environ[ENV_GATEWAY_FILE] = str(config.source)
        os.environ[ACCESS_LOG_ENV] = "1" if access_log else "0"
        uvicorn.run("ledger.gateway.app:from_environment", factory=True, workers=workers, **common)  # type: ignore[arg-type]
        return
    uvicorn.run(create_app(config), **common)  # type: ignore[arg-type]
