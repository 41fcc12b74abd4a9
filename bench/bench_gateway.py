"""What ``ledger gateway`` adds to an LLM call, against an instant upstream on loopback.

The upstream (bench/loopback.py) runs in a child process and answers at once
with real payload fixtures: whole JSON for plain calls, an SSE stream in HTTP/1.1
chunks for streamed ones. The gateway runs as the real ``ledger gateway`` command
(one uvicorn worker, access log off) recording every attempt into a real SQLite
ledger (journal + background writer). LiteLLM's proxy, when it is installed in a
separate virtualenv (``--litellm PATH/TO/litellm``, default
``/tmp/litellm-venv/bin/litellm``), is measured in the same run in front of the
same upstream.

For each target (direct to the upstream, through the gateway, through LiteLLM)
we time the same request from one keep-alive httpx client, rounds interleaved
(each round runs every target, starting with a different one):

* plain: send -> whole body;
* streamed: send -> first body byte (time to first byte), then the rest is drained.

Printed: p50 and p99 of each target, and what the proxy adds over direct: the
p50 as the median over rounds of (round p50 - direct's round p50), the p99 over
all samples. Then requests per second on one worker: 16 concurrent clients for a
few seconds per target, plain calls. Target: the gateway adds <= 1 ms at p50.

    .venv/bin/python bench/bench_gateway.py [--rounds 15 --per-round 40]

``--baseline-src DIR`` also runs a gateway from another source tree (e.g. the commit
before a change, ``git archive <commit> | tar -x -C DIR``) in the same interleaved
rounds, so a change's cost is read against a baseline measured under the same load.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from loopback import fixture, instant_server

from ledger.gateway import hash_key
from ledger.simulator.server import free_port

KEY = "lgw-bench-key-0123456789abcdef"
LITELLM_KEY = "sk-litellm-bench-master-0123456789"
BODY = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Hello"}]}
CONCURRENCY = 16


@dataclass
class Target:
    name: str
    url: str  # the chat-completions URL
    headers: dict[str, str]
    plain_model: str
    stream_model: str
    stream_url: str | None = None  # where streamed calls go, if not ``url``
    pid: int | None = None  # the proxy's process, for its CPU time per call
    cpu_s: float = 0.0
    calls: int = 0
    plain: list[list[float]] = field(default_factory=list)  # per round
    ttfb: list[list[float]] = field(default_factory=list)


def _wait(url: str, process: subprocess.Popen[bytes], what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}")
        try:
            if httpx.get(url, timeout=2).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{what} did not come up within {timeout:.0f} s")


@contextmanager
def _process(args: list[str], env: dict[str, str], cwd: Path) -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(
        args, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        yield process
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU time of a process and its children so far (Linux /proc)."""
    if pid is None:
        return 0.0
    total = 0.0
    for each in [pid, *_children(pid)]:
        try:
            fields = Path(f"/proc/{each}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        children = task / "children"
        if children.exists():
            found += [int(c) for c in children.read_text().split()]
    return [c for child in found for c in (child, *_children(child))]


@contextmanager
def gateway(
    upstream: str, workdir: Path, src: Path | None = None, settings: str = ""
) -> Iterator[tuple[str, int]]:
    """``ledger gateway`` in ``workdir``; ``src``: import ledger from that tree instead;
    ``settings``: more ``[gateway]`` lines (TOML)."""
    workdir.mkdir(exist_ok=True)
    db = f"sqlite:///{workdir / 'ledger.db'}"
    env = {**os.environ, "LEDGER_DATABASE_URL": db, "BENCH_UPSTREAM_KEY": "sk-bench"}
    if src is not None:
        env["PYTHONPATH"] = str(src)  # ahead of the editable install's path entry
    ledger_cli = str(Path(sys.executable).with_name("ledger"))
    subprocess.run([ledger_cli, "db", "upgrade"], env=env, check=True, capture_output=True)
    (workdir / "ledger.toml").write_text(
        f"""[gateway]
passthrough = ["openai", "groq"]
{settings}
[gateway.providers.openai]
base_url = "{upstream}/plain/v1"
api_key_env = "BENCH_UPSTREAM_KEY"
[gateway.providers.groq]
base_url = "{upstream}/stream/v1"
api_key_env = "BENCH_UPSTREAM_KEY"
[gateway.keys.bench]
sha256 = "{hash_key(KEY)}"
"""
    )
    port = free_port()
    args = [ledger_cli, "gateway", "--port", str(port), "--no-access-log"]
    with _process(args, env, workdir) as process:
        _wait(f"http://127.0.0.1:{port}/healthz", process, "ledger gateway")
        yield f"http://127.0.0.1:{port}", process.pid


@contextmanager
def litellm(executable: str, upstream: str, workdir: Path) -> Iterator[tuple[str, int]]:
    (workdir / "litellm.yaml").write_text(
        f"""model_list:
  - model_name: plain
    litellm_params:
      model: openai/gpt-4o-mini
      api_base: {upstream}/plain/v1
      api_key: sk-bench
  - model_name: stream
    litellm_params:
      model: openai/gpt-4o-mini
      api_base: {upstream}/stream/v1
      api_key: sk-bench
litellm_settings:
  telemetry: false
general_settings:
  master_key: {LITELLM_KEY}
"""
    )
    port = free_port()
    env = {**os.environ, "LITELLM_LOG": "ERROR", "LITELLM_TELEMETRY": "False"}
    args = [
        executable,
        "--config",
        str(workdir / "litellm.yaml"),
        "--port",
        str(port),
        "--num_workers",
        "1",
    ]
    with _process(args, env, workdir) as process:
        _wait(f"http://127.0.0.1:{port}/health/liveliness", process, "litellm proxy", 300)
        yield f"http://127.0.0.1:{port}", process.pid


def _plain(client: httpx.Client, target: Target) -> float:
    t0 = time.perf_counter()
    response = client.post(
        target.url, json={**BODY, "model": target.plain_model}, headers=target.headers
    )
    elapsed = time.perf_counter() - t0
    assert response.status_code == 200, response.text[:300]
    return elapsed * 1000


def _ttfb(client: httpx.Client, target: Target) -> float:
    body = {**BODY, "model": target.stream_model, "stream": True}
    t0 = time.perf_counter()
    url = target.stream_url or target.url
    with client.stream("POST", url, json=body, headers=target.headers) as response:
        chunks = response.iter_raw()
        next(chunks)
        elapsed = time.perf_counter() - t0
        for _ in chunks:
            pass
    assert response.status_code == 200
    return elapsed * 1000


def measure(targets: list[Target], rounds: int, per_round: int) -> None:
    clients = {t.name: httpx.Client(timeout=30) for t in targets}
    for target in targets:  # warm up connections and code paths
        for _ in range(20):
            _plain(clients[target.name], target)
            _ttfb(clients[target.name], target)
    for r in range(rounds):
        order = targets[r % len(targets) :] + targets[: r % len(targets)]
        for target in order:
            client = clients[target.name]
            before = cpu_seconds(target.pid)
            target.plain.append([_plain(client, target) for _ in range(per_round)])
            target.ttfb.append([_ttfb(client, target) for _ in range(per_round)])
            target.cpu_s += cpu_seconds(target.pid) - before
            target.calls += 2 * per_round
    for client in clients.values():
        client.close()


async def _rps(target: Target, seconds: float) -> float:
    done = failed = 0
    stop = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=CONCURRENCY, max_keepalive_connections=CONCURRENCY)
    async with httpx.AsyncClient(timeout=30, limits=limits) as client:

        async def worker() -> None:
            nonlocal done, failed
            body = {**BODY, "model": target.plain_model}
            while time.perf_counter() < stop:
                try:
                    response = await client.post(target.url, json=body, headers=target.headers)
                except httpx.HTTPError:
                    failed += 1
                    continue
                if response.status_code == 200:
                    done += 1
                else:
                    failed += 1

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
        if failed:
            print(f"  ({target.name}: {failed} requests failed during the load run)")
        return done / (time.perf_counter() - t0)


def _p(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100)[q - 1]


def report(targets: list[Target], rps: dict[str, float]) -> None:
    direct = targets[0]
    load = os.getloadavg()
    print(f"\nload average during the run: {load[0]:.1f} on {os.cpu_count()} cores")
    for kind in ("plain", "ttfb"):
        title = (
            "plain call, send -> whole body" if kind == "plain" else "streamed, time to first byte"
        )
        print(f"\n{title} (ms)")
        print(f"  {'target':<16}{'p50':>9}{'p99':>9}{'added p50':>12}{'added p99':>12}")
        base_rounds: list[list[float]] = getattr(direct, kind)
        base_all = [v for r in base_rounds for v in r]
        for target in targets:
            rounds_of: list[list[float]] = getattr(target, kind)
            every = [v for r in rounds_of for v in r]
            added = statistics.median(
                statistics.median(t) - statistics.median(b)
                for t, b in zip(rounds_of, base_rounds, strict=True)
            )
            added_p99 = _p(every, 99) - _p(base_all, 99)
            extra = "" if target is direct else f"{added:>12.3f}{added_p99:>12.3f}"
            print(
                f"  {target.name:<16}{statistics.median(every):>9.3f}{_p(every, 99):>9.3f}{extra}"
            )
    print("\nproxy CPU time per call (user + system, plain and streamed alike; load-insensitive)")
    for target in targets[1:]:
        print(f"  {target.name:<16}{target.cpu_s / max(target.calls, 1) * 1000:>9.3f} ms")
    print(f"\nrequests/s, plain, {CONCURRENCY} concurrent clients, one worker")
    for name, value in rps.items():
        print(f"  {name:<16}{value:>9.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--per-round", type=int, default=40)
    parser.add_argument("--rps-seconds", type=float, default=4.0)
    parser.add_argument("--litellm", default="/tmp/litellm-venv/bin/litellm")
    parser.add_argument("--baseline-src", type=Path, help="a source tree to compare against")
    args = parser.parse_args()
    replies = {
        "plain": fixture("openai_chat_cached_real.json"),
        "stream": fixture("openai_stream_include_usage_real.sse"),
    }
    with instant_server(replies) as upstream, tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        direct = f"{upstream}/plain/v1/chat/completions"
        stream = f"{upstream}/stream/v1/chat/completions"
        targets = [Target("direct", direct, {}, "gpt-4o-mini", "gpt-4o-mini", stream)]
        with contextlib.ExitStack() as stack:
            auth = {"authorization": f"Bearer {KEY}"}
            sources: list[tuple[str, Path | None]] = [("ledger gateway", None)]
            if args.baseline_src is not None:
                sources.append(("baseline gateway", args.baseline_src.resolve()))
            for n, (name, src) in enumerate(sources):
                gw, gw_pid = stack.enter_context(gateway(upstream, workdir / f"gw{n}", src))
                targets.append(
                    Target(
                        name,
                        f"{gw}/v1/chat/completions",
                        auth,
                        "openai/gpt-4o-mini",
                        "groq/gpt-4o-mini",
                        pid=gw_pid,
                    )
                )
            lite = shutil.which(args.litellm) or (
                args.litellm if Path(args.litellm).exists() else None
            )
            with optional_litellm(lite, upstream, workdir) as found:
                if found is not None:
                    lite_url, lite_pid = found
                    targets.append(
                        Target(
                            "litellm proxy",
                            f"{lite_url}/v1/chat/completions",
                            {"authorization": f"Bearer {LITELLM_KEY}"},
                            "plain",
                            "stream",
                            pid=lite_pid,
                        )
                    )
                elif lite is None:
                    print(f"LiteLLM not measured: no proxy executable at {args.litellm}")
                measure(targets, args.rounds, args.per_round)
                rps = {t.name: asyncio.run(_rps(t, args.rps_seconds)) for t in targets}
        report(targets, rps)


@contextmanager
def optional_litellm(
    executable: str | None, upstream: str, workdir: Path
) -> Iterator[tuple[str, int] | None]:
    """LiteLLM's proxy if it is installed and starts; None (with the reason printed) if not."""
    if executable is None:
        yield None
        return
    try:
        cm = litellm(executable, upstream, workdir)
        url = cm.__enter__()
    except RuntimeError as exc:
        print(f"LiteLLM not measured: {exc}")
        yield None
        return
    try:
        yield url
    finally:
        cm.__exit__(None, None, None)


if __name__ == "__main__":
    main()
