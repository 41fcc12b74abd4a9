"""The README's OpenAI Agents SDK recipe, run as written in a fresh process against the
simulator: it records its call and says nothing on stderr, at exit included.

The Agents SDK sends each run's trace to api.openai.com with ``OPENAI_API_KEY``,
whatever base URL the model's client uses; against anything else (the simulator
here, the gateway, a machine without internet) every batch failed and
``[non-fatal] Tracing request failed`` was printed three times at exit. The recipe
turns that tracing off; the second test shows what it prevents.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import select

from ledger.schema import token_usage
from ledger.store.engine import make_engine
from ledger.store.migrate import upgrade
from tests.docs.test_readme import PYTHON

ROOT = Path(__file__).resolve().parents[2]
(RECIPE,) = [b.code for b in PYTHON if "OpenAIChatCompletionsModel" in b.code]
Server = tuple[object, str]


def run(code: str, simulator: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], str]:
    url = f"sqlite:///{tmp_path / 'agents.db'}"
    engine = make_engine(url)
    upgrade(engine)
    engine.dispose()
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "LEDGER_DATABASE_URL": url,
        "OPENAI_BASE_URL": simulator + "/v1",
        "OPENAI_API_KEY": "sim",
    }
    env.pop("OPENAI_AGENTS_DISABLE_TRACING", None)
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return done, url


def recorded(url: str) -> list[tuple[str | None, str | None]]:
    engine = make_engine(url)
    with engine.connect() as conn:
        found = conn.execute(select(token_usage.c.session_id, token_usage.c.actor_id)).all()
    engine.dispose()
    return [(s, a) for s, a in found]


def test_the_recipe_records_its_call_and_exits_quietly(sim_server: Server, tmp_path: Path) -> None:
    done, url = run(RECIPE, sim_server[1], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert recorded(url) == [("s-42", "reviewer")]


@pytest.mark.slow  # the SDK's exporter retries with backoff before it gives up
def test_without_the_tracing_line_the_sdk_complains_at_exit(
    sim_server: Server, tmp_path: Path
) -> None:
    assert "set_tracing_disabled(True)\n" in RECIPE
    done, url = run(RECIPE.replace("set_tracing_disabled(True)\n", ""), sim_server[1], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "[non-fatal] Tracing" in done.stderr
    assert recorded(url) == [("s-42", "reviewer")]  # the rows never depended on it
