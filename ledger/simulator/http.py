"""One entry point for every adapter: an HTTP request in, a rendered :class:`Reply` out.

Routes by path only, so a client may point any base URL at the simulator:
``/api/v1/chat/completions`` (OpenRouter), ``/v1/chat/completions`` (OpenAI),
``/v1/messages`` (Anthropic).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from ledger.simulator.catalog import Service
from ledger.simulator.core import Completion, Simulator
from ledger.simulator.wire import chat, messages
from ledger.simulator.wire.common import JSON_TYPE, BadRequest, Reply, dumps

ROUTES: Final[dict[str, Service]] = {
    "/api/v1/chat/completions": "openrouter",
    "/v1/chat/completions": "openai",
    "/chat/completions": "openai",
    "/v1/messages": "anthropic",
}


def handle(
    sim: Simulator, method: str, path: str, headers: Mapping[str, str], body: bytes
) -> Reply:
    """Serve one request; ``headers`` keys must be lower-case."""
    service = ROUTES.get(path.rstrip("/"))
    if service is None:
        return Reply(404, [JSON_TYPE], [(0.0, dumps({"error": {"message": f"no route {path}"}}))])
    if method != "POST":
        return Reply(405, [JSON_TYPE], [(0.0, dumps({"error": {"message": "use POST"}}))])
    if service == "anthropic":
        return _anthropic(sim, headers, body)
    try:
        request, include_usage = chat.parse(service, headers, body)
    except BadRequest as exc:
        return chat.render_bad_request(exc, service)
    outcome = sim.complete(request)
    if isinstance(outcome, Completion):
        return chat.render_completion(outcome, request, include_usage)
    return chat.render_failure(outcome, service)


def _anthropic(sim: Simulator, headers: Mapping[str, str], body: bytes) -> Reply:
    try:
        request = messages.parse(headers, body)
    except BadRequest as exc:
        return messages.render_bad_request(exc)
    outcome = sim.complete(request)
    if isinstance(outcome, Completion):
        return messages.render_completion(outcome, request)
    return messages.render_failure(outcome)
