"""Connections that never finish a request, closed in time.

uvicorn closes an idle keep-alive connection after ``timeout_keep_alive`` (5 s),
but that timer runs only after a response and any byte stops it, and nothing times
a connection that has not sent its request head yet, so idle or trickling
(slowloris) connections were held for ever, one file descriptor each.
:class:`HeadTimeoutProtocol` gives every request head ``header_timeout_s`` from its
first byte (the first one: from the connection's start) and closes the connection
when it is not complete by then. Its own module: both the server
(:mod:`ledger.gateway.serve`) and each worker's app factory
(:func:`ledger.gateway.app.from_environment`) configure it.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from ledger.gateway.config import GatewayConfig


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
