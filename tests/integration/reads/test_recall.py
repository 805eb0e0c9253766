"""Recall end to end: admission → review → the real indexer and model → recall as oml_server.

Covers the ordering contract (steering first, unranked, never dropped, never
repeated), the visibility predicate on the recall path, FTS on
natural-language and degenerate input, degraded retrievers, decrypt on serve
and the read log.
"""
from __future__ import annotations

import datetime as dt
import time

import pytest
import sqlalchemy as sa

from oml.domain.errors import OMLError
from oml.services.reads.recall import Recaller, RecallRequest

from support.recall import make_world, owner, read_events

FACTS = [
    ("main.eng.search", "The ranking service retrains its gradient boosted model every night at two in the morning."),
    ("main.eng.search", "Query latency for the search cluster stays below eighty milliseconds at the ninety fifth percentile."),
    ("main.eng.search", "The search team moved the inverted index to a new storage cluster in March."),
    ("main.eng.search", "Spelling correction uses a noisy channel model trained on query logs."),
    ("main.eng.ops", "The on-call rotation for operations changes every Monday morning."),
    ("main.eng.ops", "Backups of the primary database are taken every six hours and kept for thirty five days."),
    ("main.sales", "The sales team closed the quarter above target in the northern region."),
    ("main", "The company was founded in a garage by three engineers."),
]
STEERING = [
    ("main", "Always answer in British English and cite the source of every statement."),
    ("main.eng", "Never recommend deleting production data without a second engineer reviewing it."),
    ("main.eng.search", "Prefer measured numbers over estimates when describing search performance."),
    ("main.eng.ops", "Escalate any backup failure to the database owner within one hour."),
]


@pytest.fixture(scope="module")
def world(ctx):
    w = make_world(ctx, "recall-a")
    for path, s in FACTS:
        w.remember(path, s, source={"uri": f"https://wiki.example/{path}", "title": "wiki"})
    w.steer = {}
    for path, s in STEERING:
        w.steer[path] = w.remember(path, s, kind="steering")
        time.sleep(0.002)
    w.remember("main.eng.search", "A held claim about the ranking model that nobody reviewed yet.", promote=False)
    demoted = w.remember("main.eng.search", "The ranking model was retrained on a demoted schedule every hour.")
    ctx.admission.review(w.reviewer, demoted["version_id"], "demote", "inaccurate")
    w.demoted = demoted
    w.area("main.eng.dev", development=True)
    w.self_signed = w.remember("main.eng.dev", "The ranking prototype in development uses a tiny model.",
                               author=w.writer, reviewer=w.key("reviewer", "main", identity=w.writer_identity))
    w.index()
    w.reader = w.key("reader", "main.eng")
    w.recaller = Recaller(ctx)
    return w


def recall(w, **kw):
    return w.recaller.recall(kw.pop("principal", w.reader), RecallRequest(**kw))


def search_scope(w):
    return w.workareas["main.eng.search"]


@pytest.mark.parametrize("retriever", ["fts", "vector", "hybrid"])
@pytest.mark.parametrize("budget", [None, 0, 40, 400])
def test_steering_first_for_every_retriever_and_budget(world, retriever, budget):
    out = recall(world, query="how often is the ranking model retrained", workarea_id=search_scope(world),
                 retriever=retriever, k=5, max_chars=budget)
    steer = out["steering"]
    # main (above the key's root main.eng), main.eng, main.eng.search: ancestors first; main.eng.ops never.
    assert [s["workarea"]["path"] for s in steer] == ["main", "main.eng", "main.eng.search"]
    assert all(s["kind"] == "steering" and s["score"] is None for s in steer)
    assert {s["claim_id"] for s in steer}.isdisjoint({h["claim_id"] for h in out["hits"]})
    if budget == 0:
        assert out["hits"] == [] and out["diagnostics"]["excluded_by_budget"] > 0
    if budget is None:
        assert out["hits"], out["diagnostics"]
        assert "retrains" in out["hits"][0]["body"]["statement"]


def test_client_filters_do_not_touch_segment_one(world):
    base = recall(world, query="ranking model", workarea_id=search_scope(world), retriever="fts")
    filtered = recall(world, query="ranking model", workarea_id=search_scope(world), retriever="fts",
                      kinds=["fact"], provenances=["inferred"], k=1)
    assert [s["claim_id"] for s in filtered["steering"]] == [s["claim_id"] for s in base["steering"]]
    assert filtered["hits"] == []  # no inferred facts exist


def test_ancestor_facts_do_not_apply(world):
    out = recall(world, query="company founded garage engineers", retriever="fts")
    assert all("garage" not in h["body"]["statement"] for h in out["hits"])
    # The key's roots are the default scope: main.eng's steering and main's, not ops'/search's (they are hits).
    assert [s["workarea"]["path"] for s in out["steering"]] == ["main", "main.eng"]


def test_default_scope_is_the_keys_roots(world):
    out = recall(world, query="sales quarter target northern region", retriever="fts")
    assert all(h["workarea"]["path"].startswith("main.eng") for h in out["hits"])


def test_scope_outside_access_is_not_found(world):
    with pytest.raises(OMLError) as e:
        recall(world, query="x", workarea_id=world.workareas["main.sales"])
    assert e.value.code == "workarea.not_found"


def test_twenty_ordinary_words_return_fts_hits(world):
    q = ("could you please tell me how often and at what time of the night the ranking service retrains its model for search")
    assert len(q.split()) >= 20
    out = recall(world, query=q, retriever="fts", k=5)
    assert out["hits"], out["diagnostics"]
    assert out["diagnostics"]["legs"]["fts"]["mode"] == "or"
    assert "retrains" in out["hits"][0]["body"]["statement"]


@pytest.mark.parametrize("q", ["the and of a to", "!!! ??? ... ;;; &&& ||| :* ''", "", "   ", "(((", "\\'\"&|!<->:*"])
def test_degenerate_input_degrades_without_error(world, q):
    fts = recall(world, query=q, retriever="fts")
    assert fts["hits"] == []
    assert fts["steering"]  # steering still served
    reasons = {d["reason"] for d in fts["diagnostics"]["degraded"]}
    assert reasons & {"fts.no_lexemes", "query.empty"}
    hyb = recall(world, query=q, retriever="hybrid")
    if q.strip():
        assert any(d["retriever"] == "fts" and "vector leg only" in d["detail"] for d in hyb["diagnostics"]["degraded"])
        assert hyb["diagnostics"]["candidates"].get("vector", 0) > 0


def test_model_unavailable_degrades_to_fts_and_says_so(world, ctx):
    def broken(_text):
        raise OSError("no model")

    r = Recaller(ctx, embed=broken)
    out = r.recall(world.reader, RecallRequest(query="ranking model retrained", retriever="hybrid"))
    assert out["hits"]
    assert out["diagnostics"]["degraded"][0]["reason"] == "vector.model_unavailable"
    assert "FTS only" in out["diagnostics"]["degraded"][0]["detail"]
    assert "vector" not in out["diagnostics"]["candidates"]
    vec = r.recall(world.reader, RecallRequest(query="ranking model retrained", retriever="vector"))
    assert vec["hits"] == [] and vec["steering"]


def test_held_demoted_and_self_signed_rows(world):
    out = recall(world, query="ranking model", workarea_id=search_scope(world), retriever="fts", k=20)
    texts = [h["body"]["statement"] for h in out["hits"]]
    assert not any("held claim" in t for t in texts)
    assert not any("demoted schedule" in t for t in texts)
    wide = recall(world, query="ranking prototype development tiny model", retriever="fts", k=20)
    assert not any("prototype" in h["body"]["statement"] for h in wide["hits"])
    scoped = recall(world, query="ranking prototype development tiny model", retriever="fts", k=20,
                    workarea_id=world.workareas["main.eng.dev"])
    assert [h["claim_id"] for h in scoped["hits"]] == [world.self_signed["claim_id"]]
    assert scoped["hits"][0]["self_signed"] is True


def test_item_shape_and_hybrid_fusion(world):
    out = recall(world, query="how often is the ranking model retrained", workarea_id=search_scope(world), k=3)
    d = out["diagnostics"]
    assert d["fusion"] == {"method": "rrf", "k": 10, "weights": {"fts": 1.0, "vector": 0.5}}
    assert set(d["candidates"]) == {"fts", "vector"}
    assert d["returned"] == {"steering": 3, "hits": len(out["hits"])}
    h = out["hits"][0]
    assert set(h) >= {"claim_id", "version_id", "workarea", "kind", "provenance", "valid_from", "valid_to", "score",
                      "retrievers", "body", "source"}
    assert h["workarea"] == {"id": search_scope(world), "path": "main.eng.search"}
    assert h["source"]["uri"] == "https://wiki.example/main.eng.search"
    assert set(h["retrievers"]) <= {"fts", "vector"} and h["retrievers"]
    scores = [x["score"] for x in out["hits"]]
    assert scores == sorted(scores, reverse=True)


def test_as_of_reads_the_tips_of_that_instant(world, ctx):
    w = world
    v1 = w.remember("main.eng.search", "The relevance dashboard refreshes every fifteen minutes.")
    w.index()
    between = dt.datetime.now(dt.UTC)
    time.sleep(0.01)
    v2 = w.remember("main.eng.search", "The relevance dashboard refreshes every five minutes.",
                    claim_id=v1["claim_id"], supersedes=v1["version_id"])
    w.index()
    now_out = recall(w, query="relevance dashboard refreshes", retriever="fts", workarea_id=search_scope(w))
    then_out = recall(w, query="relevance dashboard refreshes", retriever="fts", workarea_id=search_scope(w), as_of=between)
    now_v = [h["version_id"] for h in now_out["hits"] if h["claim_id"] == v1["claim_id"]]
    then_v = [h["version_id"] for h in then_out["hits"] if h["claim_id"] == v1["claim_id"]]
    assert now_v == [v2["version_id"]] and then_v == [v1["version_id"]]
    before = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
    empty = recall(w, query="relevance dashboard refreshes", retriever="hybrid", as_of=before)
    assert empty["hits"] == [] and empty["steering"] == []


def test_every_recall_is_logged_with_a_keyed_digest_never_text(world, ctx):
    before = len(read_events(ctx, world.tenant))
    q = "nightly retraining of the ranking model"
    out = recall(world, query=q, workarea_id=search_scope(world))
    rows = read_events(ctx, world.tenant)
    assert len(rows) == before + 1
    r = rows[-1]
    assert r.op == "recall" and r.role == "reader" and r.principal_id == world.reader.principal_id
    assert str(r.identity_id) == world.reader.identity_id
    assert [str(x) for x in r.workarea_ids] == [search_scope(world)]
    served = {h["claim_id"] for h in out["hits"]} | {s["claim_id"] for s in out["steering"]}
    assert {str(x) for x in r.claim_ids} == served
    from oml.domain.recall import query_digest

    assert bytes(r.query_digest) == query_digest(ctx.keystore.get(world.tenant, "query-hmac"), q)
    with owner(ctx, world.tenant) as c:
        dump = c.execute(sa.text("SELECT string_agg(t::text, ' ') FROM read_events t WHERE tenant_id = :t"),
                         {"t": world.tenant}).scalar()
    assert "retraining" not in dump


def test_roles_that_may_not_read(world):
    for role in ("writer", "indexer", "admin"):
        p = world.key(role)
        with pytest.raises(OMLError) as e:
            recall(world, principal=p, query="x")
        assert e.value.code == "access.denied"


def test_invalid_requests_never_echo(world):
    for kw, field in ((dict(k=0), "k"), (dict(retriever="bm25"), "retriever"), (dict(kinds=["secret-kind"]), "filters.kinds"),
                      (dict(as_of="not a time"), "as_of"), (dict(query="x" * 5000), "query")):
        with pytest.raises(OMLError) as e:
            recall(world, **kw)
        assert e.value.code == "recall.invalid" and e.value.extra.get("field") == field
        assert "secret-kind" not in str(e.value) and "not a time" not in str(e.value)
