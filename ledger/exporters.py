"""The seam between :meth:`Ledger.record` and anything that mirrors rows elsewhere.

An *exporter* receives every event ``record()`` accepted, on the caller's
thread, after the event is safe in the journal. It must return at once (queue
the event and do the work on a thread of its own) and must never raise: the
ledger logs and ignores an exporter that does, because a mirror failing must
never cost a row or an LLM call. :class:`ledger.otel.OTelExporter` is the one
the project ships (OpenTelemetry GenAI spans and metrics).

Configuration switches the OpenTelemetry exporter on without code:
``LEDGER_OTEL_ENDPOINT=http://collector:4318`` makes every :class:`Ledger`
built without an explicit ``exporters=`` export OTLP/HTTP there; so does
``otel_endpoint`` in the ``[exporters]`` section (read by :mod:`ledger.config`),
the variable winning over the file.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol, runtime_checkable

from ledger import config as cfg
from ledger.errors import SettingError
from ledger.events import UsageEvent

ENV_OTEL_ENDPOINT: Final = "LEDGER_OTEL_ENDPOINT"


@runtime_checkable
class Exporter(Protocol):
    """Mirrors recorded events elsewhere, off the caller's thread."""

    def submit(self, event: UsageEvent) -> None:
        """Take one recorded event; return at once, never raise."""

    def close(self, timeout: float = 5.0) -> None:
        """Send what is queued (up to ``timeout`` seconds) and stop."""


@dataclass(frozen=True, slots=True)
class ExporterSettings:
    """Which mirrors a :class:`Ledger` built without ``exporters=`` feeds."""

    otel_endpoint: str | None = cfg.setting(
        default=None,
        doc="export every recorded row as OpenTelemetry GenAI spans and metrics, OTLP/HTTP",
        env=ENV_OTEL_ENDPOINT,
        example='"http://collector:4318"',
    )

    @classmethod
    def load(cls, path: Path | None = None) -> ExporterSettings:
        """The ``[exporters]`` section of ``path`` (else the one found), the variable over it."""
        found = cfg.read_table(SECTION, path)
        return cls(**cfg.read_settings(SECTION, found, {"otel_endpoint": cfg.text}))


SECTION: Final = cfg.Section(
    "exporters",
    ExporterSettings,
    SettingError,
    summary="Mirrors of recorded rows (the `otel` extra).",
)


def exporters_from_env() -> tuple[Exporter, ...]:
    """The exporters the configuration asks for (none unless ``LEDGER_OTEL_ENDPOINT``, or
    ``otel_endpoint`` in the ``[exporters]`` section, names an endpoint)."""
    endpoint = ExporterSettings.load().otel_endpoint
    if not endpoint:
        return ()
    # Imported here: the OpenTelemetry SDK is the optional ``otel`` extra.
    module = importlib.import_module("ledger.otel.export")
    exporter: Exporter = module.OTelExporter.to_endpoint(endpoint)
    return (exporter,)
