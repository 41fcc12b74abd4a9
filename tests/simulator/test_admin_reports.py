"""The simulator's admin cost and usage reports: what it served, in pages, behind a key."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

from ledger.simulator import Simulator, VirtualClock
from ledger.simulator.http import handle

NOON = dt.datetime(2025, 3, 10, 12, tzinfo=dt.UTC)


def _served(service: str) -> Simulator:
    sim = Simulator(clock=VirtualClock(NOON.timestamp()), seed=2)
    model = sorted(sim.catalog.pools(service))[0]
    for i in range(3):
        if service == "openai":
            body = {"model": model, "messages": [{"role": "user", "content": f"q{i}"}]}
            reply = handle(
                sim,
                "POST",
                "/v1/chat/completions",
                {"authorization": "Bearer a"},
                json.dumps(body).encode(),
            )
        else:
            body = {
                "model": model,
                "max_tokens": 64,
                "messages": [{"role": "user", "content": f"q{i}"}],
            }
            reply = handle(
                sim, "POST", "/v1/messages", {"x-api-key": "a"}, json.dumps(body).encode()
            )
        assert reply.status == 200
    return sim


def _get(sim: Simulator, path: str, query: str, headers: dict[str, str]) -> tuple[int, dict]:
    reply = handle(sim, "GET", path, headers, b"", query)
    return reply.status, json.loads(reply.body)


def test_openai_costs_page_by_day_and_bill_what_was_served() -> None:
    sim = _served("openai")
    start = int(dt.datetime(2025, 3, 1, tzinfo=dt.UTC).timestamp())
    query = f"start_time={start}&limit=7&group_by=line_item"
    status, first = _get(sim, "/v1/organization/costs", query, {"authorization": "Bearer k"})
    assert status == 200 and first["has_more"] is True and len(first["data"]) == 7
    status, second = _get(
        sim,
        "/v1/organization/costs",
        f"{query}&page={first['next_page']}",
        {"authorization": "Bearer k"},
    )
    assert status == 200 and second["has_more"] is False
    days = [b for b in second["data"] if b["results"]]
    assert [dt.datetime.fromtimestamp(b["start_time"], dt.UTC).date() for b in days] == [
        NOON.date()
    ]
    items = {r["line_item"].split(", ")[1] for r in days[0]["results"]}
    assert items == {"input", "output"}
    total = sum(Decimal(str(r["amount"]["value"])) for r in days[0]["results"])
    status, usage = _get(
        sim,
        "/v1/organization/usage/completions",
        f"start_time={int(NOON.timestamp())}&group_by=model",
        {"authorization": "Bearer k"},
    )
    (line,) = usage["data"][0]["results"]
    assert line["num_model_requests"] == 3 and total > 0


def test_anthropic_reports_need_the_admin_key_header_and_count_cents() -> None:
    sim = _served("anthropic")
    path = "/v1/organizations/cost_report"
    query = "starting_at=2025-03-10T00:00:00Z&group_by[]=description"
    assert _get(sim, path, query, {})[0] == 401
    status, page = _get(sim, path, query, {"x-api-key": "k"})
    assert status == 200
    cents = sum(Decimal(r["amount"]) for r in page["data"][0]["results"])
    status, usage = _get(
        sim,
        "/v1/organizations/usage_report/messages",
        "starting_at=2025-03-10T00:00:00Z&group_by[]=model",
        {"x-api-key": "k"},
    )
    (line,) = usage["data"][0]["results"]
    spec = sim.catalog.pools("anthropic")[line["model"]].upstreams[0]
    tokens_in = (
        line["uncached_input_tokens"]
        + line["cache_read_input_tokens"]
        + sum(line["cache_creation"].values())
    )
    want = (tokens_in * spec.input_per_mtok + line["output_tokens"] * spec.output_per_mtok) / 10**6
    assert cents / 100 == want  # no cache use here: the list price is the bill
