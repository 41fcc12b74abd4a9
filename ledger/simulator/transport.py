"""In-process adapters: httpx transports that serve requests from a :class:`Simulator`.

``httpx.Client(transport=SimulatorTransport(sim))`` talks to the simulator
without a socket. Latency passes on the simulator's clock (instantly on a
:class:`~ledger.simulator.clock.VirtualClock`); streamed bodies are yielded
chunk by chunk, each after its own delay, so a client measuring time to first
token on the same clock sees the simulated one. A connection reset raises
:class:`httpx.ReadError`, as a dropped socket does.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx

from ledger.simulator.core import Simulator
from ledger.simulator.http import handle
from ledger.simulator.wire.common import Reply


def _headers(request: httpx.Request) -> dict[str, str]:
    return {k.lower(): v for k, v in request.headers.items()}


class _SyncBody(httpx.SyncByteStream):
    def __init__(self, sim: Simulator, reply: Reply, request: httpx.Request) -> None:
        self._sim, self._reply, self._request = sim, reply, request

    def __iter__(self) -> Iterator[bytes]:
        for delay, chunk in self._reply.chunks:
            self._sim.clock.sleep(delay)
            yield chunk
        if self._reply.reset:
            raise httpx.ReadError("Connection reset by peer", request=self._request)


class _AsyncBody(httpx.AsyncByteStream):
    def __init__(self, sim: Simulator, reply: Reply, request: httpx.Request) -> None:
        self._sim, self._reply, self._request = sim, reply, request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for delay, chunk in self._reply.chunks:
            await self._sim.clock.asleep(delay)
            yield chunk
        if self._reply.reset:
            raise httpx.ReadError("Connection reset by peer", request=self._request)


class SimulatorTransport(httpx.BaseTransport):
    """A sync httpx transport backed by a simulator."""

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        reply = handle(
            self.sim,
            request.method,
            request.url.path,
            _headers(request),
            request.read(),
            request.url.query.decode("ascii"),
        )
        self.sim.clock.sleep(reply.head_delay_s)
        if reply.status == 0:
            raise httpx.ReadError("Connection reset by peer", request=request)
        return httpx.Response(
            reply.status,
            headers=reply.headers,
            stream=_SyncBody(self.sim, reply, request),
            request=request,
        )


class AsyncSimulatorTransport(httpx.AsyncBaseTransport):
    """An async httpx transport backed by a simulator."""

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        query = request.url.query.decode("ascii")
        reply = handle(self.sim, request.method, request.url.path, _headers(request), body, query)
        await self.sim.clock.asleep(reply.head_delay_s)
        if reply.status == 0:
            raise httpx.ReadError("Connection reset by peer", request=request)
        return httpx.Response(
            reply.status,
            headers=reply.headers,
            stream=_AsyncBody(self.sim, reply, request),
            request=request,
        )
