"""The BM25 lexical leg: the same ids, in the same order, as a plain BM25 computed here.

Real PostgreSQL, the real indexer and the real read path (``Recaller(lexical="bm25")``). The reference
takes each document's lexemes and positions from PostgreSQL's own parser (``to_tsvector('english', …)`` of
its full-text index text, ``context_window.lexical_text``: what the index holds) and computes Okapi BM25 (k1 1.2, b 0.75, idf ln(1 + (N − df + 0.5)/(df + 0.5)))
in Python over the tenant's current rows.
"""
from __future__ import annotations

import math

import pytest
import sqlalchemy as sa

from oml.domain import recall as R
from oml.domain.context_window import lexical_text
from oml.services.reads import bm25
from oml.services.reads.recall import Recaller, RecallRequest
from oml.workers.index import indexer

from support.erasure import make_ekit, owner
from support.recall import make_world

DOCS = [
    "the harbour crane lifted the red container",
    "a red container, a red crane, a red boat and a red harbour at dusk",
    "crane",
    "the boat left the harbour before the storm reached the coast and the crane was tied down",
    "nothing about any of that here at all",
    "harbour harbour harbour",
    "the storm broke the crane",
]
QUERIES = ["red crane in the harbour", "storm crane", "harbour boat", "container"]


@pytest.fixture(scope="module")
def kit(ctx):
    k = make_ekit(ctx, "bm25")
    k.ids = [k.claim(d)["claim_id"] for d in DOCS]
    indexer.catch_up(ctx, k.tenant)
    return k


def _terms(conn, text: str) -> dict[str, int]:
    rows = conn.execute(sa.text("SELECT u.lexeme, cardinality(u.positions) FROM unnest(to_tsvector('english', :x)) u"),
                        {"x": text}).all()
    return {lx: n for lx, n in rows}


def _plain_bm25(ctx, tenant: str, query: str) -> list[tuple[int, float]]:
    with owner(ctx, tenant) as conn:
        docs = [_terms(conn, lexical_text(d, [])) for d in DOCS]
        q = sorted(_terms(conn, query))
    n = len(docs)
    avgdl = sum(sum(d.values()) for d in docs) / n
    out = []
    for i, d in enumerate(docs):
        dl = sum(d.values())
        s = 0.0
        for t in q:
            if t in d:
                df = sum(1 for x in docs if t in x)
                idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
                s += idf * d[t] * (bm25.K1 + 1) / (d[t] + bm25.K1 * (1 - bm25.B + bm25.B * dl / avgdl))
        if s > 0:
            out.append((i, s))
    return sorted(out, key=lambda x: -x[1])


@pytest.mark.parametrize("query", QUERIES)
def test_bm25_leg_matches_a_plain_bm25(ctx, kit, query):
    want = _plain_bm25(ctx, kit.tenant, query)
    assert len({round(s, 9) for _, s in want}) == len(want), "the corpus must not tie, so the order is the test"
    out = Recaller(ctx, lexical="bm25").recall(kit.reader, RecallRequest(query=query, retriever="fts", k=10,
                                                                          workarea_id=kit.wa))
    assert [h["claim_id"] for h in out["hits"]] == [kit.ids[i] for i, _ in want]
    assert [h["score"] for h in out["hits"]] == pytest.approx([s for _, s in want], rel=1e-6)
    assert out["diagnostics"]["legs"]["fts"]["ranking"] == "bm25"


@pytest.mark.parametrize("lexical", ["bm25", "ts_rank"])
def test_a_query_keeps_its_first_64_lexemes_and_says_what_it_dropped(ctx, kit, lexical):
    filler = " ".join(f"zq{i:03d}" for i in range(R.LEXEMES_MAX + 6))
    rec = Recaller(ctx, lexical=lexical)
    late = rec.recall(kit.reader, RecallRequest(query=f"{filler} crane", retriever="fts", k=10, workarea_id=kit.wa))
    early = rec.recall(kit.reader, RecallRequest(query=f"crane {filler}", retriever="fts", k=10, workarea_id=kit.wa))
    # "crane" is the 71st lexeme in one query (dropped: nothing matches the filler) and the first in the other.
    assert late["hits"] == [] and {kit.ids[i] for i in (0, 1, 2, 3, 6)} == {h["claim_id"] for h in early["hits"]}
    for out, dropped in ((late, 7), (early, 7)):
        fts = out["diagnostics"]["legs"]["fts"]
        assert fts["lexemes"] == R.LEXEMES_MAX and fts["lexemes_dropped"] == dropped
        assert [d["reason"] for d in out["diagnostics"]["degraded"]] == ["fts.lexemes_capped"]


def test_bm25_differs_from_ts_rank_somewhere(ctx, kit):
    # The leg is not ts_rank under another name: on this corpus at least one query orders differently.
    differ = 0
    for query in QUERIES:
        a = Recaller(ctx, lexical="bm25").recall(kit.reader, RecallRequest(query=query, retriever="fts", k=10, workarea_id=kit.wa))
        b = Recaller(ctx, lexical="ts_rank").recall(kit.reader, RecallRequest(query=query, retriever="fts", k=10, workarea_id=kit.wa))
        differ += [h["claim_id"] for h in a["hits"]] != [h["claim_id"] for h in b["hits"]]
    assert differ >= 1


def test_bm25_function_refuses_without_a_tenant(ctx, kit):
    with ctx.db.system("oml_server") as conn, pytest.raises(Exception, match="no tenant bound"):
        conn.execute(sa.text("SELECT * FROM oml_bm25_search(CAST('crane' AS tsquery), ARRAY['crane'],"
                             " ARRAY['main'], NULL, NULL, NULL, NULL, NULL, 10)")).all()


def test_bm25_scores_ignore_rows_outside_the_readers_scope(ctx):
    """N, avgdl and df come from the rows the read admits (61_bm25.sql): a reader rooted at main.eng cannot tell from
    its scores which words occur in main.hr. Two visible rows that tie on their own words still tie after rows it may
    not read gain one of the words (with tenant-wide statistics they stopped tying)."""
    w = make_world(ctx, "bm25-scope")
    a = w.remember("main.eng", "zephyr plans")
    b = w.remember("main.eng", "kestrel plans")
    w.area("main.hr")
    w.index()
    reader = w.key("reader", "main.eng")

    def scores():
        out = Recaller(ctx, lexical="bm25").recall(reader, RecallRequest(query="zephyr kestrel", retriever="fts", k=10))
        return {h["claim_id"]: h["score"] for h in out["hits"]}

    s0 = scores()
    assert s0[a["claim_id"]] == pytest.approx(s0[b["claim_id"]])
    for i in range(3):  # out of the reader's scope
        w.remember("main.hr", f"zephyr salary review {i}")
    w.index()
    s1 = scores()
    assert set(s1) == {a["claim_id"], b["claim_id"]}  # nothing from main.hr is returned ...
    # ... but its words move the scores the reader sees:
    assert s1[a["claim_id"]] == pytest.approx(s1[b["claim_id"]]), (
        f"zephyr row {s1[a['claim_id']]:.4f} vs kestrel row {s1[b['claim_id']]:.4f}: out-of-scope rows hold 'zephyr'")


def test_bm25_scores_ignore_a_moved_workareas_rows_while_one_row_keeps_its_old_path(ctx):
    """A batch of the indexer that read a workarea's path before a move committed writes its row with the old path
    (the move's own update of the index rows cannot see it); its next batch refreshes it. Meanwhile that workarea's
    rows lie on both sides of a reader's scope. The maintained document frequencies are per workarea, so the
    bounded search would count every row of the moved workarea for a reader of the old parent: its scores must
    still not move with them (the read falls back to the exhaustive search)."""
    w = make_world(ctx, "bm25-stale-path")
    a = w.remember("main.eng", "zephyr plans")
    b = w.remember("main.eng", "kestrel plans")
    for i in range(5):
        w.remember("main.eng.pay", f"zephyr salary review {i}")
    w.area("main.hr")
    w.index()
    reader = w.key("reader", "main.eng")
    moved = w.ctx.tenancy.reparent_workarea(w.admin, w.workareas["main.eng.pay"], w.workareas["main.hr"])
    assert moved["path"] == "main.hr.pay"
    w.index()
    # The row that batch wrote: the moved workarea, the path it read before the move.
    with ctx.db.tenant("oml_indexer", w.tenant) as conn:
        conn.execute(sa.text(
            "INSERT INTO memories_fts (tenant_id, version_id, claim_id, workarea_id, path, kind, provenance, self_signed,"
            " tip_from_seq, tip_from_at, tsv) VALUES (:t, gen_random_uuid(), gen_random_uuid(), :w, 'main.eng.pay',"
            " 'fact', 'observed', false, 1000000, now(), to_tsvector('english', 'payroll calendar'))"),
            {"t": w.tenant, "w": w.workareas["main.eng.pay"]})
    out = Recaller(ctx, lexical="bm25").recall(reader, RecallRequest(query="zephyr kestrel", retriever="fts", k=10))
    s = {h["claim_id"]: h["score"] for h in out["hits"]}
    assert set(s) == {a["claim_id"], b["claim_id"]}
    assert s[a["claim_id"]] == pytest.approx(s[b["claim_id"]]), (
        f"zephyr row {s[a['claim_id']]:.4f} vs kestrel row {s[b['claim_id']]:.4f}: the moved workarea's rows hold 'zephyr'")
    assert out["diagnostics"]["legs"]["fts"]["search"] == "exhaustive"


@pytest.mark.parametrize("lexical", ["bm25", "ts_rank"])
def test_a_long_query_keeps_the_folded_lexeme_of_an_early_accented_word(ctx, kit, lexical):
    # The indexer stores folded lexemes ("crâne" is indexed as "crane"): a word the cap keeps must keep its folded
    # form, which the unfolded one ("crân…", only in rows indexed before folding) may ride along with, not displace.
    filler = " ".join(f"zq{i:03d}" for i in range(R.LEXEMES_MAX + 6))
    out = Recaller(ctx, lexical=lexical).recall(kit.reader, RecallRequest(query=f"crâne {filler}", retriever="fts",
                                                                          k=10, workarea_id=kit.wa))
    assert {kit.ids[i] for i in (0, 1, 2, 3, 6)} == {h["claim_id"] for h in out["hits"]}
    fts = out["diagnostics"]["legs"]["fts"]
    assert fts["lexemes"] == R.LEXEMES_MAX and fts["lexemes_dropped"] > 0
