"""Dashboard benchmark: first render of every page on a 1M-row ledger, next to its bare queries.

    .venv/bin/python bench/bench_dashboard.py                 # 1,000,000 rows
    .venv/bin/python bench/bench_dashboard.py --rows 200000 --workdir /tmp/ledger-bench-dash

Builds (once) a synthetic SQLite ledger with the generator of
``bench/bench_analytics.py``, syncs its analytics file as ``ledger dashboard``
does before starting Streamlit, then for each page measures with
``streamlit.testing.v1.AppTest``:

* first render: every Streamlit cache cleared (so the Analytics resource is
  reopened and every figure computed), then the page run to completion;
* warm render: the same page run again (results served from ``st.cache_data``);
* baseline: the bare ``Analytics`` calls behind the page's figures, run
  directly on a connection of the same file, in the same process.

Target (issue 14, 2-core machine): first render of every page <= 1 s at 1M rows.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import streamlit as st
from streamlit.testing.v1 import AppTest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from dashboards.summary import bucket_for  # noqa: E402
from ledger.analytics import Analytics, Filters  # noqa: E402

APP = REPO / "dashboards" / "app.py"
TARGET_S = 1.0

F = Filters()
# The Analytics calls behind each page's figures, every ``data.load`` a page makes
# on its first render (the drill-down's session queries need a session id picked
# first, so they are not part of a first render).
BASELINES: dict[str, list[Callable[[Analytics], Any]]] = {
    "screens/overview.py": [
        lambda a: a.ledger_options(),
        lambda a: a.overview_totals(F),
        lambda a: a.provider_order_verdict(F),
        lambda a: a.agent_stickiness(F),
        lambda a: a.cache_hits_by_agent(F),
        lambda a: a.prompt_cache_saving(F),
        lambda a: a.response_cache_saving(F),
        lambda a: a.timeline(F, bucket_for(queries_span(a))),
        lambda a: a.spend_over_time(F, bucket_for(queries_span(a))),
        lambda a: a.switch_costs(F),
    ],
    "screens/stickiness.py": [
        lambda a: a.agent_stickiness(F),
        lambda a: a.top_sessions(F),
    ],
    "screens/cache.py": [
        lambda a: a.cache_hits_by_agent(F),
        lambda a: a.cache_hits(F),
        lambda a: a.cache_decay_by_key(F),
    ],
    "screens/cost.py": [
        lambda a: a.cost_attribution(F),
        lambda a: a.fallback_cost(F),
        lambda a: a.failed_attempts(F),
        lambda a: a.cost_by_agent(F),
        # The page's "Estimated vs billed" section: without it the baseline missed
        # the page's slowest query and first/base read 20-85x (issue 40).
        lambda a: a.estimated_vs_billed(F),
    ],
    "screens/upstreams.py": [
        lambda a: a.upstream_scorecard(F),
        lambda a: a.provider_order_verdict(F),
    ],
}


def queries_span(a: Analytics) -> Any:
    options = a.ledger_options()
    return options.last_at - options.first_at  # type: ignore[operator]


def load_generator() -> Any:
    spec = importlib.util.spec_from_file_location(
        "bench_analytics", REPO / "bench/bench_analytics.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def render(at: AppTest, page: str) -> float:
    at.switch_page(page)
    seconds, _ = timed(at.run)
    if at.exception or at.error:
        raise SystemExit(f"{page} failed: {[e.value for e in (*at.exception, *at.error)]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/ledger-bench-dash"))
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (median)")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    ledger = args.workdir / f"ledger-{args.rows}.db"
    if not ledger.exists():
        seconds, _ = timed(lambda: load_generator().build_ledger(ledger, args.rows))
        print(f"generated {args.rows:,} rows in {seconds:.1f} s")
    url = f"sqlite:///{ledger}"
    os.environ["LEDGER_DATABASE_URL"] = url
    seconds, _ = timed(lambda: Analytics(url).close())
    print(f"pre-sync (as `ledger dashboard` does)  {seconds:6.2f} s")

    at = AppTest.from_file(str(APP), default_timeout=120)
    at.run()  # registers the pages; not measured
    figures: dict[str, list[tuple[float, float, float]]] = {page: [] for page in BASELINES}
    loads = []
    for _ in range(args.rounds):  # rounds interleave the pages and their baselines
        loads.append(os.getloadavg()[0])
        for page, calls in BASELINES.items():
            st.cache_data.clear()
            st.cache_resource.clear()  # closes the Analytics: the first render reopens it
            first = render(at, page)
            warm = render(at, page)
            with Analytics(url, sync=False) as a:
                baseline = sum(timed(lambda c=c: c(a))[0] for c in calls)  # type: ignore[misc]
            figures[page].append((first, warm, baseline))
    st.cache_resource.clear()
    print(
        f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} CPUs, load "
        f"{min(loads):.1f}-{max(loads):.1f} at the rounds' starts; median of {args.rounds} "
        "interleaved rounds (min-max of the rounds in brackets); script time "
        "(AppTest), not a browser's"
    )
    print(
        f"{'page':<22} {'first':>7} {'(min-max)':>13} {'warm':>7} {'baseline':>9} "
        f"{'first/base':>10}  target"
    )
    failures = 0
    for page, runs in figures.items():
        first, warm, baseline = (statistics.median(r[i] for r in runs) for i in range(3))
        firsts = sorted(r[0] for r in runs)
        ok = first <= TARGET_S
        failures += not ok
        print(
            f"{page.removeprefix('screens/'):<22} {first:6.2f}s "
            f"({firsts[0]:5.2f}-{firsts[-1]:5.2f}) {warm:6.2f}s {baseline:8.2f}s "
            f"{first / baseline:9.2f}x  {'ok' if ok else 'OVER'} (<= {TARGET_S:.0f} s)"
        )
    if failures:
        raise SystemExit(f"{failures} page(s) over {TARGET_S} s")


if __name__ == "__main__":
    main()
