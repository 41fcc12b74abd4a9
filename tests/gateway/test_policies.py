"""The gateway applies the routing policy in the ledger's database to OpenRouter calls."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path

import openai
from sqlalchemy import select

from ledger.gateway import GatewayApp, parse_config
from ledger.policies import start_policy
from ledger.schema import token_usage
from ledger.store.engine import make_engine
from ledger.store.ledger import Ledger
from tests.gateway.conftest import KEY, Served, config_table
from tests.llm_loopback import LoopbackLLM, Reply

MODEL = "anthropic/claude-sonnet-4.6"
REPLY = "openrouter_chat_anthropic_cache_read_write.json"


def test_the_gateway_sends_each_sessions_arm_and_records_it(
    loopback: LoopbackLLM,
    serve_app: Callable[[GatewayApp], Served],
    sqlite_url: str,
    tmp_path: Path,
) -> None:
    engine = make_engine(sqlite_url)
    policy_id = start_policy(
        engine, model=MODEL, provider={"ignore": ["amazon-bedrock"]}, holdout_share=0.5,
        by="t", reason=None, now=dt.datetime.now(dt.UTC),
    )  # fmt: skip
    url = loopback.url
    sessions = [f"s-{i}" for i in range(10)]
    loopback.queue(*(Reply.payload(REPLY) for _ in sessions))
    with Ledger(sqlite_url, journal_dir=tmp_path / "j") as led:
        served = serve_app(
            GatewayApp(parse_config(config_table(url + "/v1", url, url + "/api/v1")), led)
        )
        with openai.OpenAI(api_key=KEY, base_url=served.url + "/v1", max_retries=0) as chat:
            for s in sessions:
                chat.chat.completions.create(
                    model=f"openrouter/{MODEL}",
                    messages=[{"role": "user", "content": "Hi"}],
                    extra_headers={"x-session-id": s},
                )
        assert led.flush()
    with engine.connect() as conn:
        rows = conn.execute(select(token_usage).order_by(token_usage.c.id)).mappings().all()
    engine.dispose()
    by_session = {r["session_id"]: r for r in rows}
    for request in loopback.requests:
        row = by_session[request.headers.get("x-session-id") or _session_of(request.body)]
        assert row["policy_id"] == policy_id
        sent = request.body.get("provider", {})
        assert ("ignore" in sent) == (row["arm"] == "treatment")
    assert {r["arm"] for r in rows} == {"treatment", "holdout"}


def _session_of(body: dict[str, object]) -> str:
    key = str(body["session_id"])  # the ADR-0221 key: <prefix>:<session>:<agent>
    return key.split(":")[1]
