"""A failed span names its exception's type only: the message and the stack trace of a database error carry its
statement and the server's message, which may quote a query's words or a row's values (services/runtime/tracing.py)."""
from __future__ import annotations

import pytest

from oml.services.runtime import tracing

from support.spans import exported, recorded_spans


@pytest.fixture
def exporter():
    with recorded_spans() as got:
        yield got


def test_a_failed_span_carries_the_type_never_the_message(exporter):
    @tracing.traced("leg")
    def leg() -> None:
        with tracing.span("inner", rows=3):
            raise ValueError("canary-words quoted by the server\n[SQL: SELECT secret_column]")

    with pytest.raises(ValueError):
        leg()
    out = exported(exporter)
    assert "canary-words" not in out and "SELECT" not in out and "Traceback" not in out
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert set(spans) == {"leg", "inner"}
    for s in spans.values():
        assert not s.status.is_ok and s.attributes["error.type"] == "builtins.ValueError"
    assert spans["inner"].attributes["rows"] == 3


def test_a_span_that_succeeds_stays_unmarked(exporter):
    with tracing.span("fine"):
        pass
    (s,) = exporter.get_finished_spans()
    assert s.status.is_ok and "error.type" not in (s.attributes or {})
