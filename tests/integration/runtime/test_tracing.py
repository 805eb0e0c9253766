"""OpenTelemetry spans across HTTP → admission → journal and recall → SQL legs → decrypt.

Spans go to the SDK's in-memory exporter through OML's own provider
(services/runtime/tracing.py); the test checks the span names, their parent links,
and that no attribute carries the query or the body (a canary).
"""
from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from oml.services.entrypoints.http.app import create_app
from oml.services.runtime import tracing

from support.recall import make_world
from support.spans import recorded_spans

CANARY = "zebracanary"


@pytest.fixture(scope="module")
def world(ctx):
    w = make_world(ctx, "tracing")
    w.fact = w.remember("main", "The tracing fixture stores one promoted fact about spans.")
    w.index()
    w.reader_key = w.keys[w.key("reader").principal_id]
    w.writer_key = w.keys[w.writer.principal_id]
    w.client = TestClient(create_app(ctx))
    return w


@pytest.fixture()
def spans():
    with recorded_spans() as exporter:
        yield exporter


def _tree(exporter):
    got = exporter.get_finished_spans()
    by_id = {s.context.span_id: s for s in got}
    parent = {s.name: (by_id[s.parent.span_id].name if s.parent and s.parent.span_id in by_id else None) for s in got}
    return got, parent


def _no_content(got):
    for s in got:
        for v in (s.attributes or {}).values():
            assert CANARY not in str(v), s.name


def test_a_write_is_one_trace_from_http_to_the_journal(world, spans):
    r = world.client.post("/v1/claims", json={"workarea_id": world.root, "body": {"statement": f"A {CANARY} fact."}},
                          headers={"Authorization": f"Bearer {world.writer_key}"})
    assert r.status_code == 200, r.text
    got, parent = _tree(spans)
    assert parent["admission.submit"] == "HTTP POST /v1/claims"
    # A submission is a group commit (services/journal/batch.py): each event is linked (hashed and signed) under
    # the head lock, then the rows are written as a set.
    assert parent["journal.link"] == "admission.submit" and parent["journal.write"] == "admission.submit"
    server = next(s for s in got if s.name == "HTTP POST /v1/claims")
    assert server.attributes["http.response.status_code"] == 200 and server.parent is None
    linked = next(s for s in got if s.name == "journal.link")
    assert linked.attributes["oml.event_type"] == "claim.submitted"
    _no_content(got)


def test_a_recall_is_explained_by_its_children(world, spans):
    r = world.client.post("/v1/recall", json={"query": f"tracing fixture spans {CANARY}", "retriever": "hybrid"},
                          headers={"Authorization": f"Bearer {world.reader_key}"})
    assert r.status_code == 200, r.text
    got, parent = _tree(spans)
    assert parent["recall"] == "HTTP POST /v1/recall"
    for child in ("recall.embed", "recall.steering", "recall.fts", "recall.vector", "recall.decrypt", "readlog.record"):
        assert parent.get(child) == "recall", (child, parent)
    _no_content(got)


def test_off_means_no_spans(world):
    exporter = InMemorySpanExporter()
    tracing.use(None)
    r = world.client.get(f"/v1/claims/{world.fact['claim_id']}", headers={"Authorization": f"Bearer {world.reader_key}"})
    assert r.status_code == 200
    assert exporter.get_finished_spans() == ()
