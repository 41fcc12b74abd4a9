"""``ledger otel export`` (replay history to a collector) and ``ledger otlp`` (the receiver)."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
from click.testing import CliRunner

from ledger.cli import cli
from ledger.otel.serve import serve_in_thread
from ledger.simulator.server import free_port
from ledger.store.ledger import Ledger
from tests.analytics.builders import migrated_sqlite
from tests.otel.helpers import T0, events, rows_by_event, wait_for
from tests.otel.test_export import comparable
from tests.otel.test_receiver import THREE


def _history(url: str, tmp_path: Path) -> None:
    with Ledger(url, journal_dir=tmp_path / "history", exporters=()) as ledger:
        for event in events(12):
            ledger.record(event)
        assert ledger.flush()


def test_export_replays_history_as_spans_the_receiver_turns_back_into_the_rows(
    ledger_url: str, tmp_path: Path
) -> None:
    source_url = migrated_sqlite(tmp_path / "source.db")
    _history(source_url, tmp_path)
    since = (T0 + dt.timedelta(seconds=4)).isoformat()
    with (
        Ledger(ledger_url, journal_dir=tmp_path / "sink", exporters=()) as sink,
        serve_in_thread(sink) as (receiver_url, _),
    ):
        result = CliRunner().invoke(
            cli,
            ["otel", "export", "--since", since, "--endpoint", receiver_url],
            env={"LEDGER_DATABASE_URL": source_url},
        )
        assert result.exit_code == 0, result.output
        assert result.output.strip() == f"8 row(s) sent to {receiver_url} as GenAI spans"
        assert sink.flush(timeout=60)
    original = {
        k: r
        for k, r in rows_by_event(source_url).items()
        if r["started_at"] >= T0 + dt.timedelta(seconds=4)
    }
    assert comparable(rows_by_event(ledger_url)) == comparable(original)


def test_export_to_an_unreachable_collector_fails_with_exit_1(
    sqlite_url: str, tmp_path: Path
) -> None:
    _history(sqlite_url, tmp_path)
    dead = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    result = CliRunner().invoke(
        cli,
        ["otel", "export", "--since", "all", "--endpoint", dead, "--timeout", "3"],
        env={"LEDGER_DATABASE_URL": sqlite_url},
    )
    # --timeout is the whole wait (closing once waited 5 s more, past any --timeout).
    assert time.monotonic() - started < 7
    assert result.exit_code == 1
    assert f"12 row(s) built, not all reached {dead}" in result.output
    assert len(rows_by_event(sqlite_url)) == 12  # a read command changes nothing


def test_otlp_serves_the_receiver_until_interrupted(sqlite_url: str, tmp_path: Path) -> None:
    port = free_port()
    env = {
        **os.environ,
        "LEDGER_DATABASE_URL": sqlite_url,
        "LEDGER_JOURNAL_DIR": str(tmp_path / "j"),
        "PYTHONUNBUFFERED": "1",
    }
    process = subprocess.Popen(
        [str(Path(sys.executable).parent / "ledger"), "otlp", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = f"http://127.0.0.1:{port}/v1/traces"

        def accepted() -> bool:
            try:
                response = httpx.post(
                    url, content=json.dumps(THREE), headers={"content-type": "application/json"}
                )
            except httpx.TransportError:
                return False
            return response.status_code == 200

        assert wait_for(accepted, timeout=60)
    finally:
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert f"OTLP/HTTP receiver on http://127.0.0.1:{port}/v1/traces" in out
    stats = json.loads(out.strip().splitlines()[-1])
    assert stats["recorded"] == 3
    assert len(rows_by_event(sqlite_url)) == 3
