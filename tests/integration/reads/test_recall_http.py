"""The read path over HTTP: POST /v1/recall, GET claims/versions/lineage, GET /v1/journal; problems per RFC 9457."""
from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from oml.services.entrypoints.http.app import create_app

from support.recall import make_world


@pytest.fixture(scope="module")
def world(ctx):
    w = make_world(ctx, "http-recall")
    w.steer = w.remember("main", "Cite every source you use.", kind="steering")
    w.fact = w.remember("main.eng", "The build pipeline runs integration tests on every merge request.",
                        source={"uri": "https://ci.example/docs", "title": "CI"})
    w.fact2 = w.remember("main.eng", "The build pipeline caches dependencies between runs.", claim_id=w.fact["claim_id"],
                         supersedes=w.fact["version_id"], source={"uri": "https://ci.example/docs", "title": "CI"})
    w.index()
    w.reader_key = w.keys[w.key("reader", "main.eng").principal_id]
    w.auditor_key = w.keys[w.key("auditor").principal_id]
    w.client = TestClient(create_app(ctx))
    return w


def h(key):
    return {"Authorization": f"Bearer {key}"}


def test_recall_over_http(world):
    r = world.client.post("/v1/recall", json={"query": "build pipeline merge request tests", "k": 3,
                                              "budget": {"max_chars": 10_000}, "filters": {"kinds": ["fact"]}},
                          headers=h(world.reader_key))
    assert r.status_code == 200, r.text
    out = r.json()
    assert [s["claim_id"] for s in out["steering"]] == [world.steer["claim_id"]]
    assert out["hits"][0]["claim_id"] == world.fact["claim_id"]
    assert out["hits"][0]["version_id"] == world.fact2["version_id"]
    assert out["hits"][0]["source"] == {"uri": "https://ci.example/docs", "title": "CI"}
    assert out["diagnostics"]["fusion"] == {"method": "rrf", "k": 10, "weights": {"fts": 1.0, "vector": 0.5}}
    # A leg's rank is a position, served as the integer docs/recall.md shows (1, not 1.0); its score stays a number.
    legs = out["hits"][0]["retrievers"]
    assert legs["fts"]["rank"] == 1 and all(type(leg["rank"]) is int for leg in legs.values()), legs
    assert type(legs["fts"]["score"]) is float and type(legs["vector"]["distance"]) is float, legs


def test_fetch_lineage_and_journal(world):
    c = world.client
    tip = c.get(f"/v1/claims/{world.fact['claim_id']}", headers=h(world.reader_key))
    assert tip.status_code == 200 and tip.json()["version_id"] == world.fact2["version_id"]
    old = c.get(f"/v1/versions/{world.fact['version_id']}", headers=h(world.reader_key))
    assert old.status_code == 200 and old.json()["is_tip"] is False
    lin = c.get(f"/v1/claims/{world.fact['claim_id']}/lineage", headers=h(world.reader_key))
    assert lin.status_code == 200 and len(lin.json()["versions"]) == 2
    j = c.get("/v1/journal?limit=2", headers=h(world.auditor_key))
    assert j.status_code == 200 and [e["seq"] for e in j.json()["events"]] == [1, 2]
    denied = c.get("/v1/journal", headers=h(world.reader_key))
    assert denied.status_code == 403 and denied.json()["code"] == "access.denied"
    assert denied.headers["content-type"].startswith("application/problem+json")


def test_problems_never_echo_input(world):
    c = world.client
    secret = "my-secret-probe-text"
    r = c.post("/v1/recall", json={"query": "x", "retriever": secret}, headers=h(world.reader_key))
    assert r.status_code == 422 and secret not in r.text
    r = c.post("/v1/recall", json={"query": "x", "k": "3"}, headers=h(world.reader_key))
    assert r.status_code == 422  # strict: no coercion
    r = c.post("/v1/recall", json={"query": "x", "unknown": secret}, headers=h(world.reader_key))
    assert r.status_code == 422 and secret not in r.text
    r = c.post("/v1/recall", json={"query": "x"}, headers=h("oml_0000000000000000_" + "0" * 64))
    assert r.status_code == 401 and r.json()["code"] == "access.unauthenticated"
    r = c.get("/v1/claims/00000000-0000-0000-0000-000000000000", headers=h(world.reader_key))
    assert r.status_code == 404 and r.json()["code"] == "claim.not_found"
    r = c.post("/v1/recall", json={"query": "x", "workarea_id": "00000000-0000-0000-0000-000000000000"},
               headers=h(world.reader_key))
    assert r.status_code == 404 and r.json()["code"] == "workarea.not_found"


def test_openapi_documents_the_read_routes(world):
    spec = world.client.get("/openapi.json").json()
    for path in ("/v1/recall", "/v1/claims/{claim_id}", "/v1/versions/{version_id}", "/v1/claims/{claim_id}/lineage", "/v1/journal"):
        assert path in spec["paths"], path


def test_a_capped_query_over_http_says_so_with_counts_only(world, caplog):
    import json
    import logging

    filler = " ".join(f"kanarienvogel{i:03d}" for i in range(70))
    with caplog.at_level(logging.DEBUG):
        r = world.client.post("/v1/recall", json={"query": f"build pipeline {filler} crème brûlée", "k": 3},
                              headers=h(world.reader_key))
    assert r.status_code == 200, r.text
    d = r.json()["diagnostics"]
    assert d["legs"]["fts"]["lexemes"] == 64 and d["legs"]["fts"]["lexemes_dropped"] > 0
    assert "fts.lexemes_capped" in [x["reason"] for x in d["degraded"]]
    assert "kanarienvogel" not in json.dumps(d) and "kanarienvogel" not in caplog.text
