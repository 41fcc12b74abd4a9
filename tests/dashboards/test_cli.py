"""``ledger dashboard``: finds its app, refuses a ledger it cannot show, builds the command."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from ledger.cli.dashboard import app_path, dashboard_env, served_at, streamlit_command
from ledger.store.engine import ENV_URL
from tests.dashboards.conftest import APP, REPO


def run_cli(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from ledger.cli import main; main()", *args],
        env={**dashboard_env(url)},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_app_is_found_in_the_repository() -> None:
    assert app_path() == APP


def test_command_runs_streamlit_on_the_requested_address() -> None:
    command = streamlit_command(APP, port=8765, host="127.0.0.1", headless=True, files=[])
    assert command[:5] == [sys.executable, "-m", "streamlit", "run", str(APP)]
    pairs = dict(zip(command[5::2], command[6::2], strict=True))
    assert pairs["--server.port"] == "8765"
    assert pairs["--server.address"] == "127.0.0.1"
    assert pairs["--server.headless"] == "true"


def test_child_gets_the_resolved_ledger_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_URL, "sqlite:///elsewhere.db")
    assert dashboard_env("sqlite:////abs/ledger.db")[ENV_URL] == "sqlite:////abs/ledger.db"


def test_missing_ledger_names_the_commands_that_create_it(tmp_path: Path) -> None:
    path = tmp_path / "none.db"
    result = run_cli("dashboard", "--headless", url=f"sqlite:///{path}")
    assert result.returncode != 0
    assert "ledger db upgrade" in result.stderr and "ledger demo" in result.stderr
    assert not path.exists()


def test_unmigrated_ledger_says_ledger_db_upgrade(tmp_path: Path) -> None:
    path = tmp_path / "bare.db"
    sqlite3.connect(path).close()
    result = run_cli("dashboard", "--headless", url=f"sqlite:///{path}")
    assert result.returncode == 2
    assert "ledger db upgrade" in result.stderr
    assert "Traceback" not in result.stderr


def options(command: list[str]) -> dict[str, str]:
    return dict(zip(command[5::2], command[6::2], strict=True))


def test_defaults_fill_only_what_streamlit_config_leaves_unset(tmp_path: Path) -> None:
    bare = options(streamlit_command(APP, env={}, files=[]))
    assert bare["--server.address"] == "127.0.0.1"  # loopback, not Streamlit's every interface
    assert bare["--client.toolbarMode"] == "minimal"  # no Deploy button or developer menu
    assert "--server.port" not in bare  # Streamlit's own default (8501) or its config
    config = tmp_path / ".streamlit" / "config.toml"
    config.parent.mkdir()
    config.write_text('[server]\naddress = "0.0.0.0"\n\n[client]\ntoolbarMode = "viewer"\n')
    configured = options(streamlit_command(APP, env={}, files=[config]))
    assert "--server.address" not in configured and "--client.toolbarMode" not in configured
    from_env = options(streamlit_command(APP, env={"STREAMLIT_SERVER_ADDRESS": "::1"}, files=[]))
    assert "--server.address" not in from_env


def test_flags_override_streamlit_config(tmp_path: Path) -> None:
    env = {"STREAMLIT_SERVER_PORT": "9999", "STREAMLIT_SERVER_ADDRESS": "0.0.0.0"}
    command = options(streamlit_command(APP, port=8765, host="127.0.0.2", env=env, files=[]))
    assert command["--server.port"] == "8765" and command["--server.address"] == "127.0.0.2"


def test_served_at_names_the_configured_port() -> None:
    env = {"STREAMLIT_SERVER_PORT": "9123"}
    command = streamlit_command(APP, env=env, files=[])
    assert served_at(command, env, []) == "http://127.0.0.1:9123"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/_stcore/health", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def poll(condition: Callable[[], bool], timeout_s: float = 120) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.3)
    return False


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    """Clean up after a failed test: the process group we started."""
    if proc.poll() is None or poll(lambda: not _group_alive(proc.pid), 1):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def sigterm_stops_server(command: list[str], env: dict[str, str], port: int, tmp: Path) -> None:
    """Start ``command``, wait for the dashboard on ``port``, SIGTERM the command's own
    process (not its group): the server must stop too."""
    log = (tmp / f"run-{port}.log").open("wb")
    proc = subprocess.Popen(command, env=env, stdout=log, stderr=log, start_new_session=True)
    try:
        assert poll(lambda: healthy(port) or proc.poll() is not None), "never started"
        assert healthy(port), (tmp / f"run-{port}.log").read_text()
        proc.send_signal(signal.SIGTERM)  # only the parent, as a service manager would
        assert proc.wait(timeout=120) == 0
        assert poll(lambda: not healthy(port)), "the Streamlit server outlived ledger"
        assert poll(lambda: not _group_alive(proc.pid), 60), "an orphan kept running"
    finally:
        stop_group(proc)
        log.close()


def test_sigterm_to_ledger_dashboard_stops_streamlit(workload_url: str, tmp_path: Path) -> None:
    port = free_port()  # through Streamlit's own variable: the CLI honours it
    env = {**dashboard_env(workload_url), "STREAMLIT_SERVER_PORT": str(port)}
    command = [sys.executable, "-c", "from ledger.cli import main; main()", "dashboard",
               "--headless"]  # fmt: skip
    sigterm_stops_server(command, env, port, tmp_path)


@pytest.mark.skipif(not (REPO / ".venv" / "bin" / "ledger").exists(), reason="needs .venv")
def test_sigterm_to_dev_py_demo_stops_streamlit(sqlite_url: str, tmp_path: Path) -> None:
    port = free_port()
    env = {**dashboard_env(sqlite_url), "STREAMLIT_SERVER_PORT": str(port), "CI": "false",
           "LEDGER_ANALYTICS_PATH": str(tmp_path / "analytics.duckdb")}  # fmt: skip
    command = [sys.executable, str(REPO / "dev.py"), "demo", "--calls", "30"]
    sigterm_stops_server(command, env, port, tmp_path)
