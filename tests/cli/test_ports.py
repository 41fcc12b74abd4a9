"""Every ``ledger`` server binds before it prints: a taken port is one line and exit 2,
``--port 0`` prints the port the system chose, and that address answers."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.cli.shell import ledger

GATEWAY_TOML = '[gateway]\nauth = "none"\nmodels = { m = ["openai:gpt-4o-mini"] }\n'


@pytest.fixture
def taken() -> Iterator[int]:
    """A port some other program listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def _server_args(name: str, tmp_path: Path) -> list[str]:
    if name == "gateway":
        config = tmp_path / "ledger.toml"
        config.write_text(GATEWAY_TOML)
        return ["gateway", "--config", str(config), "--no-access-log"]
    if name == "dashboard":
        return ["dashboard", "--headless", "--no-sync"]
    if name == "demo":
        return ["demo", "--calls", "1"]
    return [name]


SERVERS = ["simulate", "gateway", "otlp", "dashboard", "demo"]


@pytest.mark.parametrize("name", SERVERS)
def test_a_taken_port_is_one_line_and_exit_2_before_any_banner(
    name: str,
    taken: int,
    sqlite_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if name == "otlp":
        pytest.importorskip("opentelemetry.proto")
    monkeypatch.setenv("LEDGER_DATABASE_URL", sqlite_url)
    monkeypatch.delenv("CI", raising=False)  # the demo opens no dashboard under CI
    args = _server_args(name, tmp_path)
    before = sorted(tmp_path.iterdir())
    done = ledger(capsys, *args, "--port", str(taken))
    assert done.code == 2, done
    assert done.err.splitlines() == [f"ledger: 127.0.0.1:{taken} is already in use: choose "
                                     "another --port, or --port 0 for a free one"]  # fmt: skip
    assert " on http" not in done.out and "Simulating" not in done.out  # nothing announced or run
    assert sorted(tmp_path.iterdir()) == before


def _first_line_with(stream: object, pattern: str) -> re.Match[str]:
    for line in iter(stream.readline, ""):  # type: ignore[attr-defined]
        if found := re.search(pattern, line):
            return found
    raise AssertionError(f"the server ended before printing {pattern!r}")


@pytest.mark.parametrize(
    ("name", "pattern", "probe"),
    [
        ("simulate", r"simulator on (http://127\.0\.0\.1:(\d+)) ", "/api/v1/generation?id=x"),
        ("gateway", r"ledger gateway on (http://127\.0\.0\.1:(\d+))/v1", "/healthz"),
        ("otlp", r"receiver on (http://127\.0\.0\.1:(\d+))/v1/traces", "/v1/traces"),
    ],
)
def test_port_0_prints_the_port_chosen_and_it_answers(
    name: str, pattern: str, probe: str, sqlite_url: str, tmp_path: Path
) -> None:
    if name == "otlp":
        pytest.importorskip("opentelemetry.proto")
    env = {**os.environ, "LEDGER_DATABASE_URL": sqlite_url, "OPENAI_API_KEY": "sim"}
    command = [sys.executable, "-c", "from ledger.cli import main; main()"]
    with subprocess.Popen(
        [*command, *_server_args(name, tmp_path), "--port", "0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as child:
        try:
            found = _first_line_with(child.stdout, pattern)
            assert int(found.group(2)) != 0
            answer = httpx.get(found.group(1) + probe, headers={"authorization": "Bearer x"})
            assert answer.status_code in (200, 404, 405)  # the server itself, not a refusal
        finally:
            child.terminate()
            child.wait(timeout=30)


def test_the_dashboard_and_the_demo_turn_port_0_into_a_free_port() -> None:
    from ledger.cli.dashboard import free_dashboard_port

    port = free_dashboard_port(0)
    assert port != 0
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))  # free: Streamlit will get it
