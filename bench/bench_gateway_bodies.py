"""A small request's latency while large request bodies are in flight through ``ledger gateway``.

Each round starts a fresh ``ledger gateway`` process (one uvicorn worker, access log
off, real SQLite ledger) in front of bench/loopback.py's instant upstream and runs:

* idle: a canary (a tiny chat call from one keep-alive client, one every 20 ms) for
  ``--idle-seconds``: the canary's latency with nothing else in flight;
* loaded: ``--bodies`` clients each POST one ``--body-mb`` MB chat body at once (a
  long conversation: ~4 KB messages), retrying after a 503's Retry-After as the SDKs
  do, while the canary keeps going until every body has been served.

Per round: the canary's p50 idle, its p50 and max under load, how many canary calls
failed or took over ``--canary-timeout`` s, the wall time until every large body
was served and their statuses, and the gateway's resident memory (VmRSS before,
VmHWM = peak, VmRSS after; /proc). Printed: the median over rounds of each figure.

``--baseline-src DIR`` runs a second gateway from another source tree in the same
rounds (interleaved, starting with a different one each round), e.g. the commit
before a change::

    git archive ace183f | (mkdir -p /tmp/gw-base && tar -x -C /tmp/gw-base)
    .venv/bin/python bench/bench_gateway_bodies.py --baseline-src /tmp/gw-base

The idle p50 of the same round is the baseline the loaded figures are read against.
``--setting KEY=VALUE`` adds a line to this tree's ``[gateway]`` table (e.g. another
``body_budget_bytes``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from bench_gateway import KEY, gateway
from loopback import fixture, instant_server

CANARY = {"model": "openai/gpt-4o-mini", "messages": [{"role": "user", "content": "Hello"}]}
CANARY_EVERY_S = 0.02


def big_body(megabytes: float) -> bytes:
    """A chat body of about ``megabytes`` MB: a long conversation of ~4 KB messages."""
    text = "lorem ipsum dolor sit amet " * 150
    count = int(megabytes * 1_000_000 / (len(text) + 40))
    messages = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"{i} {text}"}
        for i in range(count)
    ]
    return json.dumps({"model": "openai/gpt-4o-mini", "messages": messages}).encode()


@dataclass
class Round:
    idle_p50: float = 0.0
    loaded_p50: float = 0.0
    loaded_max: float = 0.0
    canary_failed: int = 0
    wall_s: float = 0.0
    statuses: Counter[str] = field(default_factory=Counter)
    rss_before_mb: float = 0.0
    rss_peak_mb: float = 0.0
    rss_after_mb: float = 0.0


@dataclass
class Target:
    name: str
    src: Path | None  # None: this tree
    settings: str = ""  # lines for its [gateway] table
    rounds: list[Round] = field(default_factory=list)


def _memory_mb(pid: int, field_name: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def _canary(url: str, stop: threading.Event, timeout_s: float) -> tuple[list[float], int]:
    """Canary latencies (ms) until ``stop``, and how many failed or timed out."""
    headers = {"authorization": f"Bearer {KEY}"}
    times: list[float] = []
    failed = 0
    with httpx.Client(timeout=timeout_s) as client:
        while not stop.is_set():
            t0 = time.perf_counter()
            try:
                ok = client.post(url, json=CANARY, headers=headers).status_code == 200
            except httpx.HTTPError:
                ok = False
            elapsed = time.perf_counter() - t0
            times.append(elapsed * 1000)
            failed += not ok
            stop.wait(max(0.0, CANARY_EVERY_S - elapsed))
    return times, failed


def _post_big(url: str, body: bytes) -> str:
    """POST ``body`` until it is served; a 503 with Retry-After is retried after it, as
    the OpenAI and Anthropic SDKs do. The final status, with the number of 503s."""
    headers = {"authorization": f"Bearer {KEY}", "content-type": "application/json"}
    refused = 0
    try:
        with httpx.Client(timeout=300) as client:
            while True:
                answer = client.post(url, content=body, headers=headers)
                if answer.status_code != 503 or "retry-after" not in answer.headers:
                    break
                refused += 1
                time.sleep(float(answer.headers["retry-after"]))
        status = str(answer.status_code)
    except httpx.HTTPError as exc:
        status = type(exc).__name__
    return f"{status} after {refused} x 503" if refused else status


def one_round(target: Target, upstream: str, body: bytes, args: argparse.Namespace) -> Round:
    found = Round()
    with (
        tempfile.TemporaryDirectory() as tmp,
        gateway(upstream, Path(tmp), target.src, target.settings) as (base, pid),
    ):
        url = base + "/v1/chat/completions"
        stop = threading.Event()
        timer = threading.Timer(args.idle_seconds, stop.set)
        timer.start()
        idle, _ = _canary(url, stop, args.canary_timeout)
        found.idle_p50 = statistics.median(idle)
        found.rss_before_mb = _memory_mb(pid, "VmRSS")
        stop = threading.Event()
        with ThreadPoolExecutor(args.bodies + 1) as pool:
            canary = pool.submit(_canary, url, stop, args.canary_timeout)
            time.sleep(0.2)
            t0 = time.perf_counter()
            posts = [pool.submit(_post_big, url, body) for _ in range(args.bodies)]
            found.statuses = Counter(p.result() for p in posts)
            found.wall_s = time.perf_counter() - t0
            stop.set()
            loaded, found.canary_failed = canary.result()
        found.loaded_p50 = statistics.median(loaded)
        found.loaded_max = max(loaded)
        found.rss_peak_mb = _memory_mb(pid, "VmHWM")
        time.sleep(0.5)
        found.rss_after_mb = _memory_mb(pid, "VmRSS")
    return found


def report(targets: list[Target], args: argparse.Namespace) -> None:
    print(
        f"\n{args.bodies} concurrent {args.body_mb:g} MB bodies, canary every "
        f"{CANARY_EVERY_S * 1000:.0f} ms, median of {args.rounds} interleaved rounds"
    )
    print(
        f"{'gateway':<10} {'idle p50':>9} {'load p50':>9} {'load max':>9} {'canary fail':>11} "
        f"{'bodies s':>9} {'RSS MB before/peak/after':>25}  statuses (last round)"
    )
    for t in targets:

        def med(name: str, t: Target = t) -> float:
            return statistics.median(getattr(r, name) for r in t.rounds)

        rss = f"{med('rss_before_mb'):.0f}/{med('rss_peak_mb'):.0f}/{med('rss_after_mb'):.0f}"
        print(
            f"{t.name:<10} {med('idle_p50'):>7.1f}ms {med('loaded_p50'):>7.1f}ms "
            f"{med('loaded_max'):>7.0f}ms {med('canary_failed'):>11.0f} {med('wall_s'):>9.1f} "
            f"{rss:>25}  {dict(t.rounds[-1].statuses)}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bodies", type=int, default=8)
    parser.add_argument("--body-mb", type=float, default=31)
    parser.add_argument("--idle-seconds", type=float, default=2.0)
    parser.add_argument("--canary-timeout", type=float, default=5.0)
    parser.add_argument("--baseline-src", type=Path, help="a source tree to compare against")
    parser.add_argument(
        "--setting",
        action="append",
        default=[],
        help="KEY=VALUE for this tree's [gateway] table (repeatable), e.g. "
        "body_budget_bytes=50331648",
    )
    args = parser.parse_args()
    body = big_body(args.body_mb)
    targets = [Target("this tree", None, "\n".join(args.setting))]
    if args.baseline_src is not None:
        targets.insert(0, Target("baseline", args.baseline_src.resolve()))
    with instant_server({"plain": fixture("openai_chat_doc_example.json")}) as upstream:
        for i in range(args.rounds):
            order = targets[i % len(targets) :] + targets[: i % len(targets)]
            for target in order:
                target.rounds.append(one_round(target, upstream, body, args))
                print(f"round {i + 1} {target.name}: {target.rounds[-1]}", flush=True)
    report(targets, args)


if __name__ == "__main__":
    main()
