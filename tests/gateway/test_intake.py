"""Request intake: bodies refused before they are read when they are too large or when
the bodies in flight fill the budget, and a small call served beside large bodies.
Driven over real loopback sockets, some requests written by hand to hold a body half
sent."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

import httpx
import pytest

from ledger.gateway import GatewayConfigurationError, parse_config
from ledger.simulator import Simulator
from tests.gateway.conftest import KEY, Served, sim_table
from tests.llm_loopback import Rows

MB = 1024 * 1024
SMALL = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}


def _head(length: int | None, *, expect: bool = False) -> bytes:
    lines = [
        "POST /v1/chat/completions HTTP/1.1",
        "host: gateway",
        f"authorization: Bearer {KEY}",
        "content-type: application/json",
        "transfer-encoding: chunked" if length is None else f"content-length: {length}",
    ]
    if expect:
        lines.append("expect: 100-continue")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


@contextmanager
def connection(served: Served) -> Iterator[socket.socket]:
    parts = urlsplit(served.url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=5)
    try:
        yield sock
    finally:
        sock.close()


def answer_head(sock: socket.socket) -> tuple[int, dict[str, str]]:
    """The status and headers of the response on ``sock`` (5 s at most)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise AssertionError(f"closed before a response head: {data!r}")
        data += chunk
    status_line, *lines = data.split(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines)
    return int(status_line.split()[1]), headers


def post_small(served: Served) -> httpx.Response:
    return httpx.post(
        f"{served.url}/v1/chat/completions",
        json=SMALL,
        headers={"authorization": f"Bearer {KEY}"},
        timeout=5,
    )


def released(served: Served) -> bool:
    """Whether every body's share of the budget is back (a call ends just after its
    answer is sent, a disconnect is seen just after the socket closes)."""
    for _ in range(500):
        if served.app.bodies.in_flight == 0:
            return True
        time.sleep(0.01)
    return False


@pytest.fixture
def gateway_with(
    sim: tuple[Simulator, str], serve_gateway: Callable[..., Served]
) -> Callable[..., Served]:
    return lambda **settings: serve_gateway(sim_table(sim[1], **settings))


def test_a_body_declared_over_the_cap_is_413_before_it_is_sent(gateway: Served) -> None:
    with connection(gateway) as sock:
        sock.sendall(_head(40 * MB))  # and not one byte of the body
        status, _ = answer_head(sock)
    assert status == 413


def test_large_bodies_beyond_the_budget_get_503_retry_after_while_a_small_call_is_served(
    gateway: Served, rows: Rows
) -> None:
    # The default budget (48 MiB) holds one 31 MiB body, held half sent here.
    with connection(gateway) as first:
        first.sendall(_head(31 * MB) + b'{"model": "gpt-4o-mini", "messages": [')
        assert post_small(gateway).status_code == 200  # the first one was admitted first
        with connection(gateway) as second:
            second.sendall(_head(31 * MB))
            status, headers = answer_head(second)
        assert status == 503
        assert float(headers["retry-after"]) > 0
        assert post_small(gateway).status_code == 200
    assert len(rows.wait(2)) == 2


def test_an_expect_continue_client_is_refused_before_it_sends_the_body(gateway: Served) -> None:
    with connection(gateway) as first:
        first.sendall(_head(31 * MB) + b"{")
        with connection(gateway) as second:
            second.sendall(_head(31 * MB, expect=True))
            status, _ = answer_head(second)  # a 503, not "100 Continue"
        assert status == 503


def test_the_budget_is_given_back_when_bodies_are_answered_or_abandoned(
    gateway_with: Callable[..., Served], rows: Rows
) -> None:
    served = gateway_with(max_body_bytes=MB, body_budget_bytes=MB + 1000)
    big = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "x" * (MB - 200)}]}
    headers = {"authorization": f"Bearer {KEY}"}
    with connection(served) as held:
        held.sendall(_head(MB - 100) + b"{")
        assert post_small(served).status_code == 200  # ~100 bytes fit beside it
        refused = httpx.post(
            f"{served.url}/v1/chat/completions", json=big, headers=headers, timeout=5
        )
        assert refused.status_code == 503
    # The held request's client went away: its share is back, for a chunked body too.
    assert released(served)
    for _ in range(3):
        chunks = (json.dumps(big).encode()[i : i + 65536] for i in range(0, MB, 65536))
        answer = httpx.post(
            f"{served.url}/v1/chat/completions", content=chunks, headers=headers, timeout=10
        )
        assert answer.status_code == 200
    assert released(served)


def test_a_body_that_stops_arriving_is_408_and_gives_its_share_back(
    gateway_with: Callable[..., Served],
) -> None:
    served = gateway_with(body_idle_timeout_s=0.5)
    with connection(served) as stalled:
        stalled.sendall(_head(31 * MB) + b'{"model": ')
        started = time.monotonic()
        status, headers = answer_head(stalled)
        assert status == 408 and headers["connection"] == "close"
        assert time.monotonic() - started < 3
    assert released(served)
    assert post_small(served).status_code == 200


def test_a_chunked_body_over_the_cap_is_413(gateway_with: Callable[..., Served]) -> None:
    served = gateway_with(max_body_bytes=MB, body_budget_bytes=4 * MB)
    chunks = (b"x" * 65536 for _ in range(20))
    answer = httpx.post(
        f"{served.url}/v1/chat/completions",
        content=chunks,
        headers={"authorization": f"Bearer {KEY}"},
        timeout=10,
    )
    assert answer.status_code == 413
    assert "1048576" in answer.json()["error"]["message"]


def test_a_budget_smaller_than_the_body_cap_is_a_configuration_error() -> None:
    with pytest.raises(GatewayConfigurationError) as caught:
        parse_config(sim_table("http://127.0.0.1:9", max_body_bytes=2 * MB, body_budget_bytes=MB))
    assert caught.value.key == "tool.ledger.gateway.body_budget_bytes"
