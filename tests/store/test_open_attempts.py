"""An attempt journaled when it starts is stored as ``interrupted`` if its process dies
before recording it: a provider's billed work is never missing from the ledger."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import openai
from sqlalchemy import select

import ledger
from ledger.events import REPAIRED_TAG
from ledger.schema import token_usage
from ledger.store.engine import make_engine
from ledger.store.ledger import Ledger, replay
from tests.llm_loopback import LoopbackLLM, Reply

from .attempt_child import attempt, event_id

CHILD = Path(__file__).with_name("attempt_child.py")
ROOT = Path(__file__).resolve().parents[2]
USER = [{"role": "user", "content": "Hi"}]


def rows(url: str) -> dict[str, tuple[str, str | None, str | None]]:
    """event_id -> (status, error_type, session_id) of every stored row."""
    engine = make_engine(url)
    columns = (token_usage.c.event_id, token_usage.c.status, token_usage.c.error_type)
    with engine.connect() as conn:
        found = conn.execute(select(*columns, token_usage.c.session_id)).all()
    engine.dispose()
    return {r[0]: (r[1], r[2], r[3]) for r in found}


def killed_child(*args: str) -> None:
    """Run attempt_child.py until it prints ``ready``, then SIGKILL it."""
    with subprocess.Popen(
        [sys.executable, str(CHILD), *args],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    ) as child:
        try:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "ready"
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(30)


def test_a_killed_process_leaves_its_open_attempt_as_one_interrupted_row(
    ledger_url: str, tmp_path: Path
) -> None:
    journal_dir = tmp_path / "journal"
    killed_child(ledger_url, str(journal_dir), "journal")
    result = replay(ledger_url, journal_dir=journal_dir)
    stored = rows(ledger_url)
    assert stored[event_id("A")] == ("error", "interrupted", "s-A")
    # closed before the kill (C at once, B after being carried across rotations): as recorded
    assert stored[event_id("B")] == ("ok", None, "s-B")
    assert stored[event_id("C")] == ("ok", None, "s-C")
    assert len(stored) == 403 and result.dead_lettered == 0
    assert [s for s in stored.values() if s[1] == "interrupted"] == [stored[event_id("A")]]
    again = replay(ledger_url, journal_dir=journal_dir)
    assert (again.events, len(rows(ledger_url))) == (0, 403)


def test_a_client_stream_killed_mid_body_is_stored_as_interrupted(
    server: LoopbackLLM, sqlite_url: str, tmp_path: Path
) -> None:
    server.queue(Reply.payload("openrouter_stream_openai_o3.sse", chunk_size=4096, delay_s=1.0))
    journal_dir = tmp_path / "journal"
    killed_child(sqlite_url, str(journal_dir), "client", server.url + "/api/v1")
    with Ledger(sqlite_url, journal_dir=journal_dir) as led:  # a new process's ledger replays
        assert led.flush()
    engine = make_engine(sqlite_url)
    with engine.connect() as conn:
        row = conn.execute(select(token_usage)).one()
    engine.dispose()
    assert (row.status, row.error_type, row.streamed) == ("error", "interrupted", True)
    assert (row.session_id, row.actor_id, row.requested_model) == (
        "s-killed",
        "reviewer",
        "openai/o3",
    )
    assert row.session_key is not None  # what was sent is known: the sticky key
    assert (row.cost_usd, row.usage_reported) == (None, False)  # unknown, never 0


def test_closing_with_an_attempt_still_open_stores_it_as_interrupted(
    sqlite_url: str, tmp_path: Path
) -> None:
    with Ledger(sqlite_url, journal_dir=tmp_path / "journal") as led:
        led.begin_attempt(attempt("open", status="interrupted"))
        led.begin_attempt(attempt("done", status="interrupted"))
        led.record(attempt("done"))
    stored = rows(sqlite_url)
    assert stored == {
        event_id("open"): ("error", "interrupted", "s-open"),
        event_id("done"): ("ok", None, "s-done"),
    }


def test_an_open_attempt_with_a_value_its_row_cannot_hold_is_stored_repaired(
    sqlite_url: str, tmp_path: Path
) -> None:
    with Ledger(sqlite_url, journal_dir=tmp_path / "journal") as led:
        led.begin_attempt(attempt("long", status="interrupted", requested_model="m" * 300))
    engine = make_engine(sqlite_url)
    with engine.connect() as conn:
        row = conn.execute(select(token_usage)).one()
    engine.dispose()
    assert (row.status, row.error_type) == ("error", "interrupted")
    assert row.requested_model == "m" * 256 and row.tags == {REPAIRED_TAG: "requested_model"}


def test_the_sdk_transport_journals_each_attempt_it_sends(
    server: LoopbackLLM, sqlite_url: str, tmp_path: Path
) -> None:
    """The metering transport (and the gateway, which records through it) journals an
    attempt as it goes out: a ledger closed mid-stream stores it as interrupted."""
    server.queue(Reply.payload("openrouter_stream_openai_o3.sse", chunk_size=4096))
    led = Ledger(sqlite_url, journal_dir=tmp_path / "journal")
    http = ledger.httpx_client(ledger=led, strict=False)
    with openai.OpenAI(api_key="sk-x", base_url=server.url + "/api/v1", http_client=http) as sdk:
        stream = sdk.chat.completions.create(model="openai/o3", messages=USER, stream=True)
        next(iter(stream))
        led.close()
        stream.close()
    ((status, error_type, _),) = rows(sqlite_url).values()
    assert (status, error_type) == ("error", "interrupted")
