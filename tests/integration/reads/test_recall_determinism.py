"""Deterministic, meaningful ranking: two ingestions of one corpus rank identically.

``ts_rank`` gives few distinct scores, and ties used to fall to the random
version id, so the same corpus ingested twice (here: into two tenants, in
the same order) answered in different orders. Ties now fall to a second
score (``ts_rank_cd``), then recency (the seq the version became tip at,
newer first), and RRF's ties to the legs' own orders — never to an id alone.
Regression: on the old code the tied block below came back in a different
order per tenant.
"""
from __future__ import annotations

import pytest

from oml.services.reads.recall import Recaller, RecallRequest

from support.recall import make_world

# A block of statements equal for every query below (same words, same positions: equal ts_rank and
# ts_rank_cd), a few with the words closer together (higher ts_rank_cd, equal ts_rank), duplicates
# (equal vectors), and filler.
TIED = [f"Item {i}: the quarterly deployment window report is ready for review." for i in range(12)]
CLOSER = [f"Item {i}: deployment window report ready, quarterly, for review." for i in range(12, 15)]
DUPLICATES = ["The deployment window closes on Friday evening."] * 3
FILLER = ["The cafeteria serves soup on Mondays.", "Parking permits renew every January.",
          "The quarterly report template lives in the wiki.", "Review meetings start at ten."]
CORPUS = TIED + CLOSER + DUPLICATES + FILLER
# Near-equal statements whose valid time differs, for the time leg (a query that names a month).
DATED = [(f"2023-0{5 + i % 2}-{10 + i:02d}T09:00:00+00:00", f"Note {i}: the deployment window report was filed.")
         for i in range(6)]
QUERIES = ["deployment window report", "quarterly review", "when does the deployment window close",
           "report ready for review", "which deployment window report was filed in May 2023"]


@pytest.fixture(scope="module")
def worlds(ctx):
    out = []
    for tenant in ("rank-a", "rank-b"):
        w = make_world(ctx, tenant)
        for s in CORPUS:  # one claim, one promotion at a time: the same order of tip seqs in both tenants
            w.remember("main.docs", s)
        for at, s in DATED:
            w.remember("main.docs", s, valid_from=at)
        w.index()
        w.reader = w.key("reader")
        out.append(w)
    return out


def _statements(ctx, w, query: str, retriever: str, k: int = 25, lexical: str | None = None) -> list[str]:
    out = Recaller(ctx, lexical=lexical).recall(w.reader, RecallRequest(query=query, retriever=retriever, k=k))
    return [h["body"]["statement"] for h in out["hits"]]


@pytest.mark.parametrize("lexical", ["bm25", "ts_rank"])
@pytest.mark.parametrize("retriever", ["fts", "vector", "hybrid"])
@pytest.mark.parametrize("query", QUERIES)
def test_two_ingestions_rank_identically(ctx, worlds, retriever, query, lexical):
    a, b = (_statements(ctx, w, query, retriever, lexical=lexical) for w in worlds)
    assert a and a == b


def test_the_time_leg_ranks_identically(ctx, worlds):
    outs = [Recaller(ctx, time_leg=True).recall(w.reader, RecallRequest(query=QUERIES[-1], k=25)) for w in worlds]
    assert all("time" in o["diagnostics"]["legs"] for o in outs)
    a, b = ([(h["body"]["statement"], h["score"]) for h in o["hits"]] for o in outs)
    assert a and a == b


def test_ties_fall_to_cover_density_then_recency(ctx, worlds):
    got = _statements(ctx, worlds[0], "deployment window report", "fts", lexical="ts_rank")
    block = [s for s in got if s in TIED or s in CLOSER]
    # Equal ts_rank: the words-closer-together statements first (ts_rank_cd), each group newest first.
    assert block == list(reversed(CLOSER)) + list(reversed(TIED))


def test_rrf_ties_are_broken_by_the_legs_orders(ctx, worlds):
    out = Recaller(ctx).recall(worlds[0].reader, RecallRequest(query="deployment window report", retriever="hybrid", k=25))
    keys = [(-h["score"], min(r["rank"] for r in h["retrievers"].values()), -len(h["retrievers"]),
             h["retrievers"].get("fts", {}).get("rank", float("inf")), h["retrievers"].get("vector", {}).get("rank", float("inf")))
            for h in out["hits"]]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)


# A conversation whose turns declare their thread and position, indexed with the default context window
# (index_context_before): short replies are found through the turns before them, and repeated replies tie.
THREAD = ["Nina: the deployment window moved to Friday evening.", "Omar: yes.", "Nina: the report is ready for review.",
          "Omar: yes.", "Nina: the quarterly review starts at ten.", "Omar: ok, thanks.", "Nina: the report was filed.",
          "Omar: yes.", "Nina: the deployment window closes on Friday.", "Omar: ok, thanks."]


@pytest.fixture(scope="module")
def threaded(ctx):
    out = []
    for tenant in ("rank-thread-a", "rank-thread-b"):
        w = make_world(ctx, tenant)
        for i, s in enumerate(THREAD):
            w.remember("main.chat", s, context={"thread": "chat-1", "position": i})
        w.index()
        w.reader = w.key("reader")
        out.append(w)
    return out


@pytest.mark.parametrize("retriever", ["fts", "vector", "hybrid"])
@pytest.mark.parametrize("query", QUERIES)
def test_two_ingestions_of_a_thread_rank_identically_with_the_default_window(ctx, threaded, retriever, query):
    assert ctx.settings.index_context_before >= 1
    a, b = (_statements(ctx, w, query, retriever) for w in threaded)
    assert a and a == b
