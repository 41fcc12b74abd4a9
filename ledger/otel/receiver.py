"""An OTLP/HTTP trace receiver that records GenAI client spans as ``token_usage`` rows.

:class:`OTLPReceiver` is a plain ASGI callable (no framework), so ``ledger otlp``
serves it with uvicorn and a gateway can mount it as is. It answers
``POST …/v1/traces`` with ``Content-Type: application/x-protobuf`` or
``application/json`` (gzip or deflate bodies too), as OTLP/HTTP specifies:
200 with an ``ExportTraceServiceResponse`` in the request's encoding, whose
``partial_success`` counts the GenAI spans that could not be stored; 400 for
a body that does not parse, 413, 415, 405 and 404 as their names say.

Each span goes through :func:`ledger.otel.mapping.to_event` and, when it is a
model call, to :meth:`Ledger.record` (the same usage events every other
front door produces; idempotent on the event id derived from trace and span
id). Spans skipped or rejected are counted by reason in :attr:`stats` and
logged at INFO with their ids. Nothing a client sends can crash the receiver:
a failure while mapping one span rejects that span only.
"""

from __future__ import annotations

import collections
import json
import logging
import zlib
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any, Final

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceResponse,
)

from ledger.errors import JournalError
from ledger.events import UsageEvent
from ledger.otel.mapping import Skipped, to_event
from ledger.otel.spans import Malformed, OTLPDecodeError, Span, decode_json, decode_protobuf

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Record = Callable[[UsageEvent], str]

TRACES_PATH: Final = "/v1/traces"
PROTOBUF: Final = "application/x-protobuf"
JSON: Final = "application/json"
#: Bigger requests are refused (413): a batch of GenAI spans is kilobytes.
DEFAULT_MAX_BODY_BYTES: Final = 16 * 1024 * 1024


@dataclass(slots=True)
class ReceiverStats:
    """What the receiver did since it started."""

    requests: int = 0
    spans: int = 0
    recorded: int = 0
    skipped: collections.Counter[str] = field(default_factory=collections.Counter)
    rejected: collections.Counter[str] = field(default_factory=collections.Counter)

    def as_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "spans": self.spans,
            "recorded": self.recorded,
            "skipped": dict(self.skipped),
            "rejected": dict(self.rejected),
        }


@dataclass(frozen=True, slots=True)
class Outcome:
    """One request's result: rows recorded and GenAI spans rejected (with the first reason)."""

    recorded: int
    rejected: int
    message: str = ""


class _BodyTooLarge(Exception):
    pass


class OTLPReceiver:
    """ASGI app: OTLP/HTTP traces in, usage rows out through ``record`` (a ``Ledger.record``)."""

    def __init__(self, record: Record, *, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:
        self.record = record
        self.max_body_bytes = max_body_bytes
        self.stats = ReceiverStats()

    # -- the pure part: spans in, rows out -------------------------------------------

    def ingest(self, spans: list[Span | Malformed]) -> Outcome:
        """Record every model-call span of one request; count and log the others."""
        recorded = rejected = 0
        first_reason = ""
        for item in spans:
            self.stats.spans += 1
            if isinstance(item, Malformed):
                result: UsageEvent | Skipped = Skipped(f"malformed span: {item.reason}", True)
                ids = (item.trace_id, item.span_id)
            else:
                ids = (item.trace_id, item.span_id)
                try:
                    result = to_event(item)
                except Exception as exc:  # a mapping bug must cost one span, not the request
                    log.exception("ledger otlp: could not map span %s/%s", *ids)
                    result = Skipped(f"internal error: {type(exc).__name__}", True)
            if isinstance(result, Skipped):
                counter = self.stats.rejected if result.rejected else self.stats.skipped
                counter[result.reason] += 1
                rejected += result.rejected
                first_reason = first_reason or (result.reason if result.rejected else "")
                log.info("ledger otlp: span %s/%s skipped: %r", *ids, result.reason)
                continue
            self.record(result)
            recorded += 1
        self.stats.recorded += recorded
        return Outcome(recorded, rejected, first_reason)

    # -- ASGI ----------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        if not str(scope.get("path", "")).endswith(TRACES_PATH):
            await _reply(send, 404, JSON, b'{"message":"only POST /v1/traces is served here"}')
            return
        if scope["method"] != "POST":
            await _reply(send, 405, JSON, b'{"message":"use POST"}', [(b"allow", b"POST")])
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        content_type = headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type not in (PROTOBUF, JSON):
            message = {"message": f"unsupported content type {content_type!r:.60}"}
            await _reply(send, 415, JSON, json.dumps(message).encode())
            return
        try:
            body = await self._read(receive, headers.get("content-encoding", "").lower())
            spans = decode_protobuf(body) if content_type == PROTOBUF else decode_json(body)
        except _BodyTooLarge:
            await _reply(send, 413, JSON, b'{"message":"request body too large"}')
            return
        except OTLPDecodeError as exc:
            await _reply(send, 400, JSON, json.dumps({"message": str(exc)[:300]}).encode())
            return
        self.stats.requests += 1
        try:
            outcome = self.ingest(spans)
        except (JournalError, RuntimeError) as exc:
            # The ledger cannot keep rows now: 503 makes the exporter retry the batch later
            # (rows already recorded from it are deduplicated on their event ids).
            log.warning("ledger otlp: cannot record spans: %s", exc)
            await _reply(send, 503, JSON, b'{"message":"the ledger cannot record now"}')
            return
        await _reply(send, 200, content_type, _response(outcome, content_type))

    async def _read(self, receive: Receive, encoding: str) -> bytes:
        parts: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                raise _BodyTooLarge
            parts.append(chunk)
            if not message.get("more_body", False):
                break
        return self._decode(b"".join(parts), encoding)

    def _decode(self, body: bytes, encoding: str) -> bytes:
        if encoding in ("", "identity"):
            return body
        if encoding not in ("gzip", "deflate"):
            raise OTLPDecodeError(f"unsupported content encoding {encoding!r:.40}")
        wbits = 16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS
        inflater = zlib.decompressobj(wbits)
        try:
            # Bounded: a small compressed body must not inflate past the limit.
            data = inflater.decompress(body, self.max_body_bytes + 1)
        except zlib.error as exc:
            raise OTLPDecodeError(f"not {encoding} data ({exc})") from None
        if len(data) > self.max_body_bytes:
            raise _BodyTooLarge
        return data


def _response(outcome: Outcome, content_type: str) -> bytes:
    partial = (
        ExportTracePartialSuccess(rejected_spans=outcome.rejected, error_message=outcome.message)
        if outcome.rejected
        else None
    )
    if content_type == PROTOBUF:
        response = ExportTraceServiceResponse(partial_success=partial)
        encoded: bytes = response.SerializeToString()
        return encoded
    if partial is None:
        return b"{}"
    body = {
        "partialSuccess": {"rejectedSpans": str(outcome.rejected), "errorMessage": outcome.message}
    }
    return json.dumps(body).encode()


async def _reply(
    send: Send,
    status: int,
    content_type: str,
    body: bytes,
    extra: list[tuple[bytes, bytes]] | None = None,
) -> None:
    headers = [(b"content-type", content_type.encode()), *(extra or [])]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
