"""What the change log costs the PostgreSQL writer, in CPU as well as wall clock (issue 22).

    PYTHONPATH=. .venv/bin/python bench/bench_pg_changelog.py [--rows 100000] [--rounds 5]

Fresh, migrated (partitioned) ledgers, each written by the ledger's own sink
(``PostgresSink``: COPY batches of 5,000):

* ``no change log`` (the baseline): at head, with the insert trigger dropped and
  ``ledger_changes.last_id`` dropped, so the sink finds nothing to log into and
  writes a plain COPY, and nothing logs the rows;
* ``log (head)``: the ledger as migrated: the sink logs each batch as range
  entries and the row-level insert trigger skips it (migration 0007);
* ``log (0003)``: downgraded to 0003, the statement-level insert trigger over a
  transition table (what 0007 replaced), for comparison.

The ledgers are interleaved batch by batch; medians of the rounds.

Besides rows/s it reports CPU per row: the writer thread's (``thread_time``)
and the server backend's (``/proc/<pid>/stat``, so the server must run on this
machine). On a loaded machine commit latency makes the wall-clock overhead swing
by several points between runs; the CPU figures hold still.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import bench_ledger
import psycopg
from sqlalchemy.engine import make_url

from ledger.events import to_row
from ledger.store.engine import make_engine
from ledger.store.migrate import downgrade, upgrade
from ledger.store.sink import PostgresSink

BATCH = 5_000
_TICK = os.sysconf("SC_CLK_TCK")
#: name -> (revision, statements run on the fresh ledger before the bench)
VARIANTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "no change log": (
        "head",
        (
            "DROP TRIGGER token_usage_log_insert ON token_usage",
            "ALTER TABLE ledger_changes DROP COLUMN last_id",
        ),
    ),
    "log (head)": ("head", ()),
    "log (0003)": ("0003", ()),
}
BASELINE = "no change log"


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


@contextmanager
def _databases(server: str, n: int) -> Iterator[list[str]]:
    admin = make_url(server).set(drivername="postgresql").render_as_string(hide_password=False)
    names = [f"ledger_bench_cl_{uuid.uuid4().hex[:8]}" for _ in range(n)]
    with psycopg.connect(admin, autocommit=True) as conn:
        for name in names:
            conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield [
            make_url(server)
            .set(drivername="postgresql+psycopg", database=name)
            .render_as_string(hide_password=False)
            for name in names
        ]
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            for name in names:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1/test")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    rows = [to_row(e) for e in bench_ledger.make_events(args.rows)]
    with _databases(args.pg, len(VARIANTS)) as urls:
        sinks, plain = {}, {}
        for (name, (revision, setup)), url in zip(VARIANTS.items(), urls, strict=True):
            engine = make_engine(url)
            upgrade(engine)
            if revision != "head":
                downgrade(engine, revision)
            plain[name] = (
                make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
            )
            with psycopg.connect(plain[name], autocommit=True) as conn:
                for statement in setup:
                    conn.execute(statement)
            sinks[name] = PostgresSink(engine)
            sinks[name].insert(rows[:1])  # connects, creates the months' partitions
        pids = {n: s._conn.driver_connection.info.backend_pid for n, s in sinks.items()}
        seen: dict[str, dict[str, list[float]]] = {
            n: {"wall": [], "client": [], "server": []} for n in VARIANTS
        }
        order = list(VARIANTS)
        for _ in range(args.rounds):
            for name in VARIANTS:
                with psycopg.connect(plain[name], autocommit=True) as conn:
                    conn.execute("TRUNCATE token_usage, ledger_changes")
            spent = {n: [0.0, 0.0, 0.0] for n in VARIANTS}
            for k, start in enumerate(range(0, args.rows, BATCH)):
                chunk = rows[start : start + BATCH]
                for name in order[k % len(order) :] + order[: k % len(order)]:
                    w, c, s = time.perf_counter(), time.thread_time(), _cpu_s(pids[name])
                    sinks[name].insert(chunk)
                    spent[name][0] += time.perf_counter() - w
                    spent[name][1] += time.thread_time() - c
                    spent[name][2] += _cpu_s(pids[name]) - s
            for name, (wall, client, server) in spent.items():
                seen[name]["wall"].append(args.rows / wall)
                seen[name]["client"].append(1e6 * client / args.rows)
                seen[name]["server"].append(1e6 * server / args.rows)
        for sink in sinks.values():
            sink.close()
    med = {n: {k: statistics.median(v) for k, v in d.items()} for n, d in seen.items()}
    base = med[BASELINE]
    print(
        f"PostgreSQL writer (PostgresSink, partitioned ledger), {args.rounds} rounds of "
        f"{args.rows:,} rows in batches of {BATCH:,}, interleaved by batch; medians:"
    )
    for name, m in med.items():
        cpu, base_cpu = m["client"] + m["server"], base["client"] + base["server"]
        wall = 100 * (1 - m["wall"] / base["wall"])
        print(
            f"  {name:<18} {m['wall']:9,.0f} rows/s (overhead {wall:5.1f} %)"
            f"  CPU/row: writer {m['client']:5.2f} us, server {m['server']:5.2f} us"
            f"  (overhead {100 * (cpu / base_cpu - 1):5.1f} %)"
        )
    print(f"  target (issue 22): log (head) <= 10 % below {BASELINE}")
    print(f"  load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")


if __name__ == "__main__":
    main()
