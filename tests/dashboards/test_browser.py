"""End to end in a real headless Chromium: ``ledger dashboard`` over three ledgers, every page.

* the demo ledger (``run_demo``, a few hundred calls through the real client and
  simulator) plus a few rows whose model, agent and session hold Markdown, HTML,
  a Streamlit colour directive and terminal ESC sequences;
* an empty (migrated) ledger.

Every page is opened at 1440 and 390 px wide: no exception; the headline numbers
equal the analytics layer's; every verdict badge's text fits its box (its
scroll width is not wider than its client width); the cost chart draws a bar
for every requested provider with known spend; nothing from the ledger renders
as a link or an image. Skips where Debian's ``chromium`` is absent, except
under ``CI=true`` where it must run. Screenshots go to
``test-artifacts/dashboard/`` under the test's temporary directory, or under the
repository's (git-ignored) ``test-artifacts/`` when ``LEDGER_TEST_ARTIFACTS=1``.
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
from contextlib import contextmanager
from decimal import Decimal
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
from ledger.events import UsageEvent
from ledger.store.engine import ENV_URL, make_engine
from ledger.store.ledger import Ledger
from ledger.store.migrate import upgrade
from tests.conftest import IN_CI
from tests.dashboards.conftest import REPO
from tests.dashboards.test_app import expect_cache, expect_cost, expect_overview, expect_stickiness
from tests.dashboards.workload import record_bidi_rows

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
#: Set to 1 to keep the screenshots under the repository's test-artifacts/.
ENV_KEEP_ARTIFACTS = "LEDGER_TEST_ARTIFACTS"
START_TIMEOUT_S = 90
RENDER_TIMEOUT_MS = 90_000
DEMO_CALLS = 300
WIDTHS = (1440, 390)
PAGES = {
    "": "Overview",
    "stickiness": "Sticky routing",
    "cache": "Prompt-cache hits",
    "cost": "Cost attribution",
    "upstreams": "Upstreams & the provider.order verdict",
    "budgets": "Budgets",
}
BADGES = {"Warranted", "Not warranted", "Insufficient data", "Does not apply"}
#: A model name that is a Markdown link and image, a colour directive, HTML and ESC sequences.
EVIL = "http://evil.invalid"
NASTY_MODEL = f"[x]({EVIL}/x) ![i]({EVIL}/i.png) :red[boom] <b>b</b> \x1b]0;pwned\x07\x1b[2J"
NASTY_AGENT = f"**agent** [a]({EVIL}/a)"
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


def artifacts_dir(tmp_path: Path, name: str) -> Path:
    root = REPO if os.environ.get(ENV_KEEP_ARTIFACTS) == "1" else tmp_path
    folder = root / "test-artifacts" / "dashboard" / name
    folder.mkdir(parents=True, exist_ok=True)
    return folder


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


@contextmanager
def serve(tmp_path: Path) -> Iterator[str]:
    """``ledger dashboard --headless`` over LEDGER_DATABASE_URL; yields its base URL."""
    port = free_port()
    command = [sys.executable, "-c", "from ledger.cli import main; main()", "dashboard",
               "--headless", "--host", "127.0.0.1", "--port", str(port)]  # fmt: skip
    log = (tmp_path / f"dashboard-{port}.log").open("wb")
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
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def nasty_rows(url: str, journal: Path) -> None:
    """Three served calls whose model, agent and session are Markdown, HTML and ESC."""
    at = dt.datetime(2025, 11, 3, 9, 0, tzinfo=dt.UTC)
    with Ledger(url, journal_dir=journal) as ledger:
        for n in range(3):
            ledger.record(
                UsageEvent(
                    started_at=at + dt.timedelta(seconds=30 * n),
                    requested_provider="openrouter",
                    requested_model=NASTY_MODEL,
                    provider="openrouter",
                    upstream=f"[u]({EVIL}/u)",
                    status="ok",
                    session_id=f"![s]({EVIL}/s.png)",
                    actor_id=NASTY_AGENT,
                    session_key="k",
                    latency_ms=500.0,
                    input_tokens=1_000,
                    cache_read_tokens=500 * n,
                    output_tokens=50,
                    cost_usd=Decimal("0.001"),
                    cost_source="provider",
                )
            )


@pytest.fixture
def demo_url(sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The demo's ledger plus the nasty rows, with budgets for the Budgets page."""
    run_demo(sqlite_url, calls=DEMO_CALLS, seed=4)
    nasty_rows(sqlite_url, tmp_path / "journal")
    budgets = tmp_path / "ledger.toml"
    budgets.write_text(BUDGETS)
    monkeypatch.setenv(ENV_BUDGETS_FILE, str(budgets))
    monkeypatch.setenv(ENV_URL, sqlite_url)
    return sqlite_url


@pytest.fixture
def empty_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    engine = make_engine(url)
    try:
        upgrade(engine)
    finally:
        engine.dispose()
    monkeypatch.setenv(ENV_URL, url)
    return url


def expect_budgets(a: Analytics, budgets_file: Path) -> dict[str, str]:
    """The Budgets page's headline on the ledger's last day (the page's default day)."""
    last = a.ledger_options().last_at
    assert last is not None
    now = dt.datetime.now(dt.UTC)
    day = last.astimezone(dt.UTC).date()
    at = now if day >= now.date() else dt.datetime.combine(day, dt.time.max, dt.UTC)
    lines = budget_status(a, load_config(budgets_file), at=at)
    label = "Budget lines today" if day >= now.date() else f"Budget lines on {day:%b %d}"
    return {
        label: fmt.count(len(lines)),
        "Over or projected over": fmt.count(sum(1 for s in lines if s.used > 1)),
    }


def expected(url: str, tmp_path: Path) -> dict[str, Any]:
    """Per page path the metrics it must show; the providers with spend; the verdict count."""
    with Analytics(url, path=tmp_path / "expected.duckdb") as a:
        f = Filters()
        costs = a.cost_attribution(f)
        spent = costs[costs["cost_usd"].map(lambda v: v is not None and v > 0)]
        return {
            "metrics": {
                "": expect_overview(a, f),
                "stickiness": expect_stickiness(a, f),
                "cache": expect_cache(a, f),
                "cost": expect_cost(a, f),
                "upstreams": {},
                "budgets": expect_budgets(a, Path(os.environ[ENV_BUDGETS_FILE])),
            },
            "providers": sorted(set(spent["requested_provider"])),
            "verdicts": len(a.provider_order_verdict(f)),
        }


def settle(page: Any, title: str) -> None:
    """Wait for the page's heading, for the script run to finish and for its charts."""
    from playwright.sync_api import expect

    expect(page.get_by_role("heading", name=title, exact=True)).to_be_visible(
        timeout=RENDER_TIMEOUT_MS
    )
    page.wait_for_function(
        "() => !document.querySelector('[data-testid=\"stStatusWidget\"]')",
        timeout=RENDER_TIMEOUT_MS,
    )
    # Streamlit draws a run's elements as they arrive and shows its status widget only
    # after a delay: the app's own script-run state (what Streamlit's e2e tests wait
    # for) says when the run is over
    page.wait_for_selector(
        '[data-testid="stApp"][data-test-script-state="notRunning"]',
        state="attached",
        timeout=RENDER_TIMEOUT_MS,
    )
    charts = page.locator('[data-testid="stVegaLiteChart"]')
    for n in range(charts.count()):
        expect(charts.nth(n).locator("svg")).to_be_attached(timeout=RENDER_TIMEOUT_MS)


def screenshot(page: Any, path: Path, width: int) -> None:
    """The whole page: the viewport grown to the main area's height (it scrolls inside)."""
    height = page.evaluate("() => document.querySelector('[data-testid=\"stMain\"]').scrollHeight")
    page.set_viewport_size({"width": width, "height": min(int(height) + 40, 16_000)})
    page.wait_for_timeout(300)
    page.screenshot(path=str(path), full_page=True)
    page.set_viewport_size({"width": width, "height": 1000})


def check_badges(page: Any, count: int) -> None:
    """One badge per model, each a known verdict whose whole text fits its box."""
    from playwright.sync_api import expect

    badges = page.locator("span.stMarkdownBadge")
    expect(badges).to_have_count(count, timeout=RENDER_TIMEOUT_MS)
    for n in range(count):
        badge = badges.nth(n)
        assert badge.inner_text() in BADGES
        assert badge.is_visible()
        fits = badge.evaluate("e => e.scrollWidth <= e.clientWidth && e.scrollWidth > 0")
        assert fits, f"badge {badge.inner_text()!r} is clipped"


def check_cost_chart(page: Any, providers: list[str]) -> None:
    """The requested-vs-responding chart has a bar per provider with spend. Only its bars
    say "requested provider"; the page's charts are read until they do (a rerun under
    load redraws them), never by position."""
    bars = page.locator('[data-testid="stVegaLiteChart"] [aria-roledescription="bar"]')
    deadline = time.monotonic() + RENDER_TIMEOUT_MS / 1000
    while True:
        labels = bars.evaluate_all("bars => bars.map(b => b.getAttribute('aria-label') || '')")
        missing = [p for p in providers if not any(f"requested provider: {p}" in x for x in labels)]
        if not missing or time.monotonic() > deadline:
            break
        page.wait_for_timeout(250)
    assert not missing, (missing, labels)


def check_plain(page: Any) -> None:
    """Nothing from the ledger became a link or an image."""
    links = page.locator(f'a[href*="{EVIL}"]')
    assert links.count() == 0, links.evaluate_all("a => a.map(e => e.parentElement.outerHTML)")
    assert page.locator(f'img[src*="{EVIL}"]').count() == 0


def check_metrics(page: Any, numbers: dict[str, str]) -> None:
    from playwright.sync_api import expect

    metric = page.locator('[data-testid="stMetric"]')
    for label, value in numbers.items():
        name = page.locator('[data-testid="stMetricLabel"]', has_text=re.compile(
            f"^{re.escape(label)}$"))  # fmt: skip
        values = metric.filter(has=name).locator('[data-testid="stMetricValue"]')
        # generous: on a loaded machine the script may still be running after the heading
        expect(values).to_have_text([value], timeout=RENDER_TIMEOUT_MS)


def launch(pw: Any) -> Any:
    return pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)


def test_every_page_at_1440_and_390_px_on_the_demo_ledger(demo_url: str, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    want = expected(demo_url, tmp_path)
    assert want["providers"] and want["verdicts"] >= 2
    artifacts = artifacts_dir(tmp_path, "demo")
    with serve(tmp_path) as base, sync_playwright() as pw:
        browser = launch(pw)
        for width in WIDTHS:
            page = browser.new_page(viewport={"width": width, "height": 1000})
            for path, title in PAGES.items():
                page.goto(f"{base}/{path}")
                settle(page, title)
                assert page.locator('[data-testid="stException"]').count() == 0
                check_metrics(page, want["metrics"][path])
                check_plain(page)
                if path in ("", "upstreams"):
                    check_badges(page, want["verdicts"])
                if path == "cost":
                    check_cost_chart(page, want["providers"])
                if path == "":  # the nasty model is listed, as the text it is
                    main = page.locator('[data-testid="stMain"]').inner_text()
                    assert f"[x]({EVIL}/x)" in main and "\x1b" not in main
                screenshot(page, artifacts / f"{path or 'overview'}-{width}.png", width)
            page.close()
        browser.close()
    assert len(list(artifacts.glob("*.png"))) == len(PAGES) * len(WIDTHS)


def test_every_page_at_1440_and_390_px_on_an_empty_ledger(empty_url: str, tmp_path: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    artifacts = artifacts_dir(tmp_path, "empty")
    with serve(tmp_path) as base, sync_playwright() as pw:
        browser = launch(pw)
        for width in WIDTHS:
            page = browser.new_page(viewport={"width": width, "height": 1000})
            for path in PAGES:
                page.goto(f"{base}/{path}")
                settle(page, "The ledger is empty")
                assert page.locator('[data-testid="stException"]').count() == 0
                expect(page.locator("code", has_text="ledger demo").first).to_be_visible()
                screenshot(page, artifacts / f"{path or 'overview'}-{width}.png", width)
            page.close()
        browser.close()
    assert len(list(artifacts.glob("*.png"))) == len(PAGES) * len(WIDTHS)


BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
#: Per page, a name it shows as text (tables and charts draw on canvases: the
#: screenshots show them): the agent in the filter's options, the pinned upstream.
BIDI_SHOWN = {
    "": "\\u2067planner\\u2069-rtl",
    "cost": "",
    "upstreams": "Pinned upstream: \\u202eAmazon Bedrock",
}


def test_bidi_overrides_from_the_ledger_are_shown_escaped_in_the_browser(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a user sees: no bidi character in any page's text (tables, chart axes and
    legends, the sidebar's options), and "\\u202eAmazon Bedrock" where the ledger has it."""
    from playwright.sync_api import sync_playwright

    record_bidi_rows(
        sqlite_url, tmp_path / "journal", at=dt.datetime(2025, 11, 3, 9, tzinfo=dt.UTC)
    )
    monkeypatch.setenv(ENV_URL, sqlite_url)
    artifacts = artifacts_dir(tmp_path, "bidi")
    with serve(tmp_path) as base, sync_playwright() as pw:
        browser = launch(pw)
        page = browser.new_page(viewport={"width": 1440, "height": 1000})
        for path in BIDI_SHOWN:
            page.goto(f"{base}/{path}")
            settle(page, PAGES[path])
            assert page.locator('[data-testid="stException"]').count() == 0
            if path == "":  # the sidebar's filter options, opened
                page.locator('[data-testid="stMultiSelect"]').first.click()
            # Streamlit draws a run's elements as they arrive: the heading and an idle
            # status widget do not mean the rest of the page is there yet
            page.wait_for_function(
                "shown => document.body.textContent.includes(shown)",
                arg=BIDI_SHOWN[path],
                timeout=RENDER_TIMEOUT_MS,
            )
            # text nodes (SVG labels of the charts included), titles and aria labels
            seen = page.evaluate(
                """() => document.body.textContent + [...document.querySelectorAll('*')]
                .flatMap(e => [e.getAttribute('aria-label') || '', e.getAttribute('title') || ''])
                .join(' ')"""
            )
            assert {c for c in BIDI if c in seen} == set(), path
            assert BIDI_SHOWN[path] in seen, path
            screenshot(page, artifacts / f"{path or 'overview'}-1440.png", 1440)
        page.close()
        browser.close()
