"""What the simulated OpenRouter billed: ``GET /api/v1/generation?id=…``.

Every OpenRouter completion the simulator serves is remembered with the cost it
reported in ``usage.cost``; the generation endpoint answers with the fields of
OpenRouter's real response (tests/fixtures/payloads/SOURCES.md), so
``ledger reconcile openrouter`` runs offline:

* ``lag_s``: a generation is 404 until this long after it was served (OpenRouter's
  stats lag the completion);
* ``discrepancy_rate``: the share of generations billed ``discrepancy`` apart from
  what the completion reported (the bill moved after the fact), so a
  reconciliation has some drift to find.

``provider_responses`` lists every upstream the router tried, the failed ones it fell
back past first, as OpenRouter's OpenAPI ``ProviderResponse`` (``provider_name``,
``status``, ``latency`` in ms, ``model_permaslug``, ``endpoint_id``, ``is_byok``; the
upstream's response ``id`` on the one that answered).
"""

from __future__ import annotations

import datetime as dt
import json
import random
import threading
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, Final, Protocol

from ledger.simulator.clock import Clock


class BilledUsage(Protocol):
    """The usage of a served completion that its bill repeats (the simulator's ``Usage``)."""

    @property
    def cost(self) -> Decimal: ...
    @property
    def prompt_tokens(self) -> int: ...
    @property
    def completion_tokens(self) -> int: ...
    @property
    def reasoning_tokens(self) -> int: ...
    @property
    def cached_tokens(self) -> int: ...


class Served(Protocol):
    """A served completion as a bill sees it (the simulator's ``Completion``): the store
    reads these fields and never imports the simulator's core, which owns the store."""

    @property
    def ident(self) -> str: ...
    @property
    def created(self) -> int: ...
    @property
    def model(self) -> str: ...
    @property
    def upstream(self) -> str: ...
    @property
    def ttft_s(self) -> float: ...
    @property
    def total_s(self) -> float: ...
    @property
    def usage(self) -> BilledUsage: ...
    @property
    def tried(self) -> tuple[RouterTry, ...]: ...


def provider_responses(done: Served) -> list[dict[str, Any]] | None:
    """``provider_responses`` for a served completion (None: the router tried nothing,
    as for a completion served without routing)."""
    out: list[dict[str, Any]] = []
    for tried in done.tried:
        entry: dict[str, Any] = {
            "endpoint_id": f"ep_{tried.upstream.lower().replace(' ', '-')}",
            "is_byok": False,
            "latency": round(tried.latency_s * 1000),
            "model_permaslug": done.model,
            "provider_name": tried.upstream,
            "status": tried.status,
        }
        if tried.status == 200:
            entry["id"] = f"chatcmpl-{done.ident}"
        out.append(entry)
    return out or None


@dataclass(frozen=True, slots=True)
class RouterTry:
    """One upstream the simulated router tried for a request: its name (the
    ``provider`` field's spelling), the HTTP status it answered, and the seconds it took
    (to fail, or to its first byte)."""

    upstream: str
    status: int
    latency_s: float


_QUANTUM: Final = Decimal("1e-10")


@dataclass(frozen=True, slots=True)
class Billed:
    served_at: float
    body: dict[str, Any]


class GenerationStore:
    """The generations served so far, by id (bounded by what a run serves)."""

    def __init__(
        self,
        clock: Clock,
        *,
        lag_s: float = 0.0,
        discrepancy_rate: float = 0.0,
        discrepancy: Decimal = Decimal("0.05"),
        seed: int = 0,
    ) -> None:
        self.clock = clock
        self.lag_s = lag_s
        self.discrepancy_rate = discrepancy_rate
        self.discrepancy = discrepancy
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._served: dict[str, Billed] = {}

    def __len__(self) -> int:
        return len(self._served)

    def record(self, generation_id: str, done: Served, *, streamed: bool) -> None:
        """Remember one served completion and what it will be billed."""
        usage = done.usage
        with self._lock:
            off = self.discrepancy_rate and self._rng.random() < self.discrepancy_rate
            total = usage.cost * (1 + self.discrepancy) if off else usage.cost
            created = dt.datetime.fromtimestamp(done.created, dt.UTC)
            body = {
                "id": generation_id,
                "upstream_id": f"chatcmpl-{done.ident}",
                "total_cost": float(total.quantize(_QUANTUM)),
                "cache_discount": None,
                "upstream_inference_cost": float(total.quantize(_QUANTUM)),
                "usage": float(total.quantize(_QUANTUM)),
                "created_at": created.isoformat().replace("+00:00", "Z"),
                "model": done.model,
                "is_byok": False,
                "streamed": streamed,
                "cancelled": False,
                "provider_name": done.upstream,
                "latency": round(done.ttft_s * 1000),
                "generation_time": round(done.total_s * 1000),
                "tokens_prompt": usage.prompt_tokens,
                "tokens_completion": usage.completion_tokens,
                "native_tokens_prompt": usage.prompt_tokens,
                "native_tokens_completion": usage.completion_tokens,
                "native_tokens_reasoning": usage.reasoning_tokens,
                "native_tokens_cached": usage.cached_tokens,
                "api_type": "completions",
                "provider_responses": provider_responses(done),
            }
            self._served[generation_id] = Billed(self.clock.time(), body)

    def save(self, path: Path) -> int:
        """Append every generation's bill to ``path`` (JSON Lines); how many were written.

        What an in-process simulator served outlives it this way: ``ledger demo``
        keeps its bills, and ``ledger simulate --bills`` answers for them, so a demo
        ledger can be reconciled against a simulator started later.
        """
        with self._lock:
            bodies = [billed.body for billed in self._served.values()]
        with path.open("a", encoding="utf-8") as out:
            out.writelines(json.dumps(body, separators=(",", ":")) + "\n" for body in bodies)
        return len(bodies)

    def load(self, path: Path) -> int:
        """Bill again what :meth:`save` wrote (each at once, past any lag); how many."""
        loaded = 0
        with path.open(encoding="utf-8") as lines, self._lock:
            for line in lines:
                if line.strip():
                    body = json.loads(line)
                    self._served[str(body["id"])] = Billed(float("-inf"), body)
                    loaded += 1
        return loaded

    def lookup(self, generation_id: str) -> dict[str, Any] | None:
        """The generation's body, or None while unknown or still within the lag."""
        with self._lock:
            billed = self._served.get(generation_id)
        if billed is None or self.clock.time() < billed.served_at + self.lag_s:
            return None
        return {"data": billed.body}
