"""End to end in a real headless Chromium: ``ledger dashboard`` over a demo ledger, every page.

The ledger is filled by the demo itself (``run_demo``, a few hundred calls
through the real client and simulator), the dashboard runs as a subprocess on
a loopback port, and every page's headline numbers are compared with the
analytics layer's. Skips where Debian's ``chromium`` is absent, except under
``CI=true`` where it must run (CI installs it with ``apt-get install -y
chromium``). Screenshots go to ``test-artifacts/dashboard/`` under the test's
temporary directory, or under the repository's (git-ignored) ``test-artifacts/``
when ``LEDGER_TEST_ARTIFACTS=1`` asks to keep them.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from dashboards import fmt
from ledger.analytics import Analytics, Filters
from ledger.budgets import load_config
from ledger.budgets.config import ENV_BUDGETS_FILE
from ledger.budgets.status import budget_status
from ledger.demo.runner import run_demo
from ledger.store.engine import ENV_URL
from tests.conftest import IN_CI
from tests.dashboards.conftest import REPO
from tests.dashboards.test_app import (
    expect_cache,
    expect_cost,
    expect_overview,
    expect_stickiness,
    expect_verdicts,
)

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
#: Set to 1 to keep the screenshots under the repository's test-artifacts/.
ENV_KEEP_ARTIFACTS = "LEDGER_TEST_ARTIFACTS"
START_TIMEOUT_S = 90
DEMO_CALLS = 300
BUDGETS = """
[budgets.agents_daily]
kind = "agent_day"
limit_usd = 0.05

[budgets.turn]
kind = "turn"
mean_usd = 0.5
"""

if not CHROMIUM.exists() and not IN_CI:
    pytest.skip(
        f"the browser test needs Debian's chromium at {CHROMIUM} (apt-get install -y chromium)",
        allow_module_level=True,
    )


def artifacts_dir(tmp_path: Path) -> Path:
    root = REPO if os.environ.get(ENV_KEEP_ARTIFACTS) == "1" else tmp_path
    return root / "test-artifacts" / "dashboard"


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
def demo_url(sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A SQLite ledger filled by the demo, with budgets configured for the Budgets page."""
    run_demo(sqlite_url, calls=DEMO_CALLS, seed=4)
    budgets = tmp_path / "ledger.toml"
    budgets.write_text(BUDGETS)
    monkeypatch.setenv(ENV_BUDGETS_FILE, str(budgets))
    monkeypatch.setenv(ENV_URL, sqlite_url)
    return sqlite_url


@pytest.fixture
def dashboard(demo_url: str, tmp_path: Path) -> Iterator[str]:
    """``ledger dashboard --headless`` over the demo ledger; yields its base URL."""
    port = free_port()
    command = [sys.executable, "-c", "from ledger.cli import main; main()", "dashboard",
               "--headless", "--host", "127.0.0.1", "--port", str(port)]  # fmt: skip
    log = (tmp_path / "dashboard.log").open("wb")
    proc = subprocess.Popen(
        command, env=dict(os.environ), stdout=log, stderr=log, start_new_session=True
    )
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


def expect_budgets(a: Analytics, budgets_file: Path) -> dict[str, str]:
    """The Budgets page's headline on the ledger's last day (the page's default day)."""
    last = a.ledger_options().last_at
    assert last is not None
    now = dt.datetime.now(dt.UTC)
    day = last.astimezone(dt.UTC).date()
    at = now if day >= now.date() else dt.datetime.combine(day, dt.time.max, dt.UTC)
    lines = budget_status(a, load_config(budgets_file), at=at)
    return {
        "Budget lines today": fmt.count(len(lines)),
        "Over or projected over": fmt.count(sum(1 for s in lines if s.used > 1)),
    }


def expected_pages(url: str, tmp_path: Path) -> dict[str, tuple[str, dict[str, Any]]]:
    """Per page path: its heading and the metric values it must show (label -> value(s))."""
    with Analytics(url, path=tmp_path / "expected.duckdb") as a:
        f = Filters()
        verdicts = expect_verdicts(a, f)
        return {
            "": ("Overview", expect_overview(a, f)),
            "stickiness": ("Sticky routing", expect_stickiness(a, f)),
            "cache": ("Prompt-cache hits", expect_cache(a, f)),
            "cost": ("Cost attribution", expect_cost(a, f)),
            "upstreams": (
                "Upstreams & the provider.order verdict",
                {
                    "Verdict": [v[1] for v in verdicts],
                    "Pinned upstream": [v[2] for v in verdicts],
                    "Best alternative": [v[3] for v in verdicts],
                },
            ),
            "budgets": ("Budgets", expect_budgets(a, Path(os.environ[ENV_BUDGETS_FILE]))),
        }


def test_every_page_shows_its_headline_numbers_in_chromium(
    dashboard: str, demo_url: str, tmp_path: Path
) -> None:
    from playwright.sync_api import expect, sync_playwright

    pages = expected_pages(demo_url, tmp_path)
    assert all(numbers for _, numbers in pages.values()), "every page has numbers to check"
    artifacts = artifacts_dir(tmp_path)
    artifacts.mkdir(parents=True, exist_ok=True)
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
                name = page.locator('[data-testid="stMetricLabel"]', has_text=re.compile(
                    f"^{re.escape(label)}$"))  # fmt: skip
                values = metric.filter(has=name).locator('[data-testid="stMetricValue"]')
                expect(values).to_have_text(value if isinstance(value, list) else [value])
            expect(page.locator('[data-testid="stException"]')).to_have_count(0)
            page.wait_for_timeout(500)  # let the charts finish drawing for the screenshot
            page.screenshot(path=str(artifacts / f"{path or 'overview'}.png"), full_page=True)
        browser.close()
    assert sorted(p.name for p in artifacts.iterdir()) == sorted(
        f"{path or 'overview'}.png" for path in pages
    )
