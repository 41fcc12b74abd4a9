"""``ledger gateway`` as a real process closes connections that never finish their request
head (idle from the start, trickling a header byte at a time, or idle after a first
request), so they cannot pile up until the process runs out of file descriptors."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ledger.gateway import hash_key
from ledger.simulator.server import free_port
from tests.gateway.conftest import KEY
from tests.gateway.test_serve import _wait_up
from tests.llm_loopback import LoopbackLLM


def _closed_by_server(sock: socket.socket) -> bool:
    """Whether the server has closed ``sock`` (EOF or reset), reading what it sent."""
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        pass
    return True


@pytest.fixture
def gateway_process(
    tmp_path: Path, sqlite_url: str, loopback: LoopbackLLM
) -> Iterator[tuple[str, int]]:
    """``ledger gateway`` with ``header_timeout_s = 1`` and ``max_connections = 300``."""
    config = tmp_path / "ledger.toml"
    config.write_text(
        f"""
[gateway]
passthrough = ["openai"]
header_timeout_s = 1
max_connections = 300

[gateway.providers.openai]
base_url = "{loopback.url}/v1"
api_key_env = "GW_OPENAI_KEY"

[gateway.keys.search]
sha256 = "{hash_key(KEY)}"
"""
    )
    port = free_port()
    env = {**os.environ, "LEDGER_DATABASE_URL": sqlite_url, "GW_OPENAI_KEY": "sk-provider-1"}
    ledger_cli = Path(sys.executable).with_name("ledger")
    process = subprocess.Popen(
        [str(ledger_cli), "gateway", "--config", str(config), "--port", str(port)],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    try:
        _wait_up(f"http://127.0.0.1:{port}", process)
        yield f"http://127.0.0.1:{port}", port
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=30)


def test_connections_that_never_finish_their_request_head_are_closed(
    gateway_process: tuple[str, int],
) -> None:
    url, port = gateway_process
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(200)]
    trickle = socket.create_connection(("127.0.0.1", port))
    kept_alive = socket.create_connection(("127.0.0.1", port))
    kept_alive.sendall(b"GET /healthz HTTP/1.1\r\nhost: g\r\n\r\n")
    assert kept_alive.recv(65536).startswith(b"HTTP/1.1 200")
    head = b"POST /v1/chat/completions HTTP/1.1\r\nhost: g\r\nx-slow: " + b"a" * 100
    started = time.monotonic()
    try:
        # A byte every 0.1 s: each one would restart an idle timer, not the head's deadline.
        sent = 0
        trickle.settimeout(0.1)
        kept_alive.sendall(b"GET /healthz HTTP/1.1\r\n")  # a second head, never finished
        while time.monotonic() - started < 2.5 and sent < len(head):
            try:
                trickle.sendall(head[sent : sent + 1])
            except OSError:
                break
            sent += 1
            time.sleep(0.1)
        assert sent < 25  # closed about 1 s in, not after 2.5 s of trickling
        # Meanwhile a real client is served.
        assert httpx.get(f"{url}/healthz", timeout=5).status_code == 200
        for sock in [*idle, kept_alive]:
            sock.settimeout(max(0.1, started + 3 - time.monotonic()))
        assert sum(_closed_by_server(sock) for sock in idle) == len(idle)
        assert _closed_by_server(kept_alive)
    finally:
        for sock in [*idle, trickle, kept_alive]:
            sock.close()


def test_beyond_max_connections_requests_get_503_at_once(
    gateway_process: tuple[str, int],
) -> None:
    url, port = gateway_process
    held = [socket.create_connection(("127.0.0.1", port)) for _ in range(300)]
    try:
        time.sleep(0.2)  # the server has accepted them
        assert httpx.get(f"{url}/healthz", timeout=5).status_code == 503
    finally:
        for sock in held:
            sock.close()
    time.sleep(0.2)
    assert httpx.get(f"{url}/healthz", timeout=5).status_code == 200
