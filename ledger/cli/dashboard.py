"""``ledger dashboard``: the Streamlit dashboard over the ledger, in a child process.

The ledger's analytics copy is synced here first (with a progress bar when it
takes a while), so the dashboard's first page renders from an up-to-date file
instead of copying a large ledger while the user waits for a blank page.
``ledger demo`` opens the dashboard through :func:`run_dashboard`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Final

import click
from rich.console import Console

from ledger.cli.report import open_analytics
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


def streamlit_command(app: Path, *, port: int, host: str, headless: bool) -> list[str]:
    """The ``streamlit run`` command line for ``app``."""
    return [
        sys.executable, "-m", "streamlit", "run", str(app),
        "--server.port", str(port),
        "--server.address", host,
        "--server.headless", "true" if headless else "false",
        "--browser.gatherUsageStats", "false",
    ]  # fmt: skip


def dashboard_env(url: str) -> dict[str, str]:
    """The child's environment: the resolved ledger URL, so both sides read the same ledger."""
    env = dict(os.environ)
    env[ENV_URL] = url
    return env


def run_dashboard(
    *, port: int = DEFAULT_PORT, host: str = DEFAULT_HOST, headless: bool = False, sync: bool = True
) -> int:
    """Sync the analytics copy, then serve the dashboard until interrupted; the exit status."""
    # Refuse to start over a ledger the dashboard could only apologise for.
    url = check_ledger().render_as_string(hide_password=False)
    if sync:
        open_analytics(Console(stderr=True)).close()  # releases the file for the child
    command = streamlit_command(app_path(), port=port, host=host, headless=headless)
    click.echo(f"ledger dashboard on http://{host}:{port} (Ctrl-C stops it)", err=True)
    child = subprocess.Popen(command, env=dashboard_env(url))
    try:
        return child.wait()
    except KeyboardInterrupt:  # the child got the same SIGINT and shuts down cleanly
        return child.wait()


@click.command()
@click.option("--port", type=int, default=DEFAULT_PORT, show_default=True, help="TCP port.")
@click.option("--host", default=DEFAULT_HOST, show_default=True, help="Address to listen on.")
@click.option("--headless", is_flag=True, help="Do not open a browser window.")
@click.option("--no-sync", is_flag=True, help="Start at once; the dashboard syncs by itself.")
def dashboard(port: int, host: str, headless: bool, no_sync: bool) -> None:
    """The Streamlit dashboard over the ledger (LEDGER_DATABASE_URL, else ./ledger.db)."""
    status = run_dashboard(port=port, host=host, headless=headless, sync=not no_sync)
    if status not in (0, -2):  # -2: stopped by SIGINT
        raise SystemExit(status)
