"""Two code trees on one ledger: first sync, a 10k-row incremental sync, every view
unfiltered and filtered, in interleaved rounds (medians), each run in a fresh process.

    .venv/bin/python bench/bench_layers.py --base /tmp/base-tree --rows 1000000

``--base`` is another checkout of the repository (``git archive <commit> | tar -x``),
the baseline measured in the same run; the tree this script sits in is the other.
Each round runs both trees, the order alternating, each on its own copy of the
ledger: the first sync (into a fresh DuckDB file), then 10k new rows synced,
then every view read whole (streamed as Arrow) over every row, then the views the
dashboard shows filtered (the second half of the ledger's time, half the agents),
as :meth:`Analytics.view` reads them. Targets (issue 35): every view <= 1 s at
10M rows, incremental 10k-row sync <= 0.3 s, filtered pages no slower than before.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
#: What the dashboard reads with filters set (the pages' views).
FILTERED_VIEWS = (
    "agent_stickiness",
    "cache_hits",
    "upstream_scorecard",
    "cost_attribution",
    "cost_by_agent",
    "failed_attempts",
    "overview_totals",
    "prompt_cache_reads",
    "response_cache_models",
    "switch_costs",
    "cache_decay",
    "provider_order_verdict",
)


def child(tree: Path, ledger: Path, rows: int) -> dict[str, float]:
    """One run of ``tree``'s code (imported from it) over a copy of ``ledger``."""
    sys.path[:0] = [str(tree), str(tree / "bench")]
    import bench_analytics  # the tree's own: its imports are that tree's module paths

    from ledger.analytics import VIEW_NAMES, Analytics, Filters

    times: dict[str, float] = {}
    with tempfile.TemporaryDirectory(dir=ledger.parent) as tmp:
        copy = Path(tmp) / "ledger.db"
        shutil.copy(ledger, copy)
        started = time.perf_counter()
        analytics = Analytics(f"sqlite:///{copy}", path=Path(tmp) / "a.duckdb")
        times["first sync"] = time.perf_counter() - started
        with analytics:
            bench_analytics.append_rows(copy, rows + 1, 10_000)
            started = time.perf_counter()
            analytics.refresh()
            times["sync 10k rows"] = time.perf_counter() - started
            for name in VIEW_NAMES:
                started = time.perf_counter()
                bench_analytics.fetch_all(analytics, name)
                times[f"view {name}"] = time.perf_counter() - started
            span = analytics.sql("SELECT * FROM ledger_span")
            first, last = span["first_at"][0], span["last_at"][0]
            half = Filters(
                start=(first + (last - first) / 2).to_pydatetime().astimezone(dt.UTC),
                actors=[f"agent-{i}" for i in range(10)],
            )
            for name in FILTERED_VIEWS:
                started = time.perf_counter()
                analytics.view(name, half)
                times[f"filtered {name}"] = time.perf_counter() - started
    return times


def run(tree: Path, ledger: Path, rows: int) -> dict[str, float]:
    command = [sys.executable, __file__, "--child", str(tree), "--ledger", str(ledger)]
    out = subprocess.run(
        [*command, "--rows", str(rows)],
        check=True,
        capture_output=True,
        text=True,
        cwd=tree,
    ).stdout
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", type=Path, help="the baseline tree")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/ledger-bench-layers"))
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--ledger", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.ledger, args.rows)))
        return
    sys.path.insert(0, str(HERE))
    import bench_analytics

    args.workdir.mkdir(parents=True, exist_ok=True)
    ledger = args.workdir / f"ledger-{args.rows}.db"
    if not ledger.exists():
        print(f"building a {args.rows:,}-row ledger ...", flush=True)
        bench_analytics.build_ledger(ledger, args.rows)
    trees = {"base": args.base.resolve(), "this": HERE.parent}
    runs: dict[str, list[dict[str, float]]] = {"base": [], "this": []}
    for n in range(args.rounds):
        for label in ("base", "this") if n % 2 == 0 else ("this", "base"):
            runs[label].append(run(trees[label], ledger, args.rows))
            print(f"round {n + 1} {label} done", flush=True)
    report(runs)


def report(runs: dict[str, list[dict[str, Any]]]) -> None:
    keys = list(dict.fromkeys(k for r in runs["this"] + runs["base"] for k in r))
    print(f"{'median of rounds (s)':<40} {'base':>8} {'this':>8} {'this/base':>10}")
    for key in keys:
        base = [r[key] for r in runs["base"] if key in r]
        this = [r[key] for r in runs["this"] if key in r]
        b = statistics.median(base) if base else float("nan")
        t = statistics.median(this) if this else float("nan")
        print(f"{key:<40} {b:8.3f} {t:8.3f} {t / b if base and this else float('nan'):10.2f}")


if __name__ == "__main__":
    main()
