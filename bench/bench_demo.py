"""``ledger demo``'s target: >= 10,000 calls into the ledger in under 60 s on 2 cores.

Measures, in the same run:

* baseline: the simulator alone, the same number of OpenRouter requests of
  the demo's shape posted straight through its in-process httpx transport
  (no client, no ledger): the floor the demo cannot beat;
* the demo's workload (:func:`ledger.demo.run_demo`): real client, cascade,
  ledger writes, flushed to a fresh SQLite file;
* the whole command (``ledger demo --no-dashboard`` in a subprocess):
  migrate, workload, sync to DuckDB, report.

    .venv/bin/python bench/bench_demo.py [--calls 10000]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from ledger.demo import run_demo
from ledger.demo.workload import AGENTS, system_prompt, tool_definitions
from ledger.simulator import Simulator, SimulatorTransport, VirtualClock
from ledger.store.engine import make_engine
from ledger.store.migrate import upgrade

TARGET_S = 60.0


def baseline(calls: int) -> float:
    """Seconds for ``calls`` bare simulator requests with the demo's prompt sizes."""
    sim = Simulator(clock=VirtualClock(), seed=0)
    agent = AGENTS[1]
    system = system_prompt(agent)
    tools = tool_definitions(agent)
    started = time.perf_counter()
    with httpx.Client(
        transport=SimulatorTransport(sim),
        base_url="https://openrouter.ai/api/v1",
        headers={"authorization": "Bearer sk-bench"},
    ) as client:
        for i in range(calls):
            messages = [
                {"role": "system", "content": system},
                {"role": "user", "content": f"task {i // 8}"},
                *({"role": "user", "content": "step"} for _ in range(i % 8)),
            ]
            body = {"model": "qwen/qwen3-coder", "messages": messages, "tools": tools}
            client.post("/chat/completions", json=body).read()
    return time.perf_counter() - started


def workload(calls: int, directory: Path) -> float:
    url = f"sqlite:///{directory / 'workload.db'}"
    engine = make_engine(url)
    upgrade(engine)
    engine.dispose()
    started = time.perf_counter()
    run_demo(url, calls=calls, seed=0)
    return time.perf_counter() - started


def command(calls: int, directory: Path) -> float:
    env = {**os.environ, "LEDGER_DATABASE_URL": f"sqlite:///{directory / 'command.db'}"}
    ledger = Path(sys.executable).with_name("ledger")
    started = time.perf_counter()
    subprocess.run(
        [str(ledger), "demo", "--calls", str(calls), "--no-dashboard"],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=10_000)
    calls = parser.parse_args().calls
    with tempfile.TemporaryDirectory() as tmp:
        base = baseline(calls)
        work = workload(calls, Path(tmp))
        whole = command(calls, Path(tmp))
    print(f"{calls:,} calls")
    print(f"  baseline, bare simulator requests : {base:6.2f} s  ({calls / base:,.0f}/s)")
    print(
        f"  demo workload (client+ledger)     : {work:6.2f} s  ({calls / work:,.0f}/s, "
        f"{work / base:.2f}x baseline)"
    )
    print(
        f"  ledger demo --no-dashboard        : {whole:6.2f} s  ({whole / base:.2f}x baseline; "
        f"target < {TARGET_S:.0f} s: {'met' if whole < TARGET_S else 'MISSED'})"
    )


if __name__ == "__main__":
    main()
