"""End to end in a real headless Chromium: ``ledger dashboard`` on a loopback port, every page.

Skips where Debian's ``chromium`` is absent, except under ``CI=true`` where it
must run (CI installs it with ``apt-get install -y chromium``). Screenshots go
to ``test-artifacts/dashboard/``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ledger.analytics import Analytics
from ledger.store.engine import ENV_URL
from tests.conftest import IN_CI
from tests.dashboards.conftest import REPO
from tests.dashboards.test_app import expect_cost, expect_overview, expect_stickiness

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
ARTIFACTS = REPO / "test-artifacts" / "dashboard"
START_TIMEOUT_S = 90

if not CHROMIUM.exists() and not IN_CI:
    pytest.skip(
        f"the browser test needs Debian's chromium at {CHROMIUM} (apt-get install -y chromium)",
        allow_module_level=True,
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_healthy(base: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"ledger dashboard exited with status {proc.returncode}")
        try:
            if httpx.get(f"{base}/_stcore/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.3)
    pytest.fail(f"the dashboard was not healthy within {START_TIMEOUT_S} s")


@pytest.fixture
def dashboard(workload_url: str, tmp_path: Path) -> Iterator[str]:
    """``ledger dashboard --headless`` over the workload ledger; yields its base URL."""
    port = free_port()
    env = {**os.environ, ENV_URL: workload_url}
    command = [sys.executable, "-c", "from ledger.cli import main; main()", "dashboard",
               "--headless", "--host", "127.0.0.1", "--port", str(port)]  # fmt: skip
    log = (tmp_path / "dashboard.log").open("wb")
    proc = subprocess.Popen(command, env=env, stdout=log, stderr=log, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base, proc)
        yield base
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the process group we started: CLI + streamlit
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def test_every_page_shows_its_headline_numbers_in_chromium(
    dashboard: str, workload_url: str, tmp_path: Path
) -> None:
    from playwright.sync_api import expect, sync_playwright

    with Analytics(workload_url, path=tmp_path / "expected.duckdb") as a:
        from ledger.analytics import Filters

        pages = {
            "": ("Overview", expect_overview(a, Filters())),
            "stickiness": ("Sticky routing", expect_stickiness(a, Filters())),
            "cache": ("Prompt-cache hits", {}),
            "cost": ("Cost attribution", expect_cost(a, Filters())),
            "upstreams": ("Upstreams & the provider.order verdict", {}),
        }
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
        )
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        for path, (title, numbers) in pages.items():
            page.goto(f"{dashboard}/{path}")
            expect(page.get_by_role("heading", name=title)).to_be_visible(timeout=60_000)
            metric = page.locator('[data-testid="stMetric"]')
            expect(metric.first).to_be_visible(timeout=60_000)
            for label, value in numbers.items():
                card = metric.filter(has_text=label).first
                expect(card.locator('[data-testid="stMetricValue"]')).to_have_text(value)
            expect(page.locator('[data-testid="stException"]')).to_have_count(0)
            page.wait_for_timeout(500)  # let the charts finish drawing for the screenshot
            page.screenshot(path=str(ARTIFACTS / f"{path or 'overview'}.png"), full_page=True)
        browser.close()
