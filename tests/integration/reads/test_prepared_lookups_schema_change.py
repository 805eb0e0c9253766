"""The read path's prepared lookups (``pipelined.lookup``) across a column type change made while the server runs: a
statement prepared before it cannot serve after it (PostgreSQL: "cached plan must not change result type"), so the
next read on each pooled connection holding it is refused as retry-safe (503 ``service.unavailable``, reason
``schema_changed``: nothing was committed, and the rollback drops the connection's prepared statements), and the retry
answers as before (over HTTP: a 503 with ``Retry-After``)."""
from __future__ import annotations

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from oml.services.entrypoints.http.app import create_app
from oml.services.reads.recall import RecallRequest
from oml.services.storage import timeouts

from support.owner import owner
from support.recall import read_events, reader_world


@pytest.fixture(scope="module")
def world(ctx):
    return reader_world(ctx, "schema-change", [f"The glacier survey number {i} measured less ice than planned." for i in range(3)])


def _recall(world) -> dict:
    return world.recaller.recall(world.reader, RecallRequest(query="glacier survey ice", retriever="hybrid", k=3))


def test_a_column_type_change_refuses_one_read_retry_safe_then_answers_as_before(world, ctx):
    before = sorted(h["version_id"] for h in _recall(world)["hits"])
    assert before
    logged = len(read_events(ctx, world.tenant))
    with owner(ctx) as c:
        c.execute(sa.text("ALTER TABLE claim_versions ALTER COLUMN confidence TYPE bigint"))
    with pytest.raises(sa.exc.DBAPIError) as e:
        _recall(world)
    refused = timeouts.refusal(e.value)
    assert refused is not None and refused.status == 503 and refused.extra == {"reason": "schema_changed"}
    assert len(read_events(ctx, world.tenant)) == logged  # the refused read logged nothing
    assert sorted(h["version_id"] for h in _recall(world)["hits"]) == before
    assert len(read_events(ctx, world.tenant)) == logged + 1


def test_other_unsupported_features_are_not_refused_as_retry_safe(ctx):
    with pytest.raises(sa.exc.DBAPIError) as e:
        with ctx.db.system("oml_server") as conn:
            conn.execute(sa.text("SELECT 1 FROM (SELECT count(*) FROM pg_class) x FOR UPDATE"))
    assert e.value.orig.sqlstate == "0A000" and timeouts.refusal(e.value) is None


def test_over_http_the_refusal_is_a_503_with_retry_after_and_the_retry_answers(world, ctx):
    client = TestClient(create_app(ctx), raise_server_exceptions=False)
    key = world.keys[world.reader.principal_id]

    def recall():
        return client.post("/v1/recall", json={"query": "glacier survey ice", "k": 3}, headers={"Authorization": f"Bearer {key}"})

    assert recall().status_code == 200
    with owner(ctx) as c:
        c.execute(sa.text("ALTER TABLE workareas ALTER COLUMN path TYPE varchar"))
    r = recall()
    assert r.status_code == 503 and r.json()["reason"] == "schema_changed" and r.headers["retry-after"], r.text
    assert "glacier" not in r.text
    assert recall().status_code == 200
