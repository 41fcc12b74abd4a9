"""The official Anthropic SDK for Node (``@anthropic-ai/sdk``) against the gateway in front
of the simulator, beside the ``openai`` npm package of ``test_clients.py``. The package is
installed at test time into ``.cache/gateway-node-anthropic/`` (kept between runs);
without ``node`` the test skips with the reason, except under ``CI=true`` where it must
run (``.ci/run`` sets it)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.gateway.conftest import KEY, Rows, Served

ROOT = Path(__file__).resolve().parents[2]
NODE_DIR = ROOT / ".cache" / "gateway-node-anthropic"
ANTHROPIC_NPM = "@anthropic-ai/sdk@1"
IN_CI = os.environ.get("CI", "").lower() == "true"


def _node_script() -> Path:
    if shutil.which("node") is None or shutil.which("npm") is None:
        if IN_CI:
            pytest.fail("CI=true but node/npm are not installed: the Node client test must run")
        pytest.skip("node and npm are needed for the @anthropic-ai/sdk test")
    if not (NODE_DIR / "node_modules" / "@anthropic-ai" / "sdk").is_dir():
        NODE_DIR.mkdir(parents=True, exist_ok=True)
        (NODE_DIR / "package.json").write_text('{"private": true, "type": "module"}\n')
        subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--silent", ANTHROPIC_NPM],
            cwd=NODE_DIR,
            check=True,
            capture_output=True,
            timeout=300,
        )
    script = NODE_DIR / "client.mjs"
    shutil.copyfile(Path(__file__).with_name("node_anthropic.mjs"), script)
    return script


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
