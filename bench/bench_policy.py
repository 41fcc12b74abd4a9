"""What a routing policy adds to a client call (issue 37 target: within 10 us of today's).

Two ``Client`` s over the same in-process ``httpx.MockTransport`` answering a real
OpenRouter payload, recording into the same SQLite ledger: *today* sends with
``policies=False``; *policy* reads the ledger's active policy for the model
(``ignore`` one upstream, half the sessions held out) through the ledger's
``PolicyBook`` and draws each session's arm. Sessions rotate over 1,000 ids so
both arms are exercised. Rounds interleave the two, alternating which goes first;
"added" is the median over rounds of (policy - today) of the calling thread's CPU
time per call (the wall time is printed too), with the quartiles of those
per-round differences.

    PYTHONPATH=. .venv/bin/python bench/bench_policy.py [--calls 4000] [--block 20]
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import itertools
import os
import statistics
import sys
import tempfile
from pathlib import Path

from bench_client import MESSAGES, Side, added, http_client
from loopback import fixture

MODEL = "anthropic/claude-sonnet-4.6"
PAYLOAD = "openrouter_chat_anthropic_cache_read_write.json"


def main(calls: int, block: int) -> None:
    from ledger.client import Client
    from ledger.policies import start_policy
    from ledger.providers import make_provider
    from ledger.store.engine import make_engine
    from ledger.store.ledger import Ledger
    from ledger.store.migrate import upgrade

    tmp = Path(tempfile.mkdtemp())
    db = f"sqlite:///{tmp / 'bench.db'}"
    engine = make_engine(db)
    upgrade(engine)
    start_policy(
        engine, model=MODEL, provider={"ignore": ["amazon-bedrock"]}, holdout_share=0.5,
        by="bench", reason=None, now=dt.datetime.now(dt.UTC),
    )  # fmt: skip
    engine.dispose()
    replies = {PAYLOAD.split(".")[0]: fixture(PAYLOAD)}
    base = f"http://bench.invalid/{PAYLOAD.split('.')[0]}"
    ledger = Ledger(db, journal_dir=tmp / "journal")
    sessions = itertools.cycle([f"s-{i}" for i in range(1000)])
    provider = make_provider("openrouter", api_key="bench-key", base_url=base)
    today = Client(providers=[provider], ledger=ledger, policies=False, strict=True,
                   http_client=http_client(replies), default_provider="openrouter")  # fmt: skip
    policy = Client(providers=[provider], ledger=ledger, strict=True,
                    http_client=http_client(replies), default_provider="openrouter")  # fmt: skip
    try:
        sides = {"today": Side(), "policy": Side()}

        def call(client: Client) -> None:
            client.chat(MESSAGES, model=MODEL, session_id=next(sessions), actor_id="bench")

        order = [("today", lambda: call(today)), ("policy", lambda: call(policy))]
        for _ in range(300):  # warm up; the policy book's first read
            call(today)
            call(policy)
        assert policy._policy_for(provider, MODEL) is not None, "the policy was not read"
        ledger.flush(timeout=60)
        gc.collect()
        for r in range(max(calls // block, 4)):
            for label, fn in order if r % 2 == 0 else order[::-1]:
                sides[label].run_round(fn, block)
        ledger.flush(timeout=60)
    finally:
        today.close()
        policy.close()
        ledger.close()
    t, p = sides["today"], sides["policy"]
    cpu = added(t.round_cpu, p.round_cpu)
    wall = added(t.round_wall, p.round_wall)
    print(
        f"{max(calls // block, 4)} rounds x {block} calls per side, in process, python "
        f"{sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}"
    )
    print(
        f"cpu us/call: today {statistics.median(t.round_cpu):.1f}, policy "
        f"{statistics.median(p.round_cpu):.1f}, added {cpu[0]:+.1f} [{cpu[1]:+.1f}, {cpu[2]:+.1f}]"
    )
    print(
        f"wall us/call: today {statistics.median(t.round_wall):.1f}, policy "
        f"{statistics.median(p.round_wall):.1f}, added {wall[0]:+.1f} "
        f"[{wall[1]:+.1f}, {wall[2]:+.1f}]"
    )
    print("target (issue 37): added <= 10 us")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=4000)
    parser.add_argument("--block", type=int, default=20)
    args = parser.parse_args()
    main(args.calls, args.block)
