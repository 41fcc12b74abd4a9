"""OTLP trace requests, protobuf or JSON, decoded into plain :class:`Span` values.

Both encodings of ``ExportTraceServiceRequest`` (OTLP/HTTP, ``POST /v1/traces``)
become the same list of spans, so the mapping to usage events
(:mod:`ledger.otel.mapping`) never sees a wire format. A request that cannot
be parsed at all raises :class:`OTLPDecodeError`; a span that is malformed
inside a parseable request becomes a :class:`Malformed` entry carrying the
reason, so one bad span never costs the others.

JSON follows the OTLP/JSON rules: lowerCamelCase keys (snake_case accepted
too), trace and span ids as hex, 64-bit integers as decimal strings or numbers.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

#: Span status codes (OTLP ``Status.StatusCode``).
STATUS_ERROR: Final = 2
_MAX_DEPTH: Final = 8

Attributes = Mapping[str, Any]


class OTLPDecodeError(ValueError):
    """Raised when a request body is not an OTLP trace request in the encoding it claims."""


@dataclass(frozen=True, slots=True)
class Span:
    """One span, reduced to what the ledger reads."""

    trace_id: str
    span_id: str
    name: str
    start_ns: int
    end_ns: int
    attributes: Attributes
    status_code: int = 0
    status_message: str = ""
    resource: Attributes = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Malformed:
    """A span the request carried but that could not be read."""

    reason: str
    trace_id: str = ""
    span_id: str = ""


# -- protobuf ---------------------------------------------------------------------


def _any_value(value: AnyValue, depth: int = 0) -> Any:
    kind = value.WhichOneof("value")
    if kind is None or depth > _MAX_DEPTH:
        return None
    if kind == "array_value":
        return [_any_value(v, depth + 1) for v in value.array_value.values]
    if kind == "kvlist_value":
        return _pb_attributes(value.kvlist_value.values, depth + 1)
    return getattr(value, kind)


def _pb_attributes(pairs: Any, depth: int = 0) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        assert isinstance(pair, KeyValue)
        out[pair.key] = _any_value(pair.value, depth)
    return out


def decode_protobuf(body: bytes) -> list[Span | Malformed]:
    """Spans of a binary ``ExportTraceServiceRequest``."""
    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(body)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise OTLPDecodeError(f"not a protobuf ExportTraceServiceRequest ({exc})") from None
    spans: list[Span | Malformed] = []
    for resource_spans in request.resource_spans:
        resource = _pb_attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                trace_id, span_id = span.trace_id.hex(), span.span_id.hex()
                if len(trace_id) != 32 or len(span_id) != 16:
                    spans.append(Malformed("trace_id or span_id of the wrong length"))
                    continue
                spans.append(
                    Span(
                        trace_id=trace_id,
                        span_id=span_id,
                        name=span.name,
                        start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano,
                        attributes=_pb_attributes(span.attributes),
                        status_code=span.status.code,
                        status_message=span.status.message,
                        resource=resource,
                    )
                )
    return spans


# -- JSON -------------------------------------------------------------------------


def _get(obj: Mapping[str, Any], camel: str, default: Any = None) -> Any:
    """``obj[camel]``, else its snake_case spelling (OTLP/JSON allows both on receipt)."""
    if camel in obj:
        return obj[camel]
    snake = "".join(f"_{c.lower()}" if c.isupper() else c for c in camel)
    return obj.get(snake, default)


def _list(obj: object, camel: str) -> list[Any]:
    if not isinstance(obj, Mapping):  # e.g. {"arrayValue": "0"}: a value, not an object
        raise OTLPDecodeError(f"{camel}: expected an object holding it, got {type(obj).__name__}")
    value = _get(obj, camel, [])
    if value is None:
        return []
    if not isinstance(value, list):
        raise OTLPDecodeError(f"{camel}: expected a list, got {type(value).__name__}")
    return value


def _json_int(value: Any, what: str) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{what}: expected an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    raise ValueError(f"{what}: expected an integer, got {value!r:.40}")


def _json_value(value: Any, depth: int = 0) -> Any:
    if not isinstance(value, Mapping) or depth > _MAX_DEPTH:
        return None
    if "stringValue" in value or "string_value" in value:
        text = _get(value, "stringValue")
        return text if isinstance(text, str) else None
    if "boolValue" in value or "bool_value" in value:
        flag = _get(value, "boolValue")
        return flag if isinstance(flag, bool) else None
    if "intValue" in value or "int_value" in value:
        return _json_int(_get(value, "intValue"), "intValue")
    if "doubleValue" in value or "double_value" in value:
        number = _get(value, "doubleValue")
        return float(number) if isinstance(number, int | float | str) else None
    if "arrayValue" in value or "array_value" in value:
        inner = _get(value, "arrayValue") or {}
        return [_json_value(v, depth + 1) for v in _list(inner, "values")]
    if "kvlistValue" in value or "kvlist_value" in value:
        inner = _get(value, "kvlistValue") or {}
        return _json_attributes(_list(inner, "values"), depth + 1)
    return None


def _json_attributes(pairs: list[Any], depth: int = 0) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        if not isinstance(pair, Mapping) or not isinstance(pair.get("key"), str):
            raise ValueError("an attribute without a string key")
        out[pair["key"]] = _json_value(pair.get("value"), depth)
    return out


def _hex_id(value: Any, length: int, what: str) -> str:
    if not isinstance(value, str) or len(value) != length:
        raise ValueError(f"{what}: expected {length} hex digits")
    try:
        bytes.fromhex(value)
    except ValueError:
        raise ValueError(f"{what}: expected {length} hex digits") from None
    return value.lower()


def _json_span(span: Any, resource: Attributes) -> Span | Malformed:
    if not isinstance(span, Mapping):
        return Malformed("a span that is not a JSON object")
    try:
        trace_id = _hex_id(_get(span, "traceId"), 32, "traceId")
        span_id = _hex_id(_get(span, "spanId"), 16, "spanId")
        status = _get(span, "status") or {}
        if not isinstance(status, Mapping):
            raise ValueError("status: expected an object")
        name = _get(span, "name", "")
        message = status.get("message", "")
        return Span(
            trace_id=trace_id,
            span_id=span_id,
            name=name if isinstance(name, str) else "",
            start_ns=_json_int(_get(span, "startTimeUnixNano", 0), "startTimeUnixNano"),
            end_ns=_json_int(_get(span, "endTimeUnixNano", 0), "endTimeUnixNano"),
            attributes=_json_attributes(_list(span, "attributes")),
            status_code=_json_int(status.get("code", 0), "status.code"),
            status_message=message if isinstance(message, str) else "",
            resource=resource,
        )
    except (ValueError, TypeError, OTLPDecodeError) as exc:
        ids = {k: v for k in ("traceId", "spanId") if isinstance(v := _get(span, k), str)}
        return Malformed(str(exc), ids.get("traceId", ""), ids.get("spanId", ""))


def decode_json(body: bytes) -> list[Span | Malformed]:
    """Spans of an OTLP/JSON ``ExportTraceServiceRequest``."""
    try:
        document = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise OTLPDecodeError(f"not JSON ({exc})") from None
    if not isinstance(document, Mapping):
        raise OTLPDecodeError("expected a JSON object with resourceSpans")
    spans: list[Span | Malformed] = []
    for resource_spans in _list(document, "resourceSpans"):
        if not isinstance(resource_spans, Mapping):
            spans.append(Malformed("a resourceSpans entry that is not an object"))
            continue
        resource_obj = _get(resource_spans, "resource") or {}
        try:
            resource = (
                _json_attributes(_list(resource_obj, "attributes"))
                if isinstance(resource_obj, Mapping)
                else {}
            )
        except (ValueError, TypeError, OTLPDecodeError):
            resource = {}
        for scope_spans in _list(resource_spans, "scopeSpans"):
            if not isinstance(scope_spans, Mapping):
                spans.append(Malformed("a scopeSpans entry that is not an object"))
                continue
            spans.extend(_json_span(s, resource) for s in _list(scope_spans, "spans"))
    return spans
