"""``ledger dashboard``: the Streamlit dashboard over the ledger, in a child process.

The ledger's analytics copy is synced here first (with a progress bar when it
takes a while), so the dashboard's first page renders from an up-to-date file
instead of copying a large ledger while the user waits for a blank page.
``ledger demo`` opens the dashboard through :func:`run_dashboard`.

Streamlit's own configuration is honoured: ``STREAMLIT_SERVER_PORT`` and the
other ``STREAMLIT_*`` variables, ``~/.streamlit/config.toml`` and
``./.streamlit/config.toml``; a flag given to ``ledger dashboard`` overrides
them. What none of them sets gets this command's defaults: loopback only
(Streamlit's own default listens on every interface) and a minimal toolbar
(no Deploy button or developer menu). SIGTERM or SIGHUP to this process is
passed on to the Streamlit server, so stopping one stops both.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path
from types import FrameType
from typing import Any, Final

import click
from rich.console import Console

from ledger.cli.report import open_analytics
from ledger.listen import listen
from ledger.store.engine import ENV_URL
from ledger.store.migrate import check_ledger

_PACKAGE_DIR: Final = Path(__file__).resolve().parent.parent
DEFAULT_PORT: Final = 8501
DEFAULT_HOST: Final = "127.0.0.1"


def app_path() -> Path:
    """``app.py`` of the dashboard: inside the wheel, or at the repository root."""
    for candidate in (_PACKAGE_DIR / "_dashboards", _PACKAGE_DIR.parent / "dashboards"):
        if (candidate / "app.py").is_file():
            return candidate / "app.py"
    raise FileNotFoundError("the dashboard (dashboards/app.py) is missing from this installation")


#: Options this command sets when neither a flag nor Streamlit's configuration does.
DEFAULTS: Final[dict[str, str]] = {
    "server.address": DEFAULT_HOST,
    "client.toolbarMode": "minimal",
    "browser.gatherUsageStats": "false",
}
#: Signals passed on to the Streamlit child (SIGINT reaches it through the terminal).
FORWARDED: Final = (signal.SIGTERM, signal.SIGHUP)


def env_name(option: str) -> str:
    """``server.port`` -> ``STREAMLIT_SERVER_PORT`` (Streamlit's own spelling)."""
    section, name = option.split(".", 1)
    snake = "".join(f"_{c}" if c.isupper() else c for c in name)
    return f"STREAMLIT_{section}_{snake}".upper()


def config_files(cwd: Path, home: Path) -> list[Path]:
    """Streamlit's config files, lowest precedence first."""
    return [home / ".streamlit" / "config.toml", cwd / ".streamlit" / "config.toml"]


def configured(option: str, env: Mapping[str, str], files: list[Path]) -> str | None:
    """The value Streamlit's configuration gives ``option`` (environment over files)."""
    if env_name(option) in env:
        return env[env_name(option)]
    value: Any = None
    section, name = option.split(".", 1)
    for path in files:
        try:
            table = tomllib.loads(path.read_text())
        except (OSError, tomllib.TOMLDecodeError):
            continue  # Streamlit reports a broken file itself
        value = table.get(section, {}).get(name, value)
    return None if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def streamlit_command(
    app: Path,
    *,
    port: int | None = None,
    host: str | None = None,
    headless: bool = False,
    env: Mapping[str, str] | None = None,
    files: list[Path] | None = None,
) -> list[str]:
    """The ``streamlit run`` command line for ``app``: the flags given, then this command's
    defaults for what Streamlit's configuration leaves unset."""
    env = os.environ if env is None else env
    files = config_files(Path.cwd(), Path.home()) if files is None else files
    options: dict[str, str] = {}
    for option, value in DEFAULTS.items():
        if configured(option, env, files) is None:
            options[option] = value
    if port is not None:
        options["server.port"] = str(port)
    if host is not None:
        options["server.address"] = host
    if headless:
        options["server.headless"] = "true"
    command = [sys.executable, "-m", "streamlit", "run", str(app)]
    for option, value in options.items():
        command += [f"--{option}", value]
    return command


def served_address(
    command: list[str], env: Mapping[str, str], files: list[Path]
) -> tuple[str, int]:
    """Host and port the child will serve, as the command and Streamlit's configuration say."""
    flags = dict(zip(command[5::2], command[6::2], strict=False))
    host = flags.get("--server.address") or configured("server.address", env, files)
    port = flags.get("--server.port") or configured("server.port", env, files)
    return host or "localhost", int(port or DEFAULT_PORT)


def served_at(command: list[str], env: Mapping[str, str], files: list[Path]) -> str:
    """The URL the child will serve, as the command and Streamlit's configuration say."""
    host, port = served_address(command, env, files)
    return f"http://{host}:{port}"


def claim_port(command: list[str], env: Mapping[str, str], files: list[Path]) -> list[str]:
    """``command`` with a port that is free now: port 0 becomes a free one, and a taken
    port is :class:`~ledger.errors.AddressUnavailable` (one line, exit 2) here, before
    anything is printed, instead of Streamlit failing after our banner or moving to
    another port than the one announced."""
    host, port = served_address(command, env, files)
    probe = listen(host, port)
    free = probe.getsockname()[1]
    probe.close()  # Streamlit binds it again soon after; the window is short
    # set explicitly even when free == port: Streamlit then never moves to another port
    if "--server.port" in command:
        at = command.index("--server.port") + 1
        return [*command[:at], str(free), *command[at + 1 :]]
    return [*command, "--server.port", str(free)]


def dashboard_env(url: str) -> dict[str, str]:
    """The child's environment: the resolved ledger URL, so both sides read the same ledger."""
    env = dict(os.environ)
    env[ENV_URL] = url
    return env


def free_dashboard_port(port: int | None = None) -> int:
    """The port ``run_dashboard(port=…)`` will serve, checked free now (0: a free one
    chosen): ``ledger demo`` asks before its run, so a taken port fails at once."""
    files = config_files(Path.cwd(), Path.home())
    command = claim_port(streamlit_command(app_path(), port=port, files=files), os.environ, files)
    return served_address(command, os.environ, files)[1]


def run_dashboard(
    *,
    port: int | None = None,
    host: str | None = None,
    headless: bool = False,
    sync: bool = True,
) -> int:
    """Sync the analytics copy, then serve the dashboard until stopped; the exit status
    (0 when stopped by SIGINT, SIGTERM or SIGHUP)."""
    # Refuse to start over a ledger the dashboard could only apologise for.
    url = check_ledger().render_as_string(hide_password=False)
    files = config_files(Path.cwd(), Path.home())
    command = streamlit_command(app_path(), port=port, host=host, headless=headless, files=files)
    command = claim_port(command, os.environ, files)  # before a sync that may take a while
    if sync:
        open_analytics(Console(stderr=True)).close()  # releases the file for the child
    where = served_at(command, os.environ, files)
    click.echo(f"ledger dashboard on {where} (Ctrl-C stops it)", err=True)
    child = subprocess.Popen(command, env=dashboard_env(url))
    stopped: list[int] = []

    def forward(signum: int, frame: FrameType | None) -> None:
        stopped.append(signum)
        child.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED}
    try:
        status = child.wait()
    except KeyboardInterrupt:  # the child got the same SIGINT and shuts down cleanly
        child.wait()
        return 0
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0 if stopped or status == -signal.SIGINT else status


@click.command()
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=None,
    help=f"TCP port, 0 for a free one [Streamlit's setting, else {DEFAULT_PORT}].",
)
@click.option(
    "--host", default=None, help=f"Address to listen on [Streamlit's setting, else {DEFAULT_HOST}]."
)
@click.option("--headless", is_flag=True, help="Do not open a browser window.")
@click.option("--no-sync", is_flag=True, help="Start at once; the dashboard syncs by itself.")
def dashboard(port: int | None, host: str | None, headless: bool, no_sync: bool) -> None:
    """The Streamlit dashboard over the ledger (LEDGER_DATABASE_URL, else ./ledger.db).

    Honours Streamlit's configuration (STREAMLIT_SERVER_PORT, .streamlit/config.toml);
    --port and --host override it."""
    status = run_dashboard(port=port, host=host, headless=headless, sync=not no_sync)
    if status != 0:
        raise SystemExit(status)
