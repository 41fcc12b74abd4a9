"""The gateway's upstream HTTP/1.1 pool against real loopback servers (asyncio sockets)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import httpx
import pytest

from ledger.gateway.http1 import Http1Pool, Timeouts

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@asynccontextmanager
async def server(handler: Handler) -> AsyncIterator[tuple[str, list[int]]]:
    """A loopback server; yields its base URL and the count of connections it accepted."""
    accepted: list[int] = []

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(1)
        try:
            await handler(reader, writer)
        finally:
            writer.close()

    srv = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", accepted
    finally:
        srv.close()


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    return head, await reader.readexactly(length)


def pool(read_s: float = 5.0) -> Http1Pool:
    return Http1Pool(Timeouts(connect=5.0, read=read_s))


async def test_a_keep_alive_connection_carries_the_next_request_and_bodies_arrive_whole() -> None:
    seen: list[bytes] = []

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for _ in range(2):
            head, body = await read_request(reader)
            seen.append(head)
            chunked = b"5\r\nhello\r\n" + f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"
            writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nX-Id: 1\r\n\r\n")
            writer.write(chunked)
            await writer.drain()

    async with server(echo) as (url, accepted):
        http = pool()
        for body in (b'{"a":1}', b'{"b":2}'):
            headers = {"authorization": "k", "Content-Length": "999"}  # the pool frames it
            response = await http.send("POST", f"{url}/v1/chat?x=1", headers, body)
            assert response.status_code == 200
            assert response.headers["x-id"] == "1"
            assert await response.aread() == b"hello" + body
            await response.aclose()
        await http.aclose()
    assert len(accepted) == 1
    assert seen[0].startswith(b"POST /v1/chat?x=1 HTTP/1.1\r\n")
    assert b"authorization: k\r\n" in seen[0] and b"content-length: 7\r\n" in seen[0]
    assert seen[0].lower().count(b"content-length") == 1


async def test_an_idle_connection_the_server_closed_is_not_reused() -> None:
    async def one_then_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        await writer.drain()

    async with server(one_then_close) as (url, accepted):
        http = pool()
        for _ in range(2):
            response = await http.send("POST", url, {}, b"{}")
            assert await response.aread() == b"ok"
            await response.aclose()
            for _ in range(1000):  # until the server's close has reached the pool
                if all(c.lost for idle in http._idle.values() for c in idle):
                    break
                await asyncio.sleep(0.01)
        await http.aclose()
    assert len(accepted) == 2


async def test_a_body_cut_short_is_a_read_error_and_silence_a_read_timeout() -> None:
    async def cut(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npartial")
        await writer.drain()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await asyncio.sleep(5)

    async with server(cut) as (url, _):
        http = pool()
        response = await http.send("POST", url, {}, b"{}")
        with pytest.raises(httpx.ReadError):
            await response.aread()
        await response.aclose()
    async with server(silent) as (url, _):
        http = pool(read_s=0.2)
        with pytest.raises(httpx.ReadTimeout):
            await http.send("POST", url, {}, b"{}")
        await http.aclose()


async def test_refused_connections_and_garbage_are_httpx_errors() -> None:
    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"this is not http\r\n\r\n")
        await writer.drain()

    async with server(garbage) as (url, _):
        http = pool()
        with pytest.raises(httpx.RemoteProtocolError):
            await http.send("POST", url, {}, b"{}")
    async with server(garbage) as (url, _):
        pass  # closed: nothing listens on its port now
    with pytest.raises(httpx.ConnectError):
        await pool().send("POST", url, {}, b"{}")
