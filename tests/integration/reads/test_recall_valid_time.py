"""Valid time on the read path: a default recall answers "valid now".

A claim whose declared ``valid_to`` has passed, or whose ``valid_from`` lies
ahead, is not served by a recall that names no ``valid_at`` — over HTTP and
over MCP — and the diagnostics count what valid time left out. ``valid_at``
asks about another instant; ``as_of`` moves the default to that instant;
segment 1 applies the steering rows' own valid time at the read's instant and
no client filter. Regression: before the fix a default recall served expired
and not-yet-valid facts.
"""
from __future__ import annotations

import datetime as dt

import anyio
import pytest
from fastapi.testclient import TestClient

from oml.services.entrypoints.http.app import create_app
from oml.services.reads.recall import Recaller, RecallRequest

from support.recall import keep_results, make_world, owner


def _iso(t: dt.datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


NOW = dt.datetime.now(dt.UTC)
PAST = _iso(NOW - dt.timedelta(days=2))
FUTURE = _iso(NOW + dt.timedelta(days=365))


@pytest.fixture(scope="module")
def world(ctx):
    w = make_world(ctx, "valid-time")
    w.current = w.remember("main.ops", "The glacier backup vault rotates its keys every quarter.")
    w.bounded = w.remember("main.ops", "The glacier backup vault is replicated to a second region.", valid_to=FUTURE)
    w.expired = w.remember("main.ops", "The glacier backup vault is frozen for the audit.",
                           valid_from="2020-01-01T00:00:00Z", valid_to=PAST)
    w.future = w.remember("main.ops", "The glacier backup vault moves to the new provider.", valid_from=FUTURE)
    w.steer_now = w.remember("main", "Mention the glacier vault owner in every answer.", kind="steering", valid_to=FUTURE)
    w.steer_old = w.remember("main", "Do not touch the glacier vault during the freeze.", kind="steering", valid_to=PAST)
    w.steer_new = w.remember("main", "Route glacier vault questions to the new provider.", kind="steering", valid_from=FUTURE)
    w.index()
    w.reader = w.key("reader")
    w.reader_key = w.keys[w.reader.principal_id]
    return w


def _claims(items) -> set[str]:
    return {i["claim_id"] for i in items}


def _check_default(w, out: dict) -> None:
    assert _claims(out["hits"]) == {w.current["claim_id"], w.bounded["claim_id"]}
    assert _claims(out["steering"]) == {w.steer_now["claim_id"]}
    vt = out["diagnostics"]["valid_time"]
    assert vt["source"] == "now" and vt["at"] is not None
    assert vt["excluded_hits"] == {"expired": 1, "not_yet_valid": 1, "truncated": False}
    assert vt["excluded_steering"] == {"expired": 1, "not_yet_valid": 1}


@pytest.mark.parametrize("retriever", ["fts", "vector", "hybrid"])
def test_default_recall_is_valid_now(world, ctx, retriever):
    out = Recaller(ctx).recall(world.reader, RecallRequest(query="glacier backup vault", retriever=retriever, k=10))
    _check_default(world, out)


def test_valid_at_asks_about_another_instant(world, ctx):
    r = Recaller(ctx)
    then = r.recall(world.reader, RecallRequest(query="glacier backup vault", retriever="fts", valid_at="2021-06-01T00:00:00Z"))
    assert _claims(then["hits"]) == {world.current["claim_id"], world.bounded["claim_id"], world.expired["claim_id"]}
    assert then["diagnostics"]["valid_time"]["source"] == "filter"
    # The filter is a client's: segment 1 still applies its rows' valid time at the read's instant.
    assert _claims(then["steering"]) == {world.steer_now["claim_id"]}
    later = r.recall(world.reader, RecallRequest(query="glacier backup vault", retriever="fts", valid_at=_iso(NOW + dt.timedelta(days=400))))
    assert _claims(later["hits"]) == {world.current["claim_id"], world.future["claim_id"]}


def test_as_of_moves_the_default_instant(world, ctx):
    out = Recaller(ctx).recall(world.reader, RecallRequest(query="glacier backup vault", retriever="fts", as_of=_iso(NOW + dt.timedelta(hours=1))))
    vt = out["diagnostics"]["valid_time"]
    assert vt["source"] == "as_of" and vt["at"] == (NOW + dt.timedelta(hours=1)).isoformat()
    assert _claims(out["hits"]) == {world.current["claim_id"], world.bounded["claim_id"]}


def test_http_recall_is_valid_now(world, ctx):
    client = TestClient(create_app(ctx))
    hdr = {"Authorization": f"Bearer {world.reader_key}"}
    r = client.post("/v1/recall", json={"query": "glacier backup vault", "retriever": "fts"}, headers=hdr)
    assert r.status_code == 200, r.text
    _check_default(world, r.json())
    r = client.post("/v1/recall", json={"query": "glacier backup vault", "retriever": "fts",
                                        "filters": {"valid_at": "2021-06-01T00:00:00Z"}}, headers=hdr)
    assert r.status_code == 200 and world.expired["claim_id"] in _claims(r.json()["hits"])


def test_mcp_recall_is_valid_now(world, ctx):
    from mcp import Client

    from oml.services.entrypoints.mcp_server import build_server

    from support.mcp_calls import payload

    async def run():
        async with Client(build_server(ctx, stdio_keys=[world.reader_key]), read_timeout_seconds=120) as c:
            _check_default(world, payload(await c.call_tool("recall", {"query": "glacier backup vault", "retriever": "fts"})))
            then = payload(await c.call_tool("recall", {"query": "glacier backup vault", "retriever": "fts",
                                                        "valid_at": "2021-06-01T00:00:00Z"}))
            assert world.expired["claim_id"] in _claims(then["hits"])

    anyio.run(run)


def test_the_count_reads_only_rows_that_declare_a_valid_time(world, ctx, monkeypatch):
    import sqlalchemy as sa

    from oml.services.reads import recall as server_recall

    # The count is built by outside_query and sent in a pipeline with the candidates' rows: the statement the
    # recall built is explained afterwards, as the reader's role bound to its tenant.
    sent = keep_results(monkeypatch, server_recall, "outside_query")
    server_recall.Recaller(ctx).recall(world.reader, RecallRequest(query="glacier", retriever="fts"))
    plans = []
    for stmt, params in sent:
        with ctx.db.tenant("oml_server", world.reader.tenant) as conn:
            plans.append("\n".join(r[0] for r in conn.execute(sa.text("EXPLAIN " + str(stmt)), params)))
    with owner(ctx) as c:
        leaves = set(c.execute(sa.text("SELECT c.relname FROM pg_partition_tree('memories_fts_valid_time') t"
                                       " JOIN pg_class c ON c.oid = t.relid WHERE t.isleaf")).scalars())
    assert len(plans) == 1 and any(f"using {name} " in plans[0] for name in leaves), plans
