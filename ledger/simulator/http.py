"""One entry point for every adapter: an HTTP request in, a rendered :class:`Reply` out.

Routes by path only, so a client may point any base URL at the simulator:
``/api/v1/chat/completions`` (OpenRouter), ``/v1/chat/completions`` (OpenAI),
``/v1/messages`` (Anthropic), ``GET /api/v1/generation?id=…`` (OpenRouter's
generation stats, for ``ledger reconcile openrouter``) and the OpenAI and
Anthropic admin cost and usage reports (:mod:`ledger.simulator.admin_reports`,
for ``ledger reconcile openai|anthropic``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final
from urllib.parse import parse_qs

from ledger.simulator.admin_reports import ENDPOINTS as REPORTS
from ledger.simulator.admin_reports import serve_report
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


GENERATION_PATH: Final = "/api/v1/generation"


def _generation(sim: Simulator, method: str, headers: Mapping[str, str], query: str) -> Reply:
    if method != "GET":
        return Reply(405, [JSON_TYPE], [(0.0, dumps({"error": {"message": "use GET"}}))])
    if not headers.get("authorization", "").startswith("Bearer "):
        error = {"error": {"code": 401, "message": "No auth credentials found"}}
        return Reply(401, [JSON_TYPE], [(0.0, dumps(error))])
    ids = parse_qs(query).get("id", [])
    found = sim.generations.lookup(ids[0]) if ids else None
    if found is None:
        error = {"error": {"code": 404, "message": "Generation not found"}}
        return Reply(404, [JSON_TYPE], [(0.0, dumps(error))])
    return Reply(200, [JSON_TYPE], [(0.0, dumps(found))])


def handle(
    sim: Simulator,
    method: str,
    path: str,
    headers: Mapping[str, str],
    body: bytes,
    query: str = "",
) -> Reply:
    """Serve one request; ``headers`` keys must be lower-case."""
    if path.rstrip("/") == GENERATION_PATH:
        return _generation(sim, method, headers, query)
    if path.rstrip("/") in REPORTS:
        return serve_report(sim.reports, path.rstrip("/"), method, headers, query)
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
        if service == "openrouter":
            gen_id = chat.completion_id(outcome, openrouter=True)
            sim.generations.record(gen_id, outcome, streamed=request.stream)
        else:
            _bill(sim, service, request.account, outcome)
        return chat.render_completion(outcome, request, include_usage)
    return chat.render_failure(outcome, service)


def _anthropic(sim: Simulator, headers: Mapping[str, str], body: bytes) -> Reply:
    try:
        request = messages.parse(headers, body)
    except BadRequest as exc:
        return messages.render_bad_request(exc)
    outcome = sim.complete(request)
    if isinstance(outcome, Completion):
        _bill(sim, "anthropic", request.account, outcome)
        return messages.render_completion(outcome, request)
    return messages.render_failure(outcome)


def _bill(sim: Simulator, service: Service, account: str, done: Completion) -> None:
    """A direct (OpenAI/Anthropic) completion goes on the organisation's daily bill."""
    sim.reports.record(service, account, done.model, done.created, done.usage)
