"""``ledger simulate --port P`` serves the simulator over real HTTP."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from ledger.simulator.server import free_port

LEDGER = Path(sys.executable).parent / "ledger"


def test_simulate_command_serves_all_three_wire_formats() -> None:
    port = free_port()
    proc = subprocess.Popen(
        [str(LEDGER), "simulate", "--port", str(port), "--latency-scale", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        base = f"http://127.0.0.1:{port}"
        headers = {"authorization": "Bearer k", "x-api-key": "k"}
        deadline = time.monotonic() + 15
        while True:
            try:
                httpx.get(base + "/", timeout=1)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "ledger simulate did not start"
                time.sleep(0.1)
        messages = [{"role": "user", "content": "hello"}]
        routed = httpx.post(
            base + "/api/v1/chat/completions",
            json={"model": "qwen/qwen3-coder", "messages": messages},
            headers=headers,
        )
        direct = httpx.post(
            base + "/v1/chat/completions",
            json={"model": "gpt-4o-mini", "messages": messages},
            headers=headers,
        )
        claude = httpx.post(
            base + "/v1/messages",
            json={"model": "claude-haiku-4-5-20251001", "max_tokens": 20, "messages": messages},
            headers=headers,
        )
        assert routed.json()["provider"] and routed.json()["id"].startswith("gen-")
        assert direct.json()["object"] == "chat.completion"
        assert claude.json()["type"] == "message"
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=10)
    assert b"/api/v1" in out
