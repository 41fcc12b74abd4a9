"""OpenRouter's routing semantics, as the docs quoted in ledger.simulator.routing state them."""

from __future__ import annotations

from collections import Counter
from decimal import Decimal

import httpx

from ledger.simulator import (
    Catalog,
    Fault,
    FaultKind,
    Latency,
    ModelPool,
    Simulator,
    SimulatorTransport,
    VirtualClock,
)
from ledger.simulator.routing import PIN_IDLE_S

from .conftest import MODEL, Chat, catalog_of, upstream

SHORT_SYSTEM = "Be brief."


def test_explicit_key_pins_from_the_first_success_even_without_cache(five_equal: Chat) -> None:
    # A short prompt never reaches the cache minimum, so only the key can pin it.
    served = {
        five_equal.upstream_of(
            five_equal.body(f"step {i}", SHORT_SYSTEM, session_id="app:s1:planner")
        )
        for i in range(6)
    }
    assert len(served) == 1
    assert five_equal.sim.pin(MODEL, "app:s1:planner", account=_account()) == served.pop()


def test_without_key_calls_spread_and_never_pin_when_nothing_is_cached(five_equal: Chat) -> None:
    served = [five_equal.upstream_of(five_equal.body("same task", SHORT_SYSTEM)) for _ in range(12)]
    assert len(set(served)) >= 3


def test_without_key_the_pin_starts_only_after_a_cache_hit(five_equal: Chat) -> None:
    body = five_equal.body("same opening message")
    first_hit = None
    served = []
    for i in range(40):
        response = five_equal.post(body).json()
        served.append(response["provider"])
        if response["usage"]["prompt_tokens_details"]["cached_tokens"] > 0:
            first_hit = i
            break
    assert first_hit is not None and first_hit > 0, (
        "the first call of a prompt cannot hit the cache"
    )
    after = {five_equal.upstream_of(body) for _ in range(8)}
    assert after == {served[-1]}


def test_header_and_prompt_cache_key_are_sticky_keys_too(five_equal: Chat) -> None:
    headers = {"x-session-id": "hdr-key"}
    served = {
        five_equal.post(five_equal.body(f"h{i}", SHORT_SYSTEM), headers=headers).json()["provider"]
        for i in range(6)
    }
    assert len(served) == 1
    served = {
        five_equal.upstream_of(five_equal.body(f"p{i}", SHORT_SYSTEM, prompt_cache_key="pck"))
        for i in range(6)
    }
    assert len(served) == 1


def test_no_pin_where_cache_reads_cost_as_much_as_prompt_tokens(clock: VirtualClock) -> None:
    ups = [upstream(f"N{i}", read="1") for i in range(3)] + [upstream("Plain", read=None)]
    chat = Chat(Simulator(catalog_of(*ups), clock=clock, seed=3))
    served = [chat.upstream_of(chat.body(f"s{i}", SHORT_SYSTEM, session_id="k")) for i in range(12)]
    assert len(set(served)) >= 2
    assert chat.sim.pin(MODEL, "k", account=_account()) is None


def test_pin_expires_after_ten_idle_minutes(five_equal: Chat, clock: VirtualClock) -> None:
    body = five_equal.body("x", SHORT_SYSTEM, session_id="idle")
    pinned = five_equal.upstream_of(body)
    clock.advance(PIN_IDLE_S - 5)
    assert five_equal.sim.pin(MODEL, "idle", account=_account()) == pinned
    assert five_equal.upstream_of(body) == pinned  # a success resets the timer
    clock.advance(PIN_IDLE_S - 5)
    assert five_equal.sim.pin(MODEL, "idle", account=_account()) == pinned
    clock.advance(10)
    assert five_equal.sim.pin(MODEL, "idle", account=_account()) is None


def test_idle_release_lets_sessions_land_elsewhere(five_equal: Chat, clock: VirtualClock) -> None:
    moved = 0
    for s in range(20):
        body = five_equal.body("x", SHORT_SYSTEM, session_id=f"sess-{s}")
        before = five_equal.upstream_of(body)
        clock.advance(PIN_IDLE_S + 1)
        moved += five_equal.upstream_of(body) != before
    assert moved >= 8  # five equal upstreams: a fresh draw moves about 4 in 5


def test_error_on_pinned_upstream_reroutes_without_moving_the_pin(five_equal: Chat) -> None:
    body = five_equal.body("x", SHORT_SYSTEM, session_id="err")
    pinned = five_equal.upstream_of(body)
    five_equal.sim.faults.add(Fault(FaultKind.SERVER_ERROR, "openrouter", upstream=pinned))
    rerouted = five_equal.upstream_of(body)
    assert rerouted != pinned
    assert five_equal.sim.pin(MODEL, "err", account=_account()) == pinned
    assert five_equal.upstream_of(body) == pinned


def test_provider_order_disables_pinning(five_equal: Chat) -> None:
    body = five_equal.body("x", SHORT_SYSTEM, session_id="ord", provider={"order": ["u3", "u1"]})
    assert five_equal.upstream_of(body) == "U3"
    five_equal.sim.faults.add(Fault(FaultKind.RATE_LIMIT, "openrouter", upstream="U3"))
    assert five_equal.upstream_of(body) == "U1"
    assert five_equal.upstream_of(body) == "U3"
    assert five_equal.sim.pin(MODEL, "ord", account=_account()) is None


def test_order_without_fallbacks_returns_the_upstream_error(five_equal: Chat) -> None:
    body = five_equal.body("x", SHORT_SYSTEM, provider={"order": ["u2"], "allow_fallbacks": False})
    five_equal.sim.faults.add(
        Fault(FaultKind.RATE_LIMIT, "openrouter", upstream="u2", retry_after_s=7)
    )
    response = five_equal.post(body)
    assert response.status_code == 429
    assert response.headers["retry-after"] == "7"
    assert response.json()["error"]["metadata"]["provider_name"] == "U2"


def test_only_and_ignore_restrict_the_upstreams(five_equal: Chat) -> None:
    only = {
        five_equal.upstream_of(
            five_equal.body(f"{i}", SHORT_SYSTEM, provider={"only": ["u1", "U4"]})
        )
        for i in range(20)
    }
    assert only == {"U1", "U4"}
    ignored = {
        five_equal.upstream_of(
            five_equal.body(f"{i}", SHORT_SYSTEM, provider={"ignore": ["u0", "u1"]})
        )
        for i in range(30)
    }
    assert ignored <= {"U2", "U3", "U4"}
    assert five_equal.post(five_equal.body(provider={"only": ["nobody"]})).status_code == 404


def test_default_routing_weights_upstreams_by_inverse_square_price(clock: VirtualClock) -> None:
    chat = Chat(Simulator(catalog_of(upstream("A", "1"), upstream("B", "2")), clock=clock, seed=11))
    served = Counter(chat.upstream_of(chat.body(f"task {i}", SHORT_SYSTEM)) for i in range(1000))
    assert 0.75 < served["A"] / 1000 < 0.85  # 1/1² : 1/2² = 4 : 1


def test_sort_by_price_always_starts_with_the_cheapest(clock: VirtualClock) -> None:
    ups = (upstream("A", "2"), upstream("B", "1.5"), upstream("C", "3"))
    chat = Chat(Simulator(catalog_of(*ups), clock=clock, seed=5))
    served = {
        chat.upstream_of(chat.body(f"{i}", SHORT_SYSTEM, provider={"sort": "price"}))
        for i in range(20)
    }
    assert served == {"B"}


def test_an_upstream_with_a_significant_outage_in_the_last_30_seconds_is_avoided(
    clock: VirtualClock,
) -> None:
    chat = Chat(Simulator(catalog_of(upstream("A", "1"), upstream("B", "3")), clock=clock, seed=2))
    chat.sim.faults.add(Fault(FaultKind.SERVER_ERROR, "openrouter", upstream="A", count=3))
    order_a = {"order": ["a"]}
    failed = [
        chat.upstream_of(chat.body(f"t{i}", SHORT_SYSTEM, provider=order_a)) for i in range(3)
    ]
    assert failed == ["B", "B", "B"]  # A failed three times of three: an outage
    failed_at = clock.time()
    # Short replies keep the 25 calls (each taking its virtual latency) inside 30 s.
    recent = {chat.upstream_of(chat.body(f"t{i}", SHORT_SYSTEM, max_tokens=1)) for i in range(25)}
    assert recent == {"B"}
    assert clock.time() - failed_at < 30
    clock.advance(31)
    later = Counter(chat.upstream_of(chat.body(f"u{i}", SHORT_SYSTEM)) for i in range(25))
    assert later["A"] > later["B"]


def test_one_failure_among_successes_is_no_outage(clock: VirtualClock) -> None:
    chat = Chat(Simulator(catalog_of(upstream("A", "1"), upstream("B", "3")), clock=clock, seed=2))
    chat.sim.faults.add(Fault(FaultKind.SERVER_ERROR, "openrouter", upstream="A"))
    assert chat.upstream_of(chat.body("t0", SHORT_SYSTEM, provider={"order": ["a"]})) == "B"
    # the next calls still go to A nine times in ten (1/1² : 1/3²): one failure avoids nothing
    served = Counter(
        chat.upstream_of(chat.body(f"t{i}", SHORT_SYSTEM, max_tokens=1)) for i in range(40)
    )
    assert served["A"] > 30


def test_sort_by_latency_follows_what_the_router_measured(clock: VirtualClock) -> None:
    # The catalog says A is quicker to first byte; a slow-first-byte fault makes it slow.
    ups = (
        upstream("A", "1", latency=Latency(0.2, 0.0, 100.0)),
        upstream("B", "1", latency=Latency(0.3, 0.0, 100.0)),
    )
    chat = Chat(Simulator(catalog_of(*ups), clock=clock, seed=3))
    by_latency = {"sort": "latency"}
    assert chat.upstream_of(chat.body("t0", SHORT_SYSTEM, provider=by_latency)) == "A"
    chat.sim.faults.add(
        Fault(FaultKind.SLOW_FIRST_BYTE, "openrouter", upstream="A", count=None, delay_s=5.0)
    )
    seen = [
        chat.upstream_of(chat.body(f"t{i}", SHORT_SYSTEM, provider=by_latency)) for i in range(3)
    ]
    assert seen[0] == "A" and seen[-1] == "B"  # measured slow, A is no longer first


def test_cached_tokens_only_when_the_same_upstream_saw_the_prefix_recently(
    five_equal: Chat, clock: VirtualClock
) -> None:
    def cached(name: str) -> int:
        body = five_equal.body("same task", provider={"only": [name]})
        details = five_equal.post(body).json()["usage"]["prompt_tokens_details"]
        return int(details["cached_tokens"])

    assert cached("u1") == 0
    assert cached("u2") == 0  # another upstream never saw the prefix
    assert cached("u1") > 0
    clock.advance(301)  # past the 5-minute cache TTL
    assert cached("u1") == 0
    assert cached("u1") > 0


def test_a_longer_conversation_reads_the_prefix_it_shares(five_equal: Chat) -> None:
    body = five_equal.body("turn 1", provider={"only": ["u0"]})
    first = five_equal.post(body).json()["usage"]
    body["messages"] += [
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "turn 2"},
    ]
    second = five_equal.post(body).json()["usage"]
    assert second["prompt_tokens_details"]["cached_tokens"] == first["prompt_tokens"]
    assert second["prompt_tokens"] > first["prompt_tokens"]


def test_usage_cost_is_the_charge_with_cache_discounts(clock: VirtualClock) -> None:
    spec = upstream(
        "W", "3", read="0.3", cache_write_per_mtok=Decimal("3.75"), requires_cache_control=True
    )
    chat = Chat(Simulator(catalog_of(spec), clock=clock, seed=1))
    body = chat.body("q", cache_control={"type": "ephemeral"})
    for expect_write in (True, False):
        usage = chat.post(body).json()["usage"]
        details = usage["prompt_tokens_details"]
        read, write = details["cached_tokens"], details["cache_write_tokens"]
        assert (write > 0) is expect_write and (read > 0) is not expect_write
        uncached = usage["prompt_tokens"] - read - write
        expected = (
            uncached * Decimal(3)
            + read * Decimal("0.3")
            + write * Decimal("3.75")
            + usage["completion_tokens"] * Decimal(6)
        ) / 1_000_000
        assert Decimal(str(usage["cost"])) == expected
        assert Decimal(str(usage["cost_details"]["upstream_inference_prompt_cost"])) == (
            expected - usage["completion_tokens"] * Decimal(6) / 1_000_000
        )


def test_without_cache_control_an_explicit_cache_upstream_caches_nothing(
    clock: VirtualClock,
) -> None:
    spec = upstream(
        "W", "3", read="0.3", cache_write_per_mtok=Decimal("3.75"), requires_cache_control=True
    )
    chat = Chat(Simulator(catalog_of(spec), clock=clock, seed=1))
    usages = [chat.post(chat.body("q")).json()["usage"]["prompt_tokens_details"] for _ in range(2)]
    assert all(u["cached_tokens"] == 0 and u["cache_write_tokens"] == 0 for u in usages)


def test_same_seed_same_routing(clock: VirtualClock) -> None:
    def run() -> list[str]:
        chat = Chat(
            Simulator(
                catalog_of(*(upstream(f"U{i}") for i in range(4))), clock=VirtualClock(), seed=42
            )
        )
        return [chat.upstream_of(chat.body(f"t{i}", SHORT_SYSTEM)) for i in range(30)]

    assert run() == run()


def _account() -> str:
    import hashlib

    return hashlib.blake2b(b"sk-or-test", digest_size=8).hexdigest()


def test_adr_smoke_shape_on_the_default_catalog(clock: VirtualClock) -> None:
    """ADR 0221's smoke test, at the wire: 6 of 6 on one upstream with the key; spread without."""
    chat = Chat(Simulator(clock=clock, seed=0))
    model = "qwen/qwen3-coder"
    system = "You are the triage agent. " * 200

    def served(first: str, **extra: object) -> str:
        body = {**chat.body(first, system), "model": model, **extra}
        return chat.upstream_of(body)

    keyed = {served(f"task {i}: triage issue {i}", session_id="app:s-42:triage") for i in range(6)}
    assert len(keyed) == 1
    spread = [len({served(f"run {r} task {i}") for i in range(6)}) for r in range(20)]
    assert sum(spread) / len(spread) >= 3.5  # the ADR saw 4 distinct upstreams in 6 calls


def test_midstream_error_from_the_pinned_upstream_keeps_the_pin(five_equal: Chat) -> None:
    body = five_equal.body("x", SHORT_SYSTEM, session_id="mid", stream=True)
    pinned = five_equal.upstream_of({**body, "stream": False})
    five_equal.sim.faults.add(Fault(FaultKind.MIDSTREAM_ERROR, "openrouter", upstream=pinned))
    text = five_equal.post(body).text
    assert '"finish_reason":"error"' in text
    assert five_equal.sim.pin(MODEL, "mid", account=_account()) == pinned


def test_ignore_keeps_sticky_routing_over_the_other_upstreams(five_equal: Chat) -> None:
    # ADR 0221 / issue 13: ignore drops an upstream; nothing in the docs turns stickiness off
    for s in range(8):
        key = f"app:ign{s}:planner"
        body = five_equal.body(f"task {s}", SHORT_SYSTEM, session_id=key,
                               provider={"ignore": ["u0"]})  # fmt: skip
        served = {five_equal.upstream_of(body) for _ in range(5)}
        assert len(served) == 1 and "U0" not in served
        assert five_equal.sim.pin(MODEL, key, account=_account()) == served.pop()


def test_order_sends_every_session_to_the_first_choice_whose_cache_stays_warm(
    five_equal: Chat,
) -> None:
    reads = []
    for s in range(6):
        body = five_equal.body(f"task {s}", session_id=f"app:o{s}:planner",
                               provider={"order": ["u2", "u1"]})  # fmt: skip
        for _ in range(2):
            answer = five_equal.post(body).json()
            assert answer["provider"] == "U2"
            reads.append(answer["usage"]["prompt_tokens_details"]["cached_tokens"])
    # the shared system prompt, written once on U2, is read by every later call
    assert reads[0] == 0 and all(r > 0 for r in reads[1:])


def test_an_upstream_at_capacity_refuses_and_openrouter_falls_back(clock: VirtualClock) -> None:
    """Calls that overlap in time count against capacity; ones that ended do not."""
    ups = (upstream("A", "1", capacity=2), upstream("B", "3"))
    chat = Chat(Simulator(catalog_of(*ups), clock=clock, seed=4))
    order_a = {"order": ["a"]}
    start = clock.time()
    served = []
    for i in range(3):  # three calls starting together: A takes two
        clock.move_to(start)
        served.append(chat.upstream_of(chat.body(f"t{i}", SHORT_SYSTEM, provider=order_a)))
    assert served == ["A", "A", "B"]
    clock.move_to(start + 60)  # both of A's calls have ended
    assert chat.upstream_of(chat.body("later", SHORT_SYSTEM, provider=order_a)) == "A"


def test_a_direct_upstream_at_capacity_answers_429(clock: VirtualClock) -> None:
    spec = upstream("OpenAI", "1", capacity=1)
    base = Catalog(openrouter={}, openai={}, anthropic={})
    sim = Simulator(base.with_pool("openai", ModelPool("gpt-test", (spec,))), clock=clock, seed=1)
    http = httpx.Client(transport=SimulatorTransport(sim), base_url="https://api.openai.com/v1")
    body = {"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}]}
    first = http.post("/chat/completions", json=body, headers={"Authorization": "Bearer sk-x"})
    clock.move_to(clock.time() - 0.1)  # a second call starting while the first is in flight
    second = http.post("/chat/completions", json=body, headers={"Authorization": "Bearer sk-x"})
    assert (first.status_code, second.status_code) == (200, 429)
