"""The official Anthropic SDK for Node (``@anthropic-ai/sdk``) against the gateway in front
of the simulator, beside the ``openai`` npm package of ``test_clients.py``. The package is
installed at test time into ``.cache/gateway-node-anthropic/`` (kept between runs);
without ``node`` the test skips with the reason, except under ``CI=true`` where it must
run (``.ci/run`` sets it)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.gateway.conftest import KEY, Rows, Served
from tests.gateway.node import node_script

ANTHROPIC_NPM = "@anthropic-ai/sdk@1"


def _node_script() -> Path:
    return node_script(
        "gateway-node-anthropic",
        "@anthropic-ai/sdk",
        ANTHROPIC_NPM,
        Path(__file__).with_name("node_anthropic.mjs"),
    )


def test_anthropic_npm_package_from_node(gateway: Served, rows: Rows) -> None:
    script = _node_script()
    env = {**os.environ, "GATEWAY_URL": gateway.url, "GATEWAY_KEY": KEY}
    done = subprocess.run(
        ["node", str(script)], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["plain"] and out["text"] and out["status"] == 401
    plain_row, stream_row = rows.wait(2)
    assert plain_row.provider == "anthropic" and plain_row.generation_id == out["plainId"]
    assert plain_row.output_tokens == out["plainUsage"]["output_tokens"]
    assert stream_row.streamed and stream_row.output_tokens == out["usage"]["output_tokens"] > 0
    assert (stream_row.session_id, stream_row.actor_id) == ("node-2", "ts-claude")
    assert stream_row.tags == {"team": "search"}
