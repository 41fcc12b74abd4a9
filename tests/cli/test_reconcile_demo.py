"""``ledger reconcile openrouter`` on a demo ledger: a simulator started afterwards bills
what the demo served (``ledger simulate --bills``), and rows made elsewhere are said, once
and counted, to be unknown there rather than pending forever."""

from __future__ import annotations

import datetime as dt
import os
import re
import subprocess
import sys

from sqlalchemy import func, select
from sqlalchemy.engine import make_url

from ledger.cli.demo import bills_path
from ledger.demo import run_demo
from ledger.schema import token_usage
from ledger.store.engine import make_engine
from tests.analytics.builders import insert_rows, row
from tests.cli.shell import ledger_cli

LEDGER = [sys.executable, "-c", "from ledger.cli import main; main()"]


def _openrouter_rows(url: str) -> tuple[int, int]:
    """OpenRouter rows with a generation id: all of them, and those billed."""
    t = token_usage.c
    engine = make_engine(url)
    with engine.connect() as conn:
        mine = (t.provider == "openrouter") & t.generation_id.is_not(None)
        total = conn.execute(select(func.count()).where(mine)).scalar_one()
        billed = conn.execute(select(func.count()).where(mine, t.billed_at.is_not(None)))
        done = billed.scalar_one()
    engine.dispose()
    return int(total), int(done)


def test_a_demo_ledger_is_reconciled_and_foreign_rows_are_counted_once(sqlite_url: str) -> None:
    bills = bills_path(make_url(sqlite_url))
    run_demo(sqlite_url, calls=80, seed=1, bills=bills)
    demo_rows, _ = _openrouter_rows(sqlite_url)
    assert demo_rows > 20 and bills.is_file()
    yesterday = dt.datetime.now(dt.UTC) - dt.timedelta(days=1)
    insert_rows(sqlite_url, [row(0, generation_id="gen-made-elsewhere", started_at=yesterday)])

    # as from cron: no terminal and no COLUMNS, so no line is wrapped
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env["LEDGER_DATABASE_URL"] = sqlite_url
    simulate = [*LEDGER, "simulate", "--port", "0", "--latency-scale", "0", "--bills", str(bills)]
    with subprocess.Popen(simulate, env=env, stdout=subprocess.PIPE, text=True) as simulator:
        try:
            assert simulator.stdout is not None
            banner = simulator.stdout.readline()
            found = re.search(r"simulator on (http://\S+)", banner)
            assert found is not None, banner
            env |= {"OPENROUTER_BASE_URL": found.group(1) + "/api/v1", "OPENROUTER_API_KEY": "sim"}
            done = ledger_cli("reconcile", "openrouter", "--since", "all", env=env)
            again = ledger_cli("reconcile", "openrouter", "--since", "all", env=env)
        finally:
            simulator.terminate()
            simulator.wait(timeout=30)

    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"{demo_rows:,} of {demo_rows + 1:,} rows reconciled; 0 not billed")
    unknown = [line for line in lines if "never be billed" in line]
    assert len(unknown) == 1, done.stdout + done.stderr
    assert unknown[0].startswith("1 row unknown to http://127.0.0.1:")
    assert "next run" not in unknown[0]
    assert _openrouter_rows(sqlite_url) == (demo_rows + 1, demo_rows)
    # the rerun has only the foreign row left, and says the same of it
    assert again.stdout.startswith("0 of 1 row reconciled") and "1 row unknown" in again.stdout
