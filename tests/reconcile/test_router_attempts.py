"""The upstreams OpenRouter's router tried inside a call, on the row: from the router
metadata at call time, else from the generation record by ``ledger reconcile openrouter``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ledger import Client
from ledger.providers.openai_compat import OpenRouterProvider
from ledger.simulator import Simulator, VirtualClock, serve_in_thread
from ledger.simulator.faults import Fault, FaultKind
from ledger.store.ledger import Ledger
from tests.analytics.builders import insert_rows
from tests.llm_loopback import LoopbackLLM, Reply
from tests.reconcile.test_openrouter import _openrouter_row, _reconcile, _rows
from tests.simulator.conftest import MODEL, catalog_of, upstream

#: The real generation record's one entry (tests/fixtures/payloads/billing/…_real.json).
REAL = [{"upstream": "DeepInfra", "status": 200, "latency_ms": 420.0}]


def test_a_row_without_attempts_learns_them_from_provider_responses(ledger_url: str) -> None:
    known = [{"upstream": "Groq", "status": 200, "latency_ms": None}]
    # Apart: insert_rows gives a row every key, and a bound None is JSON null, not NULL.
    insert_rows(ledger_url, [_openrouter_row()])
    insert_rows(ledger_url, [_openrouter_row(generation_id="gen-2", router_attempts=known)])
    with LoopbackLLM() as server:
        server.default = Reply.payload("billing/openrouter_generation_real.json")
        report = _reconcile(ledger_url, server.url, max_ratio_off=True)
        assert report.billed == 1  # gen-2's answer names another generation: not stored
        first, second = _rows(ledger_url)
        assert first.router_attempts == REAL
        assert second.router_attempts == known
        # --refetch replaces the bill, never what the call itself was told.
        _reconcile(ledger_url, server.url, refetch=True)
        assert _rows(ledger_url)[0].router_attempts == REAL


def test_a_generation_without_provider_responses_leaves_null(ledger_url: str) -> None:
    insert_rows(ledger_url, [_openrouter_row()])
    real = Path(__file__).resolve().parents[1] / "fixtures/payloads/billing"
    data = json.loads((real / "openrouter_generation_real.json").read_text())
    data["data"]["provider_responses"] = None  # as in the OpenAPI example
    with LoopbackLLM() as server:
        server.default = Reply(json.dumps(data).encode())
        assert _reconcile(ledger_url, server.url).billed == 1
    (stored,) = _rows(ledger_url)
    assert stored.billed_at is not None and stored.router_attempts is None  # SQL NULL


def _calls(url: str, ledger: Ledger, *, router_metadata: bool, stream: bool) -> None:
    provider = OpenRouterProvider(
        api_key="sk-or-test", base_url=f"{url}/api/v1", router_metadata=router_metadata
    )
    with Client(providers=[provider], ledger=ledger, default_provider="openrouter") as client:
        for i in range(3):
            messages = [{"role": "user", "content": f"q{i}"}]
            if stream:
                with client.stream(messages, model=MODEL, routing_order=["a", "b"]) as s:
                    for _ in s:
                        pass
            else:
                client.chat(messages, model=MODEL, routing_order=["a", "b"])


def _fallback_sim() -> Simulator:
    sim = Simulator(catalog_of(upstream("A", "1"), upstream("B", "3")), clock=VirtualClock())
    # A fails every call: OpenRouter falls back to B inside each one.
    sim.faults.add(Fault(FaultKind.SERVER_ERROR, "openrouter", upstream="A", count=None))
    return sim


def _attempts(row: Any) -> list[tuple[str, int]]:
    return [(a["upstream"], a["status"]) for a in row.router_attempts]


def test_the_client_records_the_fallbacks_the_simulator_reports(
    ledger_url: str, tmp_path: Path
) -> None:
    sim = _fallback_sim()
    with serve_in_thread(sim) as url:
        ledger = Ledger(ledger_url, journal_dir=tmp_path / "journal")
        _calls(url, ledger, router_metadata=True, stream=False)
        _calls(url, ledger, router_metadata=True, stream=True)
        assert ledger.flush(30)
        ledger.close()
        rows = _rows(ledger_url)
        assert len(rows) == 6 and {r.upstream for r in rows} == {"B"}
        for r in rows:
            assert _attempts(r) == [("A", 500), ("B", 200)]
            # Router metadata gives no latency per attempt: unknown, not zero.
            assert [a["latency_ms"] for a in r.router_attempts] == [None, None]
        # Reconcile bills them and keeps what the call was told.
        assert _reconcile(ledger_url, f"{url}/api/v1").billed == 6
        assert all(r.router_attempts[1]["latency_ms"] is None for r in _rows(ledger_url))


def test_rows_made_without_the_header_learn_their_attempts_by_reconcile(
    ledger_url: str, tmp_path: Path
) -> None:
    sim = _fallback_sim()
    with serve_in_thread(sim) as url:
        ledger = Ledger(ledger_url, journal_dir=tmp_path / "journal")
        _calls(url, ledger, router_metadata=False, stream=True)
        assert ledger.flush(30)
        ledger.close()
        assert [r.router_attempts for r in _rows(ledger_url)] == [None] * 3
        report = _reconcile(ledger_url, f"{url}/api/v1")
    assert report.billed == 3
    for r in _rows(ledger_url):
        assert _attempts(r) == [("A", 500), ("B", 200)]
        failed, served = (a["latency_ms"] for a in r.router_attempts)
        # The failed try took its share of A's first-byte time (0.3 x 0.2 s, virtual).
        assert failed == 60.0 and served > 0
