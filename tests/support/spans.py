"""OML's tracing recorded in memory for one test (services/runtime/tracing.py): the spans a block exports, and their
names, attributes, statuses and events as one JSON text a test can search for a leaked value."""
from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from oml.services.runtime import tracing


@contextmanager
def recorded_spans() -> Iterator[InMemorySpanExporter]:
    """Tracing on, into an in-memory exporter, for the block; off after it."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use(provider)
    try:
        yield exporter
    finally:
        tracing.use(None)


def exported(exporter: InMemorySpanExporter) -> str:
    """Every finished span's name, attributes, status description and events, as JSON text."""
    return json.dumps([[s.name, dict(s.attributes or {}), s.status.description,
                        [[e.name, dict(e.attributes or {})] for e in s.events]] for s in exporter.get_finished_spans()],
                      default=str)
