"""What ``ledger demo`` simulates: the agents, their prompts, the catalog and the faults.

Pure data and pure text generation; :mod:`ledger.demo.runner` does the I/O.

The shape follows the seed ADRs. Four agents call OpenRouter, each with its
own system prompt and tools prefix (ADR 0221: pinning two agents together
gains no cache), half of their sessions sending the sticky key and half not,
so every agent shows stickiness with and without it. Two agents call OpenAI
directly through the ADR-0014 cascade (OpenAI ``gpt-4o-mini``, then Anthropic
``claude-haiku-4-5``); a rate-limit burst on OpenAI partway through makes them
fall back. Sessions pause: idle gaps and approval waits longer than the
10-minute pin window release the pin.

One upstream is measurably worse where it matters: on
``anthropic/claude-sonnet-4.5`` Amazon Bedrock is slower (first byte and
decoding) than Anthropic and Google Vertex, and a little cheaper, so
OpenRouter's 1/price² balancing sends it the most sessions and it holds the
most pins: the case ADR 0221 kept ``provider.order`` in reserve for. (Its
errors would not show: OpenRouter retries another upstream by itself, and the
ledger sees only who finally served the call.)
On ``qwen/qwen3-coder`` the cheapest upstream holds the pins and is as good as
the rest: the verdict there should say ``provider.order`` is not warranted.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final

from ledger.cascade import Route
from ledger.simulator import Catalog, Fault, FaultKind, default_catalog

#: 2025-11-03T08:00:00Z, a Monday morning: where a demo on an empty ledger starts.
DEMO_EPOCH: Final = 1_762_156_800.0
#: The application prefix of the sticky key (``<app>:<session>:<agent>``, ADR 0221).
APP: Final = "demo"

QWEN: Final = "qwen/qwen3-coder"
SONNET: Final = "anthropic/claude-sonnet-4.5"
GPT_MINI: Final = "gpt-4o-mini"
HAIKU: Final = "claude-haiku-4-5-20251001"

#: The measurably worse (slower) upstream that holds the most pins.
WORSE_UPSTREAM: Final = (SONNET, "Amazon Bedrock")
#: Its input price: under its peers' $3, enough to draw the most sessions.
WORSE_INPUT_PER_MTOK: Final = Decimal("2.60")
#: Its error rate, as its peers': every failure makes OpenRouter avoid an
#: upstream for 30 s, which would cost it the pins this demo wants it to hold.
WORSE_ERROR_RATE: Final = 0.01


@dataclass(frozen=True, slots=True)
class Agent:
    """One agent: its prompt prefix, where it calls, and how its sessions behave.

    ``keyed_share``: share of its sessions whose client sends the sticky key
    (matters only on OpenRouter). ``approval_share``: chance that a turn asks
    a human for approval (a ``paused`` turn) and the session waits for it.
    ``cache_control``: mark the prompt cacheable (Anthropic-family upstreams
    cache only marked prompts).
    """

    name: str
    role: str
    tools: tuple[str, ...]
    routes: tuple[Route, ...]
    weight: float
    keyed_share: float = 0.5
    turns: tuple[int, int] = (4, 12)
    stream_share: float = 0.0
    approval_share: float = 0.0
    cache_control: bool = False
    locale: str = "en-US"
    #: Sessions open with a frequently asked question, answered through the
    #: response cache (ADR-0016): a repeat within the TTL costs no provider call.
    faq: bool = False

    @property
    def cascades(self) -> bool:
        return len(self.routes) > 1


AGENTS: Final[tuple[Agent, ...]] = (
    Agent(
        name="planner",
        role="break a feature request into an ordered, reviewable implementation plan",
        tools=("read_issue", "search_code", "list_files", "request_approval"),
        routes=(Route("openrouter", SONNET),),
        weight=2.0,
        turns=(4, 9),
        approval_share=0.08,
        cache_control=True,
    ),
    Agent(
        name="coder",
        role="write and edit code in the repository, one small verified change at a time",
        tools=("read_file", "write_file", "apply_patch", "run_tests", "search_code"),
        routes=(Route("openrouter", QWEN),),
        weight=4.0,
        turns=(6, 14),
        stream_share=0.3,
    ),
    Agent(
        name="reviewer",
        role="review a diff for correctness, security and style, and explain each finding",
        tools=("read_diff", "read_file", "comment", "approve"),
        routes=(Route("openrouter", QWEN),),
        weight=2.5,
        turns=(3, 8),
        locale="en-GB",
    ),
    Agent(
        name="researcher",
        role="answer design questions from the documentation with cited sources",
        tools=("web_search", "fetch_page", "summarise"),
        routes=(Route("openrouter", SONNET),),
        weight=1.5,
        turns=(3, 7),
        stream_share=0.2,
        cache_control=True,
    ),
    Agent(
        name="triage",
        role="label incoming support tickets and route them to the right team",
        tools=("lookup_customer", "set_label", "assign_team"),
        routes=(Route("openai", GPT_MINI), Route("anthropic", HAIKU)),
        weight=3.0,
        turns=(2, 5),
        locale="pt-BR",
    ),
    Agent(
        name="helpdesk",
        role="answer the public help widget's questions in one or two short paragraphs",
        tools=("search_help_centre",),
        routes=(Route("openrouter", "openai/gpt-4o-mini"),),
        weight=1.5,
        turns=(1, 3),
        faq=True,
    ),
    Agent(
        name="support",
        role="draft replies to customers in their own language, citing the help centre",
        tools=("search_help_centre", "lookup_order", "draft_reply", "request_approval"),
        routes=(Route("openai", GPT_MINI), Route("anthropic", HAIKU)),
        weight=2.0,
        turns=(3, 8),
        approval_share=0.05,
        locale="es-ES",
    ),
)


def demo_catalog() -> Catalog:
    """The simulator's default catalog, the slow sonnet upstream priced to draw the pins."""
    catalog = default_catalog()
    model, name = WORSE_UPSTREAM
    pool = catalog.openrouter[model].with_upstream(
        name, input_per_mtok=WORSE_INPUT_PER_MTOK, error_rate=WORSE_ERROR_RATE
    )
    return catalog.with_pool("openrouter", pool)


@dataclass(frozen=True, slots=True)
class Burst:
    """A scripted fault window: ``delay_s`` after ``at_share`` of the calls are done, for
    ``seconds`` of virtual time."""

    at_share: float
    kind: FaultKind
    service: str
    seconds: float
    upstream: str | None = None
    model: str | None = None
    retry_after_s: float | None = None
    probability: float = 1.0
    delay_s: float = 0.0

    def fault(self, now: float) -> Fault:
        return Fault(
            self.kind,
            self.service,
            upstream=self.upstream,
            model=self.model,
            count=None,
            start=now + self.delay_s,
            end=now + self.delay_s + self.seconds,
            probability=self.probability,
            retry_after_s=self.retry_after_s,
        )


BURSTS: Final[tuple[Burst, ...]] = (
    # The primary provider's rate limit: every OpenAI call 429s for 30 minutes,
    # so the cascade agents fall back to Anthropic (ADR-0014).
    Burst(0.35, FaultKind.RATE_LIMIT, "openai", 1800.0, retry_after_s=20.0),
    # ...and, ten minutes into it, the fallback overloaded for a while: some calls
    # fail on every route (AllProvidersFailed: the caller gets a retryable 503).
    Burst(0.35, FaultKind.OVERLOADED, "anthropic", 180.0, probability=0.5, delay_s=600.0),
    # An upstream outage behind OpenRouter: OpenRouter re-routes by itself,
    # moving pinned sessions off their upstream (switches the ledger sees).
    Burst(0.6, FaultKind.OVERLOADED, "openrouter", 300.0, upstream="Google Vertex", model=SONNET),
    # A short OpenAI 5xx storm, half the calls: transient, so they fall back too.
    Burst(0.8, FaultKind.SERVER_ERROR, "openai", 180.0, probability=0.5),
)

# -- prompt text ---------------------------------------------------------------

_RULES: Final = (
    "Think step by step before calling a tool, and call at most one tool per turn.",
    "Quote file paths and identifiers exactly as they appear; never invent them.",
    "When a tool fails, report the error verbatim and propose the next step.",
    "Keep answers short: a summary line, then the details as a bulleted list.",
    "Never include secrets, API keys or personal data in an answer or a tool call.",
    "If the request is ambiguous, ask one clarifying question instead of guessing.",
    "Prefer the smallest change that solves the problem; explain any trade-off.",
    "Record every decision with its reason so a human can audit the session later.",
)
_VERBS: Final = ("fix", "add", "refactor", "document", "test", "speed up", "migrate", "remove")
_THINGS: Final = (
    "the login flow", "the billing export", "the search index", "the retry policy",
    "the admin page", "the nightly report", "the webhook handler", "the rate limiter",
    "the pricing table", "the onboarding email", "the audit log", "the CSV importer",
)  # fmt: skip
_FILLER: Final = (
    "status ok", "3 files changed", "tests passed", "one warning", "line 42", "see above",
    "no matches", "timeout after 30 s", "build green", "diff attached", "lint clean",
)  # fmt: skip


def system_prompt(agent: Agent) -> str:
    """The agent's instructions: long enough to be worth caching (over 1,024 tokens)."""
    lines = [f"You are the {agent.name} agent. Your job: {agent.role}.", "", "Rules:"]
    lines += [f"{i + 1}. {rule}" for i, rule in enumerate(_RULES)]
    lines += ["", "Worked examples of good turns follow.", ""]
    for i in range(18):
        verb, thing = _VERBS[i % len(_VERBS)], _THINGS[i % len(_THINGS)]
        lines.append(
            f"Example {i + 1}: asked to {verb} {thing}, the {agent.name} agent first gathers "
            f"context with {agent.tools[i % len(agent.tools)]}, states its plan in one "
            "sentence, acts, then checks the result before it reports back."
        )
    return "\n".join(lines)


def tool_definitions(agent: Agent) -> list[dict[str, Any]]:
    """The agent's tools in the OpenAI function-calling format: part of its prompt prefix."""
    return [
        {
            "type": "function",
            "function": {
                "name": tool,
                "description": f"{tool.replace('_', ' ')} for the {agent.name} agent",
                "parameters": {
                    "type": "object",
                    "properties": {"target": {"type": "string"}, "note": {"type": "string"}},
                    "required": ["target"],
                },
            },
        }
        for tool in agent.tools
    ]


def tools_section(agent: Agent) -> str:
    """The tools prefix as text, for chains whose providers take different tool formats."""
    return "Tools you may call:\n" + "\n".join(f"- {t}(target, note)" for t in agent.tools)


#: What visitors of the help widget ask most; the response cache answers repeats.
FAQ: Final = (
    "How do I reset my password?",
    "Can I change the email address on my account?",
    "Where can I download my invoices?",
    "How do I cancel my subscription?",
    "Which payment methods do you accept?",
    "How long does a refund take?",
    "How do I add a teammate to my workspace?",
    "Is there an API rate limit?",
)
#: How long a cached answer is served (virtual seconds).
RESPONSE_CACHE_TTL_S: Final = 1800.0


def opening(rng: random.Random, agent: Agent, number: int) -> str:
    """A task's first message: different for every task (ADR 0221's keyless spread),
    except a help-widget question, which visitors repeat."""
    if agent.faq:
        return rng.choice(FAQ)
    verb, thing, ticket = rng.choice(_VERBS), rng.choice(_THINGS), rng.randrange(10**6)
    return f"Task #{number}: please {verb} {thing} ({agent.name} queue, ticket {ticket})."


def follow_up(rng: random.Random, turn: int) -> str:
    """A later user turn: a tool result or a human's note, of varying length."""
    parts = rng.choices(_FILLER, k=rng.randint(8, 60))
    return f"Tool result for step {turn}: " + "; ".join(parts) + "."


def think_time_s(rng: random.Random) -> float:
    """Seconds between an answer and the agent's next call (log-normal, median 6 s)."""
    return min(6.0 * rng.lognormvariate(0.0, 0.8), 180.0)


#: Chance that a turn is followed by an idle gap longer than the pin window.
IDLE_SHARE: Final = 0.03
IDLE_GAP_S: Final = (11 * 60.0, 45 * 60.0)
#: An approval wait: mostly quick, sometimes well past the pin window.
APPROVAL_WAIT_S: Final = (90.0, 30 * 60.0)

#: Output cap per call: keeps the demo's conversations, and so its run time, bounded.
MAX_TOKENS: Final = 400
