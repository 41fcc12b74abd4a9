"""Where a server listens: bound first, then announced.

Every ``ledger`` server (``simulate``, ``gateway``, ``otlp``) binds its socket
here before it prints an address, then hands the bound socket to uvicorn. So
the address printed is one that accepts connections (``--port 0`` prints the
port the system chose, not 0), and a port that is taken fails before anything
is printed, as one line and exit status 2 (:class:`AddressUnavailable`),
instead of a banner followed by uvicorn's error and exit 3.
"""

from __future__ import annotations

import errno
import socket

from ledger.errors import AddressUnavailable

#: How many connections wait for accept(): uvicorn's own default.
BACKLOG = 2048


def listen(host: str, port: int) -> socket.socket:
    """A TCP socket listening on ``host``:``port`` (0: a free port the system picks).

    :class:`AddressUnavailable` when it cannot be bound, the reason and the fix named.
    """
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except (socket.gaierror, UnicodeError) as exc:
        raise AddressUnavailable(
            f"--host {host!r} is not an address of this machine ({exc}): give one, e.g. 127.0.0.1",
            host=host,
            port=port,
        ) from None
    sock = socket.socket(family, kind, proto)
    try:
        # as uvicorn does: a restart may reuse a port whose old connections linger in TIME_WAIT
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(BACKLOG)
    except OSError as exc:
        sock.close()
        raise AddressUnavailable(_why(exc, host, port), host=host, port=port) from None
    sock.set_inheritable(True)  # gateway workers are processes of their own
    return sock


def _why(exc: OSError, host: str, port: int) -> str:
    where = f"{host}:{port}"
    if exc.errno == errno.EADDRINUSE:
        return f"{where} is already in use: choose another --port, or --port 0 for a free one"
    if exc.errno == errno.EACCES:
        return f"{where}: not permitted (ports below 1024 need privileges): choose another --port"
    if exc.errno == errno.EADDRNOTAVAIL:
        return f"{where}: {host} is not an address of this machine: choose another --host"
    return f"{where} cannot be bound: {exc.strerror or exc}"


def base_url(sock: socket.socket, host: str) -> str:
    """``http://host:port`` of a bound ``sock``, with the port it really got."""
    port = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"http://{shown}:{port}"
