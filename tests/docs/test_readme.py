"""Every Python example in the README runs, as written and in order, against the simulator.

Each block is run after the blocks above it in one namespace, as a reader pasting
them into one session would, in a fresh directory with its own ledger (never the
demo's ``ledger.db``) and the simulator standing in for every provider, reached
through the base-URL variables the README tells readers to set. A block preceded by
``<!-- docs: fragment -->`` is only a piece of a larger program: it is compiled,
not run.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import select

from ledger.schema import token_usage
from ledger.simulator import Simulator, VirtualClock, serve_in_thread
from ledger.store.engine import make_engine
from ledger.store.migrate import upgrade

ROOT = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).with_name("run_blocks.py")
FENCE = re.compile(r"^```(\w*)\s*$")
FRAGMENT = "<!-- docs: fragment -->"


@dataclass(frozen=True)
class Block:
    lang: str
    line: int  # the first line of its code
    code: str
    fragment: bool


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of ``path``, each with its language and whether it is a fragment."""
    lines = path.read_text().splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        opened = FENCE.match(lines[index])
        if opened is None:
            index += 1
            continue
        end = next(i for i in range(index + 1, len(lines)) if lines[i].startswith("```"))
        before = next((lines[i] for i in range(index - 1, -1, -1) if lines[i].strip()), "")
        code = "\n".join(lines[index + 1 : end]) + "\n"
        found.append(Block(opened.group(1), index + 2, code, before.strip() == FRAGMENT))
        index = end + 1
    return found


PYTHON = [b for b in blocks(ROOT / "README.md") if b.lang == "python"]


@pytest.fixture(scope="module")
def simulator() -> Iterator[str]:
    with serve_in_thread(Simulator(clock=VirtualClock(), seed=3)) as url:
        yield url


def test_every_fragment_compiles() -> None:
    for block in PYTHON:
        if block.fragment:
            compile(block.code, f"README.md:{block.line}", "exec")


@pytest.mark.slow  # the lake block starts Spark
@pytest.mark.timeout(
    900
)  # every README block in order, Spark included: minutes on a loaded machine
def test_the_python_examples_run_in_order(simulator: str, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'examples.db'}"
    engine = make_engine(url)
    upgrade(engine)
    engine.dispose()
    runnable = [{"line": b.line, "code": b.code} for b in PYTHON if not b.fragment]
    spec = tmp_path / "blocks.json"
    spec.write_text(json.dumps(runnable))
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "LEDGER_DATABASE_URL": url,
        "LEDGER_ANALYTICS_PATH": str(tmp_path / "examples.duckdb"),
        "OPENROUTER_BASE_URL": simulator + "/api/v1",
        "OPENROUTER_API_BASE": simulator + "/api/v1",  # LiteLLM's name for it
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no price map fetched from the internet
        "OPENAI_BASE_URL": simulator + "/v1",
        "ANTHROPIC_BASE_URL": simulator,
        "OPENROUTER_API_KEY": "sim",
        "OPENAI_API_KEY": "sim",
        "ANTHROPIC_API_KEY": "sim",
    }
    done = subprocess.run(
        [sys.executable, str(CHILD), str(spec)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    ran = [line for line in done.stdout.splitlines() if line.endswith(": ok")]
    assert len(ran) == len(runnable)
    # the recipes' calls were recorded, each with the session the example set
    engine = make_engine(url)
    with engine.connect() as conn:
        recorded = set(
            conn.execute(
                select(token_usage.c.requested_model, token_usage.c.session_id).distinct()
            ).all()
        )
    engine.dispose()
    assert {("gpt-4o-mini", "s-42"), ("qwen/qwen3-coder", "s-42")} <= recorded
    assert ("deepseek/deepseek-chat", None) in recorded  # the event recorded directly
