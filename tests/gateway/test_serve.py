"""``ledger gateway`` as a real process: SIGTERM drains a stream in flight, then the
ledger is flushed, so the drained call's row is in the database when the process exits."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
from sqlalchemy import create_engine, text

from ledger.gateway import hash_key
from ledger.simulator.server import free_port
from tests.gateway.conftest import KEY
from tests.llm_loopback import LoopbackLLM, Reply


def _config(path: Path, upstream: str) -> Path:
    path.write_text(
        f"""
[gateway]
passthrough = ["openai"]

[gateway.providers.openai]
base_url = "{upstream}/v1"
api_key_env = "GW_OPENAI_KEY"

[gateway.keys.search]
sha256 = "{hash_key(KEY)}"
tags = {{ team = "search" }}
"""
    )
    return path


def _wait_up(url: str, process: subprocess.Popen[str]) -> None:
    for _ in range(600):
        if process.poll() is not None:
            raise AssertionError(f"the gateway exited: {process.communicate()[1]}")
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        threading.Event().wait(0.05)
    raise AssertionError("the gateway did not come up within 30 s")


def test_sigterm_drains_a_stream_in_flight_and_flushes_its_row(
    tmp_path: Path, sqlite_url: str, loopback: LoopbackLLM
) -> None:
    # 24 events in 64-byte chunks, 20 ms apart: a couple of seconds of stream.
    loopback.queue(Reply.payload("openai_stream_include_usage_real.sse", delay_s=0.02))
    port = free_port()
    env = {**os.environ, "LEDGER_DATABASE_URL": sqlite_url, "GW_OPENAI_KEY": "sk-provider-1"}
    ledger_cli = Path(sys.executable).with_name("ledger")
    process = subprocess.Popen(
        [
            str(ledger_cli),
            "gateway",
            "--config",
            str(_config(tmp_path / "ledger.toml", loopback.url)),
            "--port",
            str(port),
        ],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_up(url, process)
        body = {
            "model": "openai/gpt-4o-mini",
            "messages": [{"role": "user", "content": "hi"}],
            "stream": True,
        }
        headers = {"authorization": f"Bearer {KEY}"}
        with httpx.stream(
            "POST", url + "/v1/chat/completions", json=body, headers=headers, timeout=60
        ) as response:
            chunks = response.iter_raw()
            received = [next(chunks)]
            process.send_signal(signal.SIGTERM)
            received.extend(chunks)
        assert b"".join(received).rstrip().endswith(b"data: [DONE]")
        # uvicorn re-raises the signal once shut down cleanly: the conventional exit status.
        _, stderr = process.communicate(timeout=60)
        assert process.returncode in (0, -signal.SIGTERM)
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate()
    assert KEY not in stderr and "sk-provider-1" not in stderr
    assert '"key": "search"' in stderr and '"status": 200' in stderr  # the access log line
    engine = create_engine(sqlite_url)
    with engine.connect() as conn:
        row = conn.execute(
            text("SELECT status, streamed, output_tokens, tags FROM token_usage")
        ).one()
    engine.dispose()
    assert row.status == "ok" and row.streamed and row.output_tokens > 0
    assert '"team": "search"' in row.tags or '"team":"search"' in row.tags
