"""OpenTelemetry, both ways: GenAI spans and metrics out, GenAI client spans in.

* :class:`~ledger.otel.export.OTelExporter` mirrors every recorded attempt as
  a GenAI span and the ``gen_ai.client.*`` histograms
  (``Ledger(exporters=[...])`` or ``LEDGER_OTEL_ENDPOINT``).
* :class:`~ledger.otel.receiver.OTLPReceiver` is an ASGI app taking OTLP/HTTP
  traces (``POST /v1/traces``) from other instrumentations and recording their
  GenAI client spans as ``token_usage`` rows (``ledger otlp``).

Needs the ``otel`` extra (``pip install 'ledger[otel]'``).
"""
