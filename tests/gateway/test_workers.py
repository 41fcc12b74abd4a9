"""Several gateway workers share one rate-limit window and one response cache through
Redis (``redis_url``), as ``ledger gateway --workers N`` runs them."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import openai
import pytest
import redis

from ledger.gateway import GatewayApp, create_app, parse_config
from ledger.simulator import Simulator
from tests.gateway.conftest import KEY, Rows, Served, sim_table
from tests.resilience.conftest import redis_url  # noqa: F401  (the fixture: skips or fails in CI)

#: Unique per run: the shared cache outlives a test (its TTL), a question must not.
MESSAGES = [{"role": "user", "content": f"the same question {uuid.uuid4()}"}]


@pytest.fixture
def workers(
    sim: tuple[Simulator, str],
    serve_app: Callable[[GatewayApp], Served],
    rows: Rows,
    redis_url: str,  # noqa: F811
) -> Iterator[tuple[Served, Served]]:
    table = sim_table(sim[1], rate_limit="3/60s", response_cache=True, redis_url=redis_url)
    name = f"search-{uuid.uuid4().hex[:8]}"  # a fresh limiter key in the shared Redis
    table["keys"] = {name: table["keys"]["search"]}
    one, two = (serve_app(create_app(parse_config(table), rows, strict=True)) for _ in range(2))
    yield one, two
    client = redis.Redis.from_url(redis_url)
    for key in client.scan_iter(f"ledger:gateway:*{name}*"):
        client.delete(key)
    client.close()


def test_two_workers_share_the_limit_and_the_cache(
    workers: tuple[Served, Served], rows: Rows
) -> None:
    first, second = (
        openai.OpenAI(api_key=KEY, base_url=w.url + "/v1", max_retries=0) for w in workers
    )
    with first, second:
        a = first.chat.completions.with_raw_response.create(model="gpt-4o-mini", messages=MESSAGES)  # type: ignore[arg-type]
        b = second.chat.completions.with_raw_response.create(model="gpt-4o-mini", messages=MESSAGES)  # type: ignore[arg-type]
        first.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)  # type: ignore[arg-type]
        with pytest.raises(openai.RateLimitError):  # the 4th request in the window, either worker
            second.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)  # type: ignore[arg-type]
    assert (a.headers["x-ledger-cache"], b.headers["x-ledger-cache"]) == ("miss", "hit")
    assert [e.response_cache_hit for e in rows.wait(3)] == [False, True, True]
