"""Running the gateway: uvicorn, one process or several, with a graceful shutdown.

On SIGTERM (or SIGINT) uvicorn stops accepting connections, waits for the
requests in flight, streams included, to finish (up to ``graceful_s``), then
runs the app's lifespan shutdown, which closes the upstream pool and flushes the
ledger so every row of the drained requests reaches the database.

Several workers (``workers > 1``) each load the configuration themselves
(:func:`ledger.gateway.app.from_environment`); give them ``redis_url`` so the
rate limiter counts across them.

Connections that never finish their request head are closed in time
(:mod:`ledger.gateway.connections`); ``max_connections`` is uvicorn's
``limit_concurrency`` (beyond it, 503 at once).
"""

from __future__ import annotations

import contextlib
import os
import socket

import uvicorn
from uvicorn.supervisors import Multiprocess

from ledger.gateway.access_log import ACCESS_LOG_ENV, configure_access_log
from ledger.gateway.app import create_app
from ledger.gateway.config import ENV_GATEWAY_FILE, GatewayConfig
from ledger.gateway.connections import HeadTimeoutProtocol, configure_server
from ledger.listen import listen

#: uvicorn.run's exit status when the app's startup fails (uvicorn.main.STARTUP_FAILURE)
STARTUP_FAILURE = 3


def serve(
    config: GatewayConfig,
    *,
    host: str,
    port: int,
    workers: int = 1,
    graceful_s: float = 30.0,
    access_log: bool = True,
    listener: socket.socket | None = None,
) -> None:
    """Serve ``config`` until SIGTERM/SIGINT; see the module docstring. ``listener``: a
    socket already bound to ``host``:``port`` (``ledger gateway`` binds before it prints
    the address); without one, it is bound here."""
    bound = listen(host, port) if listener is None else listener
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
        target = "ledger.gateway.app:from_environment"
        setup = uvicorn.Config(target, factory=True, workers=workers, **common)  # type: ignore[arg-type]
        # uvicorn.run's own branch for workers, given our socket instead of binding one
        Multiprocess(setup, sockets=[bound]).run()
        return
    server = uvicorn.Server(uvicorn.Config(create_app(config), **common))  # type: ignore[arg-type]
    with contextlib.suppress(KeyboardInterrupt):  # as uvicorn.run: Ctrl-C is the way to stop
        server.run(sockets=[bound])
    if not server.started:  # the app's startup failed (uvicorn logged why): uvicorn.run's 3
        raise SystemExit(STARTUP_FAILURE)
