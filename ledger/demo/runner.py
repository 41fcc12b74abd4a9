"""Runs the demo workload: agents' sessions through the real client into a ledger.

One thread and a discrete-event loop on the simulator's virtual clock: every
session has the virtual time its next turn is due; the loop takes the
earliest, moves the clock there, and makes the call, which advances the clock
by its simulated latency. Sessions overlap as real ones do: a turn due while
another session's call is in flight starts on time (the clock moves back to
it), so one slow upstream delays only the sessions it serves, and the
simulator sees every call in flight when it judges an upstream's capacity.
So hours of multi-agent traffic run in seconds, every row's ``started_at`` and
latency are on that clock, and a seed fixes the whole run (no thread
scheduling, no wall time).
"""

from __future__ import annotations

import datetime as dt
import heapq
import random
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Final

from sqlalchemy import func, select
from sqlalchemy.engine import URL

from ledger.attempt import ChatResult
from ledger.cascade import Cascade
from ledger.demo import workload as wl
from ledger.demo.wiring import SimulatedClients, simulated_clients
from ledger.errors import AllProvidersFailed, ProviderError
from ledger.events import UsageEvent
from ledger.policies import PolicyBook
from ledger.resilience.cache import ResponseCache
from ledger.resilience.recording import CachedCall, Turn
from ledger.schema import token_usage
from ledger.simulator import Simulator, VirtualClock
from ledger.store.engine import make_engine
from ledger.store.ledger import Ledger

#: Sessions in flight at once; keeps a session's gap between turns well under
#: the pin window when no pause is scripted.
DEFAULT_CONCURRENCY: Final = 16
DEFAULT_CALLS: Final = 10_000


@dataclass(slots=True)
class DemoStats:
    """What a run did, tallied as it went (the analytics read the ledger itself)."""

    calls: int = 0
    failed_calls: int = 0
    attempts: int = 0
    failed_attempts: int = 0
    fallbacks: int = 0
    response_cache_hits: int = 0
    streamed: int = 0
    sessions: int = 0
    keyed_sessions: int = 0
    idle_gaps: int = 0
    approval_waits: int = 0
    spend_usd: Decimal = Decimal(0)
    unknown_cost_attempts: int = 0
    calls_by_agent: Counter[str] = field(default_factory=Counter)
    first_at: dt.datetime | None = None
    last_at: dt.datetime | None = None
    wall_s: float = 0.0

    def note(self, event: UsageEvent) -> None:
        if event.response_cache_hit:
            self.response_cache_hits += 1
            return
        self.attempts += 1
        if event.status != "ok":
            self.failed_attempts += 1
        if event.cost_usd is None:
            self.unknown_cost_attempts += 1
        else:
            self.spend_usd += event.cost_usd
        if self.first_at is None:
            self.first_at = event.started_at
        self.last_at = event.started_at


class _Tally:
    """A recorder that counts what passes on its way to the ledger."""

    def __init__(self, ledger: Ledger, stats: DemoStats) -> None:
        self._ledger, self._stats = ledger, stats

    def record(self, event: UsageEvent) -> str:
        self._stats.note(event)
        return self._ledger.record(event)

    def begin_attempt(self, event: UsageEvent) -> None:
        self._ledger.begin_attempt(event)

    @property
    def policies(self) -> PolicyBook:
        """The ledger's routing policies, which the demo's clients apply (ledger policy)."""
        return self._ledger.policies


@dataclass(slots=True)
class _Session:
    agent: wl.Agent
    session_id: str
    keyed: bool
    turns_left: int
    messages: list[dict[str, Any]]
    turn: int = 1


@dataclass(frozen=True, slots=True)
class _Prefix:
    """An agent's constant request parts, built once."""

    system: str
    extra_body: dict[str, Any] | None


def _prefix(agent: wl.Agent, routing: Mapping[str, Mapping[str, Any]]) -> _Prefix:
    if agent.cascades:
        # The chain's providers take different tool formats: the tools go in the prompt.
        return _Prefix(wl.system_prompt(agent) + "\n\n" + wl.tools_section(agent), None)
    extra: dict[str, Any] = {"tools": wl.tool_definitions(agent)}
    if agent.cache_control:
        extra["cache_control"] = {"type": "ephemeral"}
    route = agent.routes[0]
    if route.provider == "openrouter" and route.model in routing:
        # the verdict's recommendation, pasted as OpenRouter's top-level provider object
        extra["provider"] = dict(routing[route.model])
    return _Prefix(wl.system_prompt(agent), extra)


class Workload:
    """One demo run over a simulator, a ledger and the real clients."""

    def __init__(
        self,
        ledger: Ledger,
        *,
        calls: int = DEFAULT_CALLS,
        seed: int = 0,
        start: float = wl.DEMO_EPOCH,
        concurrency: int = DEFAULT_CONCURRENCY,
        agents: tuple[wl.Agent, ...] = wl.AGENTS,
        strict: bool = False,
        routing: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        if calls < 1 or concurrency < 1:
            raise ValueError("calls and concurrency must be at least 1")
        self.target = calls
        self.seed = seed
        self.concurrency = concurrency
        self.agents = agents
        self.clock = VirtualClock(start)
        self.sim = Simulator(wl.demo_catalog(), clock=self.clock, seed=seed)
        self.stats = DemoStats()
        self._tally = _Tally(ledger, self.stats)
        self.clients: SimulatedClients = simulated_clients(
            self.sim, self._tally, session_prefix=wl.APP, strict=strict
        )
        self._answers: ResponseCache[ChatResult] = ResponseCache(
            ttl_s=wl.RESPONSE_CACHE_TTL_S, clock=self.clock.time
        )
        self.run_tag = dt.datetime.fromtimestamp(start, dt.UTC).strftime("%Y%m%dT%H%M")
        self._rng = random.Random(seed)
        self._prefixes = {a.name: _prefix(a, routing or {}) for a in agents}
        self._cascades = {
            a.name: Cascade(self.clients.keyed, a.routes, seed=seed, clock=self.clock.time)
            for a in agents
            if a.cascades
        }
        self._bursts = sorted(wl.BURSTS, key=lambda b: b.at_share)
        self._queue: list[tuple[float, int, _Session]] = []
        self._seq = 0

    # -- the loop --------------------------------------------------------------

    def run(self) -> DemoStats:
        """Make ``calls`` calls; returns the tally."""
        started = time.perf_counter()
        try:
            active = 0
            while self.stats.calls < self.target:
                while active < self.concurrency:
                    self._start_session()
                    active += 1
                due, _, session = heapq.heappop(self._queue)
                self.clock.move_to(due)
                self._fire_bursts()
                pause = self._turn(session)
                if session.turns_left == 0:
                    active -= 1
                else:
                    self._schedule(session, self.clock.time() + pause)
        finally:
            self.clients.close()
        self.stats.wall_s = time.perf_counter() - started
        return self.stats

    def _schedule(self, session: _Session, due: float) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (due, self._seq, session))

    def _start_session(self) -> None:
        rng = self._rng
        agent = rng.choices(self.agents, weights=[a.weight for a in self.agents])[0]
        number = self.stats.sessions + 1
        keyed = rng.random() < agent.keyed_share
        self.stats.sessions = number
        self.stats.keyed_sessions += keyed and not agent.cascades
        messages = [
            {"role": "system", "content": self._prefixes[agent.name].system},
            {"role": "user", "content": wl.opening(rng, agent, number)},
        ]
        session = _Session(
            agent=agent,
            session_id=f"{self.run_tag}-{number:05d}",
            keyed=keyed,
            turns_left=rng.randint(*agent.turns),
            messages=messages,
        )
        self._schedule(session, self.clock.time() + rng.expovariate(1 / 20.0))

    def _fire_bursts(self) -> None:
        while self._bursts and self.stats.calls >= self._bursts[0].at_share * self.target:
            self.sim.faults.add(self._bursts.pop(0).fault(self.clock.time()))

    # -- one turn ----------------------------------------------------------------

    def _turn(self, session: _Session) -> float:
        """Make the session's next call; the pause before its next turn."""
        rng, agent = self._rng, session.agent
        streamed = rng.random() < agent.stream_share
        paused = rng.random() < agent.approval_share
        options: dict[str, Any] = {
            "session_id": session.session_id,
            "actor_id": agent.name,
            "locale": agent.locale,
            "tags": {"app": wl.APP, "run": self.run_tag},
            "max_tokens": wl.MAX_TOKENS,
            "paused": paused,
        }
        extra = self._prefixes[agent.name].extra_body
        if extra is not None:
            options["extra_body"] = extra
        self.stats.calls += 1
        self.stats.calls_by_agent[agent.name] += 1
        self.stats.streamed += streamed
        session.turns_left -= 1
        try:
            result = self._send(session, streamed, options)
        except (ProviderError, AllProvidersFailed):
            self.stats.failed_calls += 1  # the turn is retried: its message stays last
        else:
            self.stats.fallbacks += result.event.attempt > 1 and not result.event.response_cache_hit
            session.messages.append({"role": "assistant", "content": result.content or ""})
            session.turn += 1
            session.messages.append({"role": "user", "content": wl.follow_up(rng, session.turn)})
        return self._pause(paused)

    def _send(self, session: _Session, streamed: bool, options: dict[str, Any]) -> ChatResult:
        if session.agent.faq and session.turn == 1 and not streamed:
            return self._answer_faq(session, options)
        return self._call(session, streamed, options)

    def _answer_faq(self, session: _Session, options: dict[str, Any]) -> ChatResult:
        """A help-widget question through the response cache; a hit gets its own row."""
        route = session.agent.routes[0]
        turn = Turn(
            text=session.messages[-1]["content"],
            model=route.model,
            requested_provider=route.provider,
            locale=options["locale"],
            session_id=session.session_id,
            actor_id=session.agent.name,
            tags=options["tags"],
            paused=options["paused"],
        )
        call = CachedCall(
            lambda _: self._call(session, False, options),
            self._answers,
            self._tally,
            clock=self.clients.clock,
        )
        return call(turn)

    def _call(self, session: _Session, streamed: bool, options: dict[str, Any]) -> ChatResult:
        agent, messages = session.agent, session.messages
        cascade = self._cascades.get(agent.name)
        if cascade is not None:
            if not streamed:
                return cascade.chat(messages, **options)
            with cascade.stream(messages, **options) as chain:
                for _ in chain:
                    pass
            result = chain.result
        else:
            client = self.clients.keyed if session.keyed else self.clients.unkeyed
            route = agent.routes[0]
            if not streamed:
                return client.chat(messages, model=route.model, provider=route.provider, **options)
            with client.stream(
                messages, model=route.model, provider=route.provider, **options
            ) as stream:
                for _ in stream:
                    pass
            result = stream.result
        assert result is not None  # a stream that ended without raising has its result
        return result

    def _pause(self, paused: bool) -> float:
        rng = self._rng
        pause = wl.think_time_s(rng)
        if paused:
            self.stats.approval_waits += 1
            return pause + rng.uniform(*wl.APPROVAL_WAIT_S)
        if rng.random() < wl.IDLE_SHARE:
            self.stats.idle_gaps += 1
            return pause + rng.uniform(*wl.IDLE_GAP_S)
        return pause


def next_start(url: str | URL | None = None) -> float:
    """Where a run on this ledger starts: the demo epoch, or the hour after its last row.

    A second run never overlaps the first (its sessions would otherwise
    interleave with identical timestamps); a run on an empty ledger is the
    same for the same seed.
    """
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            last = conn.execute(select(func.max(token_usage.c.started_at))).scalar_one_or_none()
    finally:
        engine.dispose()
    if last is None:
        return wl.DEMO_EPOCH
    if isinstance(last, str):  # SQLite without type detection
        last = dt.datetime.fromisoformat(last)
    if last.tzinfo is None:
        last = last.replace(tzinfo=dt.UTC)
    hour = last.replace(minute=0, second=0, microsecond=0) + dt.timedelta(hours=1)
    return max(hour.timestamp(), wl.DEMO_EPOCH)


def run_demo(
    url: str | URL | None = None,
    *,
    calls: int = DEFAULT_CALLS,
    seed: int = 0,
    start: float | None = None,
    strict: bool = False,
    routing: Mapping[str, Mapping[str, Any]] | None = None,
    bills: Path | None = None,
) -> DemoStats:
    """Run the workload into the (migrated) ledger at ``url`` and wait until it is stored.

    ``routing`` maps an OpenRouter model to the ``provider`` object its calls send
    (a verdict's recommendation, as ``ledger demo --apply-recommendations`` does).
    ``bills``: a file the simulated OpenRouter's bills are appended to, for
    ``ledger simulate --bills`` (the simulator ends with the run; its bills need not).
    """
    begin = next_start(url) if start is None else start
    ledger = Ledger(url)
    try:
        workload = Workload(
            ledger, calls=calls, seed=seed, start=begin, strict=strict, routing=routing
        )
        stats = workload.run()
        if bills is not None:
            workload.sim.generations.save(bills)
        if not ledger.flush(timeout=120.0):
            raise RuntimeError("the ledger did not store the demo's rows within 120 s")
    finally:
        ledger.close()
    return stats
