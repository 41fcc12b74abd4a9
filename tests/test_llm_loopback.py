"""The loopback LLM server itself: a client hanging up is counted, not printed."""

from __future__ import annotations

import socket
import struct
import time

import pytest

from tests.llm_loopback import LoopbackLLM


def test_a_client_resetting_mid_request_prints_no_traceback(
    server: LoopbackLLM, capfd: pytest.CaptureFixture[str]
) -> None:
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        # Headers promising a body that never comes, then a reset (SO_LINGER 0):
        # the handler's read of the body fails with ConnectionResetError.
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 1000\r\n\r\n{")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    deadline = time.monotonic() + 30
    while server.disconnects == 0:
        assert time.monotonic() < deadline, "the server never saw the reset"
        time.sleep(0.01)
    assert capfd.readouterr().err == ""
