"""Every recorded attempt as an OpenTelemetry GenAI span and two GenAI client histograms.

::

    ledger = Ledger(exporters=[OTelExporter.to_endpoint("http://collector:4318")])
    # or, without code: LEDGER_OTEL_ENDPOINT=http://collector:4318

Per attempt: one ``CLIENT`` span named ``chat {requested_model}``, from the
attempt's ``started_at`` to ``started_at + latency_ms``, with the attributes of
:func:`ledger.otel.attributes.span_attributes` and ``ERROR`` status for a
failed attempt; and records on ``gen_ai.client.token.usage`` (one per token
type, input and output; none for a response-cache hit, which used no tokens)
and ``gen_ai.client.operation.duration`` (seconds), with the bucket
boundaries the conventions advise.

The caller's thread does almost nothing: :meth:`OTelExporter.submit` appends
the event to a bounded queue (and notes the caller's current span, so the
attempt nests under the application's own trace). A worker thread builds the
spans and records the metrics; OpenTelemetry's ``BatchSpanProcessor`` and
periodic metric reader send them. Building spans is Python work that holds
the GIL, and a caller waiting for the GIL is a slow ``record()``; so the worker
waits for a lull in ``record()`` calls (:data:`QUIET_S`), holds no event longer
than :data:`MAX_DELAY_S`, and works in short slices that give the GIL back.
Span timestamps are the attempt's own, so the delay changes nothing downstream.
A full queue drops the newest events for the mirror only (one warning; the rows
are in the ledger regardless), and an unreachable collector costs one warning
per outage, not a log line per batch and never a row.

A collector that answers ``/v1/metrics`` with an HTTP error (Arize Phoenix takes
traces only and answers 405) is named in one warning, once per exporter, with
the status; after a 404, 405 or 501 (no metrics endpoint there) the exporter
stops sending metrics. ``to_endpoint(..., metrics=False)`` sends none at all.
"""

from __future__ import annotations

import collections
import datetime as dt
import logging
import os
import threading
import time
import weakref
from collections.abc import Iterable, MutableMapping
from typing import Any, Final

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricExportResult,
    MetricReader,
    MetricsData,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode
from requests import Response, Session

from ledger.events import UsageEvent
from ledger.otel import attributes as attr

log = logging.getLogger(__name__)

#: Events waiting for the worker; past this the mirror drops (the ledger keeps every row).
DEFAULT_QUEUE_SIZE: Final = 100_000
#: Seconds an OTLP request (with the exporter's own retries) may take.
DEFAULT_TIMEOUT_S: Final = 5.0
DEFAULT_METRIC_INTERVAL_MS: Final = 10_000
#: Bucket boundaries the GenAI metric conventions advise.
TOKEN_BUCKETS: Final = tuple(float(4**i) for i in range(14))
DURATION_BUCKETS: Final = tuple(0.01 * 2**i for i in range(14))
INSTRUMENTATION_NAME: Final = "ledger"
#: The worker builds this many spans, then yields the GIL for SLICE_PAUSE_S.
SLICE_EVENTS: Final = 16
SLICE_PAUSE_S: Final = 0.0005
#: The worker waits for a pause this long in record() calls before building spans...
QUIET_S: Final = 0.005
#: ...but never holds an event longer than this (the batch span processor's own delay).
MAX_DELAY_S: Final = 5.0
#: How often a waiting worker looks again.
POLL_S: Final = 0.05
#: Spans per OTLP request: small batches keep each encoding pass (which holds the GIL) short.
EXPORT_BATCH: Final = 256
#: Answers to ``POST /v1/metrics`` that mean "no metrics here": the exporter stops sending.
NO_METRICS_ENDPOINT: Final = frozenset({404, 405, 501})
_EPOCH: Final = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_US: Final = dt.timedelta(microseconds=1)


def nanoseconds(at: dt.datetime) -> int:
    """``at`` as integer nanoseconds since the epoch (exact to the microsecond)."""
    return ((at - _EPOCH) // _US) * 1000


class _DebugOnly(logging.LoggerAdapter):  # type: ignore[type-arg]
    """The OTLP client's per-batch complaints, at DEBUG: :class:`_Reporting` warns once."""

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        self.logger.debug(msg, *args, **kwargs)


def _quiet(exporter: object) -> None:
    """Route an OTLP exporter's retry and failure lines to DEBUG (if it has the hook)."""
    client = getattr(exporter, "_client", None)
    if client is not None and hasattr(client, "_logger"):
        client._logger = _DebugOnly(logging.getLogger("ledger.otel.transport"), {})


class _Reporting(SpanExporter):
    """Wraps a span exporter: one warning when exports start failing, one line on recovery."""

    def __init__(self, inner: SpanExporter, where: str) -> None:
        self.inner = inner
        self.where = where
        self.failing = False
        self.failures = 0
        self.exported = 0

    def export(self, spans: Any) -> SpanExportResult:
        try:
            result = self.inner.export(spans)
        except Exception as exc:  # an exporter bug must not kill the batch thread
            log.debug("span export raised", exc_info=exc)
            result = SpanExportResult.FAILURE
        if result is SpanExportResult.FAILURE:
            self.failures += 1
            if not self.failing:
                self.failing = True
                log.warning(
                    "ledger: cannot export spans to %s; the ledger keeps every row, "
                    "`ledger otel export --since ...` can send them later",
                    self.where,
                )
        else:
            self.exported += len(spans)
            if self.failing:
                self.failing = False
                log.info("ledger: span export to %s works again", self.where)
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.inner.force_flush(timeout_millis)


class _LastStatus:
    """A ``requests`` response hook noting the last HTTP status the session received."""

    def __init__(self) -> None:
        self.status: int | None = None

    def __call__(self, response: Response, *args: Any, **kwargs: Any) -> None:
        self.status = response.status_code


class _ReportingMetrics(MetricExporter):
    """Wraps the OTLP metric exporter: a collector refusing metrics is said once.

    Phoenix, for one, answers ``POST /v1/metrics`` with 405 and the OTLP client logs
    each refusal at DEBUG (:func:`_quiet`); without this, fourteen refusals in a
    row went unnoticed. A connection failure is not a refusal: the span exporter's
    warning already names an unreachable collector.
    """

    def __init__(self, inner: MetricExporter, where: str, last: _LastStatus) -> None:
        super().__init__(
            preferred_temporality=inner._preferred_temporality,
            preferred_aggregation=inner._preferred_aggregation,
        )
        self.inner = inner
        self.where = where
        self.last = last
        self.refused_status: int | None = None
        self.stopped = False

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        if self.stopped:
            return MetricExportResult.FAILURE
        self.last.status = None
        result = self.inner.export(metrics_data, timeout_millis=timeout_millis)
        status = self.last.status
        if result is MetricExportResult.FAILURE and status is not None and status >= 400:
            self._refused(status)
        return result

    def _refused(self, status: int) -> None:
        first = self.refused_status is None
        self.refused_status = status
        self.stopped = status in NO_METRICS_ENDPOINT
        if first:
            log.warning(
                "ledger: the collector at %s refused metrics (HTTP %d on /v1/metrics)%s; "
                "spans are unaffected. OTelExporter.to_endpoint(..., metrics=False) sends "
                "none (Arize Phoenix takes traces only). Said once.",
                self.where,
                status,
                ", so no more are sent" if self.stopped else "",
            )

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return self.inner.force_flush(timeout_millis)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self.inner.shutdown(timeout_millis=timeout_millis)


class OTelExporter:
    """Mirrors recorded events as GenAI spans and metrics (see the module docstring).

    ``span_exporter`` and ``metric_readers`` are where they go (an OTLP exporter,
    the SDK's in-memory ones in tests); :meth:`to_endpoint` builds OTLP/HTTP ones.
    """

    def __init__(
        self,
        *,
        span_exporter: SpanExporter,
        metric_readers: Iterable[MetricReader] = (),
        where: str = "the span exporter",
        service_name: str = "ledger",
        max_queue: int = DEFAULT_QUEUE_SIZE,
    ) -> None:
        resource = Resource.create({"service.name": service_name})
        self.reporting = _Reporting(span_exporter, where)
        self._tracer_provider = TracerProvider(resource=resource)
        # The processor's queue as deep as ours: the worker hands it spans as fast as the
        # caller records, and its default 2,048 would drop a burst the collector can take.
        self._tracer_provider.add_span_processor(
            BatchSpanProcessor(
                self.reporting, max_queue_size=max_queue, max_export_batch_size=EXPORT_BATCH
            )
        )
        self._meter_provider = MeterProvider(resource=resource, metric_readers=list(metric_readers))
        self._tracer = self._tracer_provider.get_tracer(INSTRUMENTATION_NAME)
        meter = self._meter_provider.get_meter(INSTRUMENTATION_NAME)
        self._tokens = meter.create_histogram(
            attr.TOKEN_USAGE_METRIC,
            unit="{token}",
            description="Number of input and output tokens used",
            explicit_bucket_boundaries_advisory=TOKEN_BUCKETS,
        )
        self._duration = meter.create_histogram(
            attr.DURATION_METRIC,
            unit="s",
            description="GenAI operation duration",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        # The event itself, or (event, parent) when the caller had a span: a new tuple per
        # record() would be one more GC-tracked object living until the worker runs, and
        # 20,000 of them in a burst make the collector's passes (record()'s p99) longer.
        self._queue: collections.deque[UsageEvent | tuple[UsageEvent, SpanContext]] = (
            collections.deque()
        )
        self._last_submit = 0.0
        #: When the queue last went from empty to not (approximate: errs early, never late).
        self._first_queued = 0.0
        self._flushing = False
        self._max_queue = max_queue
        self._dropped = 0
        self._wake = threading.Event()
        self._idle = threading.Condition()
        self._busy = False
        self._stopping = False
        self._closed = False
        self._worker = threading.Thread(target=self._run, name="ledger-otel", daemon=True)
        self._worker.start()
        _live.add(self)

    def _after_fork(self) -> None:
        self._queue.clear()  # the parent exports what it queued
        self._wake = threading.Event()
        self._idle = threading.Condition()
        self._busy = False
        if not self._closed:
            self._worker = threading.Thread(target=self._run, name="ledger-otel", daemon=True)
            self._worker.start()

    @classmethod
    def to_endpoint(
        cls,
        endpoint: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        headers: MutableMapping[str, str] | None = None,
        metric_interval_ms: int = DEFAULT_METRIC_INTERVAL_MS,
        metrics: bool = True,
    ) -> OTelExporter:
        """OTLP/HTTP (protobuf) to ``endpoint``'s ``/v1/traces`` and, unless ``metrics`` is
        False, ``/v1/metrics``."""
        base = endpoint.rstrip("/")
        spans = OTLPSpanExporter(endpoint=f"{base}/v1/traces", timeout=timeout_s, headers=headers)
        _quiet(spans)
        if not metrics:
            return cls(span_exporter=spans, where=base)
        last = _LastStatus()
        session = Session()
        session.hooks["response"].append(last)
        exporter = OTLPMetricExporter(
            endpoint=f"{base}/v1/metrics", timeout=timeout_s, headers=headers, session=session
        )
        _quiet(exporter)
        reader = PeriodicExportingMetricReader(
            _ReportingMetrics(exporter, base, last),
            export_interval_millis=metric_interval_ms,
            export_timeout_millis=timeout_s * 1000,
        )
        return cls(span_exporter=spans, metric_readers=[reader], where=base)

    # -- the caller's side ---------------------------------------------------------

    def submit(self, event: UsageEvent) -> None:
        """Queue ``event`` (the caller's current span becomes its parent); never blocks."""
        queue = self._queue
        if len(queue) >= self._max_queue or self._closed:
            self._drop()
            return
        parent = trace.get_current_span().get_span_context()
        now = self._last_submit = time.monotonic()
        queue.append((event, parent) if parent.is_valid else event)
        if len(queue) == 1:
            self._first_queued = now
            self._wake.set()

    def _drop(self) -> None:
        self._dropped += 1
        if self._dropped == 1:
            log.warning(
                "ledger: the OpenTelemetry exporter is %s; events are not mirrored "
                "(the ledger keeps every row)",
                "closed" if self._closed else f"{self._max_queue} events behind",
            )

    @property
    def dropped(self) -> int:
        """Events the mirror dropped (queue full or exporter closed)."""
        return self._dropped

    # -- the worker ------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            self._wake.wait(timeout=0.5)
            self._wake.clear()
            self._drain()
            if self._stopping and not self._queue:
                return

    def _drain(self) -> None:
        queue = self._queue
        with self._idle:
            self._busy = True
        try:
            while queue:
                if self._should_wait(self._first_queued):
                    # Rarely: each wake-up takes the GIL from the caller for a moment.
                    time.sleep(POLL_S)
                    continue
                for _ in range(min(len(queue), SLICE_EVENTS)):
                    item = queue.popleft()
                    event, parent = item if isinstance(item, tuple) else (item, None)
                    try:
                        self.emit(event, parent)
                    except Exception:  # a bad event must not stop the mirror
                        log.warning("ledger: could not export %s", event.event_id, exc_info=True)
                # Give the GIL back between short slices: a caller blocked on it while this
                # thread builds a long run of spans is exactly the record() tail we must avoid.
                time.sleep(SLICE_PAUSE_S)
        finally:
            with self._idle:
                self._busy = False
                self._idle.notify_all()

    def _should_wait(self, oldest_queued: float) -> bool:
        """Whether to let the caller's burst of record() calls go on before building spans."""
        if self._flushing or self._stopping or len(self._queue) >= self._max_queue // 2:
            return False
        now = time.monotonic()
        return now - self._last_submit < QUIET_S and now - oldest_queued < MAX_DELAY_S

    def emit(self, event: UsageEvent, parent: SpanContext | None = None) -> None:
        """Build ``event``'s span and metric points now, on this thread."""
        start = nanoseconds(event.started_at)
        end = start if event.latency_ms is None else start + round(event.latency_ms * 1e6)
        context: Context | None = None
        if parent is not None:
            context = trace.set_span_in_context(NonRecordingSpan(parent))
        span = self._tracer.start_span(
            attr.span_name(event),
            context=context,
            kind=SpanKind.CLIENT,
            attributes=attr.span_attributes(event),
            start_time=start,
        )
        if event.status == "error":
            span.set_status(Status(StatusCode.ERROR, event.error_type or "error"))
        span.end(end_time=end)
        labels = attr.metric_attributes(event)
        if not event.response_cache_hit:
            for kind, count in (("input", event.input_tokens), ("output", event.output_tokens)):
                self._tokens.record(count, {**labels, attr.TOKEN_TYPE: kind})
        if event.latency_ms is not None:
            self._duration.record(event.latency_ms / 1000, labels)

    # -- flushing and closing ----------------------------------------------------------

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every queued event is built and sent (True) or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        self._flushing = True
        try:
            with self._idle:
                while self._queue or self._busy:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return False
                    self._wake.set()
                    self._idle.wait(min(remaining, 0.05))
        finally:
            self._flushing = False
        spans_sent = self._tracer_provider.force_flush(_millis_left(deadline))
        metrics_sent = self._meter_provider.force_flush(_millis_left(deadline))
        return bool(spans_sent and metrics_sent)

    def close(self, timeout: float = 5.0) -> None:
        """Send what is queued (up to ``timeout``), then stop; later events are dropped."""
        if self._closed:
            return
        self.flush(timeout)
        self._closed = True
        self._stopping = True
        self._wake.set()
        self._worker.join(timeout)
        self._tracer_provider.shutdown()
        self._meter_provider.shutdown(timeout_millis=timeout * 1000)

    def export_all(self, events: Iterable[UsageEvent]) -> int:
        """Emit ``events`` on this thread (``ledger otel export``); returns how many."""
        count = 0
        for event in events:
            self.emit(event)
            count += 1
        return count


def _millis_left(deadline: float) -> int:
    """Milliseconds until ``deadline`` (monotonic), at least 1: the SDK's flushes take ints."""
    return max(1, int((deadline - time.monotonic()) * 1000))


def _restart_workers_after_fork() -> None:
    # The worker thread did not survive the fork; the SDK's processors restart their own.
    for exporter in list(_live):
        exporter._after_fork()


_live: weakref.WeakSet[OTelExporter] = weakref.WeakSet()
os.register_at_fork(after_in_child=_restart_workers_after_fork)
