"""Simulator throughput through the in-process httpx transport (target: a 10,000-call
demo in < 60 s on 2 cores, so the simulator's share must be a small part of that).

Workload: multi-turn agent sessions against OpenRouter (half with session_id),
OpenAI and Anthropic, a third of calls streamed, on a virtual clock with idle
gaps. Baseline, measured in the same run: the same requests through
``httpx.MockTransport`` returning a canned body (httpx's own cost per call).

    .venv/bin/python bench/bench_simulator.py [--calls 10000]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx

from ledger.simulator import Simulator, SimulatorTransport, VirtualClock

AGENTS = {
    "planner": "You are the planner agent. Tools: search, read, write. " * 60,
    "coder": "You are the coder agent. Tools: edit, run_tests, diff. " * 80,
    "reviewer": "You are the reviewer agent. Tools: comment, approve. " * 40,
}
TARGETS = [
    ("/api/v1/chat/completions", "qwen/qwen3-coder"),
    ("/api/v1/chat/completions", "openai/gpt-4o-mini"),
    ("/api/v1/chat/completions", "anthropic/claude-sonnet-4.5"),
    ("/v1/chat/completions", "gpt-4o-mini"),
    ("/v1/messages", "claude-haiku-4-5-20251001"),
]
CANNED = json.dumps({"id": "x", "choices": [{"message": {"content": "ok"}}], "usage": {}}).encode()


def requests(calls: int) -> Iterator[tuple[str, dict[str, Any]]]:
    n = 0
    session = 0
    while n < calls:
        session += 1
        agent = list(AGENTS)[session % 3]
        path, model = TARGETS[session % len(TARGETS)]
        history: list[dict[str, Any]] = []
        for turn in range(8):
            history = [*history, {"role": "user", "content": f"task {session} turn {turn}"}]
            body: dict[str, Any] = {"model": model, "messages": history, "stream": n % 3 == 0}
            if path == "/v1/messages":
                body["system"] = [
                    {"type": "text", "text": AGENTS[agent], "cache_control": {"type": "ephemeral"}}
                ]
                body["max_tokens"] = 400
            else:
                body["messages"] = [{"role": "system", "content": AGENTS[agent]}, *history]
                if session % 2:
                    body["session_id"] = f"demo:{session}:{agent}"
            yield path, body
            history.append({"role": "assistant", "content": "done step " * 20})
            n += 1
            if n >= calls:
                return


def run(client: httpx.Client, calls: int, clock: VirtualClock | None) -> tuple[float, int]:
    start = time.perf_counter()
    ok = 0
    for i, (path, body) in enumerate(requests(calls)):
        if clock is not None and i % 40 == 39:
            clock.advance(900)  # an idle gap longer than the pin window
        if body.get("stream"):
            with client.stream("POST", path, json=body) as response:
                for _ in response.iter_lines():
                    pass
        else:
            response = client.post(path, json=body)
            response.read()
        ok += response.status_code == 200
    return time.perf_counter() - start, ok


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=10_000)
    calls = parser.parse_args().calls
    headers = {"authorization": "Bearer k", "x-api-key": "k"}
    mock = httpx.MockTransport(lambda request: httpx.Response(200, content=CANNED))
    with httpx.Client(transport=mock, base_url="http://sim", headers=headers) as client:
        base_s, _ = run(client, calls, None)
    clock = VirtualClock()
    sim = Simulator(clock=clock, seed=1)
    with httpx.Client(
        transport=SimulatorTransport(sim), base_url="http://sim", headers=headers
    ) as client:
        sim_s, ok = run(client, calls, clock)
    print(f"calls                      {calls}")
    print(f"baseline (MockTransport)   {base_s:7.2f} s  {calls / base_s:8.0f} calls/s")
    print(f"simulator (in-process)     {sim_s:7.2f} s  {calls / sim_s:8.0f} calls/s  ({ok} x 200)")
    print(f"simulator / baseline       {sim_s / base_s:7.2f} x")
    print(
        f"simulator per call         {sim_s / calls * 1000:7.3f} ms"
        "  (a 10k-call demo in 60 s allows 6 ms per call, all in)"
    )
    print(f"virtual time covered       {(clock.time() - 1_735_689_600) / 3600:7.1f} h")


if __name__ == "__main__":
    main()
