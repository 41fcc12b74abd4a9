"""Clients that are not Python: curl, and the ``openai`` npm package from Node, talking to
the gateway in front of the simulator. The npm package is installed at test time into
``.cache/gateway-node/`` (kept between runs); without ``node`` the test skips with the
reason, except under ``CI=true`` where it must run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.gateway.conftest import KEY, Rows, Served
from tests.gateway.node import IN_CI, node_script

OPENAI_NPM = "openai@4"


def _curl(*args: str) -> str:
    if shutil.which("curl") is None:
        if IN_CI:
            pytest.fail("CI=true but curl is not installed")
        pytest.skip("curl is not installed")
    return subprocess.run(
        ["curl", "-sS", "--fail-with-body", *args],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout


def test_curl_plain_and_streamed(gateway: Served, rows: Rows) -> None:
    url = gateway.url + "/v1/chat/completions"
    auth = f"Authorization: Bearer {KEY}"
    body = '{"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}'
    plain = json.loads(_curl(url, "-H", auth, "-H", "content-type: application/json", "-d", body))
    streamed = _curl(
        "-N",
        url,
        "-H",
        auth,
        "-H",
        "x-session-id: sh-1",
        "-d",
        body[:-1] + ', "stream": true}',
    )
    events = [line for line in streamed.splitlines() if line.startswith("data: ")]
    assert plain["choices"][0]["message"]["content"]
    assert events[-1] == "data: [DONE]" and len(events) > 3
    first, second = rows.wait(2)
    assert first.output_tokens == plain["usage"]["completion_tokens"]
    assert second.streamed and second.session_id == "sh-1" and second.output_tokens > 0


def _node_package() -> Path:
    return node_script(
        "gateway-node", "openai", OPENAI_NPM, Path(__file__).with_name("node_client.mjs")
    )


def test_openai_npm_package_from_node(gateway: Served, rows: Rows) -> None:
    script = _node_package()
    env = {**os.environ, "GATEWAY_URL": gateway.url + "/v1", "GATEWAY_KEY": KEY}
    done = subprocess.run(
        ["node", str(script)], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["plain"] and out["text"] and out["status"] == 401
    plain_row, stream_row = rows.wait(2)
    assert plain_row.output_tokens == out["plainUsage"]["completion_tokens"]
    assert stream_row.output_tokens == out["usage"]["completion_tokens"]
    assert (stream_row.session_id, stream_row.actor_id) == ("node-1", "ts-agent")
    assert stream_row.tags == {"team": "search"}
