"""Context windows at indexing time: indexed with the claim, never served, erased with the neighbour.

Real PostgreSQL + pgvector, the real model, the real indexing feed and the
real erasure. Each claim declares ``{"thread", "position"}``; the indexer
indexes its statement with the statement before it: the mechanics below run
with a window of 1, passed explicitly, whatever the default; the last test
checks the default window (``index_context_before``) itself.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import sqlalchemy as sa

from oml.domain import context_window as windows
from oml.services.claims.admission import Submission
from oml.services.erasure.acts import Erasure
from oml.services.reads.recall import RecallRequest, recall
from oml.workers.index import embedding, indexer

from support.erasure import canary, make_ekit, owner


@pytest.fixture(scope="module")
def kit(ctx):
    return make_ekit(ctx, "ctxwin")


def _turn(kit, text: str, position: int, thread: str, workarea: str | None = None) -> dict:
    return kit.claim(text, workarea=workarea, context={"thread": thread, "position": position})


def _tsv(ctx, tenant: str, claim_id: str) -> list[str]:
    with owner(ctx, tenant) as c:
        return c.execute(sa.text("SELECT tsv::text FROM memories_fts WHERE tenant_id = :t AND claim_id = :c"),
                         {"t": tenant, "c": claim_id}).scalars().all()


def _vectors(ctx, tenant: str, claim_id: str) -> list[np.ndarray]:
    with owner(ctx, tenant) as c:
        got = c.execute(sa.text("SELECT embedding::text FROM memory_embeddings WHERE tenant_id = :t AND claim_id = :c"),
                        {"t": tenant, "c": claim_id}).scalars().all()
    return [np.array(json.loads(v)) for v in got]


def _window(ctx, tenant: str, claim_id: str):
    with owner(ctx, tenant) as c:
        return c.execute(sa.text("SELECT window_claims::text[] AS w, position FROM index_threads"
                                 " WHERE tenant_id = :t AND claim_id = :c"), {"t": tenant, "c": claim_id}).one_or_none()


def _encode(ctx, text: str) -> np.ndarray:
    return np.asarray(embedding.get_embedder(ctx.settings).encode([text])[0])


def test_window_is_indexed_and_never_served(ctx, kit):
    word, elsewhere, other = canary(), canary(), canary()
    a = _turn(kit, f"the {word} was parked by the lighthouse", 0, "chat-1")
    b = _turn(kit, "yes, last tuesday", 1, "chat-1")
    # Same thread name in another workarea, and another thread here: neither is in b's window.
    _turn(kit, f"the {elsewhere} was parked by the pier", 0, "chat-1", workarea=kit.wb)
    _turn(kit, f"the {other} stayed home", 0, "chat-2")
    indexer.catch_up(ctx, kit.tenant, context_before=1)

    (tsv,) = _tsv(ctx, kit.tenant, b["claim_id"])
    assert word in tsv and elsewhere not in tsv and other not in tsv
    # The own words count OWN_WEIGHT times, the window's once (BM25F by repetition: docs/recall.md).
    with owner(ctx, kit.tenant) as c:
        tf = dict(c.execute(sa.text("SELECT u.lexeme, cardinality(u.positions) FROM memories_fts m, unnest(m.tsv) u"
                                    " WHERE m.tenant_id = :t AND m.claim_id = :c"), {"t": kit.tenant, "c": b["claim_id"]}).all())
    assert tf["tuesday"] == windows.OWN_WEIGHT and tf["lighthous"] == 1
    (vec,) = _vectors(ctx, kit.tenant, b["claim_id"])
    want = _encode(ctx, windows.window_text("yes, last tuesday", [f"the {word} was parked by the lighthouse"]))
    assert np.allclose(vec, want, atol=1e-5)
    row = _window(ctx, kit.tenant, b["claim_id"])
    assert row.w == [a["claim_id"]] and row.position == 1
    # The first turn has no window; its own index text is its own.
    assert _window(ctx, kit.tenant, a["claim_id"]).w == []

    # Found through its window, served as itself: the body is b's own, with none of a's words.
    out = recall(ctx, kit.reader, RecallRequest(query=f"{word} tuesday", retriever="fts", k=10, workarea_id=kit.wa))
    by_claim = {h["claim_id"]: h for h in out["hits"]}
    assert b["claim_id"] in by_claim
    served = by_claim[b["claim_id"]]["body"]
    assert served["statement"] == "yes, last tuesday" and word not in json.dumps(served)
    for h in out["hits"]:
        if h["claim_id"] != a["claim_id"]:
            assert word not in json.dumps(h["body"])


def test_erasure_removes_the_claim_from_its_neighbours_index_text(ctx, kit):
    word = canary()
    a = _turn(kit, f"the {word} crane at the harbour", 0, "chat-3")
    b = _turn(kit, "it was broken again", 1, "chat-3")
    c = _turn(kit, "they fixed it on friday", 2, "chat-3")
    indexer.catch_up(ctx, kit.tenant, context_before=1)
    assert any(word in t for t in _tsv(ctx, kit.tenant, b["claim_id"]))
    before = _vectors(ctx, kit.tenant, b["claim_id"])[0]

    Erasure(ctx).erase_claim(kit.operator, a["claim_id"], "data_subject_request")
    # At the erasure's commit: no index row anywhere holds the erased claim's words (b's rows went with it).
    with owner(ctx, kit.tenant) as conn:
        left = conn.execute(sa.text("SELECT count(*) FROM memories_fts WHERE tenant_id = :t AND strpos(tsv::text, :w) > 0"),
                            {"t": kit.tenant, "w": word}).scalar()
        threads = conn.execute(sa.text("SELECT count(*) FROM index_threads WHERE tenant_id = :t AND claim_id = :c"),
                               {"t": kit.tenant, "c": a["claim_id"]}).scalar()
    assert left == 0 and threads == 0
    assert _tsv(ctx, kit.tenant, b["claim_id"]) == [] and _vectors(ctx, kit.tenant, b["claim_id"]) == []
    # c's window is b, which was not erased: untouched.
    assert _window(ctx, kit.tenant, c["claim_id"]).w == [b["claim_id"]]

    # The indexer rebuilds b without a: own words only, own embedding only.
    indexer.catch_up(ctx, kit.tenant, context_before=1)
    (tsv,) = _tsv(ctx, kit.tenant, b["claim_id"])
    assert word not in tsv and "broken" in tsv
    (after,) = _vectors(ctx, kit.tenant, b["claim_id"])
    assert np.allclose(after, _encode(ctx, "it was broken again"), atol=1e-5)
    assert not np.allclose(after, before, atol=1e-3)
    assert _window(ctx, kit.tenant, b["claim_id"]).w == []


def test_a_late_or_superseded_neighbour_rebuilds_the_window(ctx, kit):
    first, second = canary(), canary()
    b = _turn(kit, "we met there twice", 1, "chat-4")
    indexer.catch_up(ctx, kit.tenant, context_before=1)
    assert _window(ctx, kit.tenant, b["claim_id"]).w == []
    # The earlier turn arrives after the later one: b is re-indexed with it.
    a = _turn(kit, f"the {first} cafe downtown", 0, "chat-4")
    indexer.catch_up(ctx, kit.tenant, context_before=1)
    assert first in _tsv(ctx, kit.tenant, b["claim_id"])[0]
    assert _window(ctx, kit.tenant, b["claim_id"]).w == [a["claim_id"]]
    # The neighbour is superseded: b's window follows its new tip.
    new = ctx.admission.submit(kit.writer, [Submission(kit.wa, {"statement": f"the {second} cafe uptown",
                                                                 "context": {"thread": "chat-4", "position": 0}},
                                                       claim_id=a["claim_id"], supersedes=a["version_id"])])["items"][0]
    ctx.admission.review(kit.reviewer, new["version_id"], "promote", "accurate")
    indexer.catch_up(ctx, kit.tenant, context_before=1)
    (tsv,) = _tsv(ctx, kit.tenant, b["claim_id"])
    assert second in tsv and first not in tsv


def test_window_zero_indexes_own_words_only(ctx, kit):
    word = canary()
    _turn(kit, f"the {word} arrived", 0, "chat-5")
    b = _turn(kit, "so did the other one", 1, "chat-5")
    indexer.catch_up(ctx, kit.tenant, context_before=0)
    assert all(word not in t for t in _tsv(ctx, kit.tenant, b["claim_id"]))


def test_the_default_window_reaches_back_its_setting_and_no_further(ctx, kit):
    """With the default setting, a turn is found through the words of each of the ``index_context_before`` turns
    before it, and not through the one before those (docs/recall.md, "Context at indexing time")."""
    before = ctx.settings.index_context_before
    assert before >= 1
    words = [canary() for _ in range(before + 1)]
    turns = [_turn(kit, f"the {w} was mentioned", i, "chat-6") for i, w in enumerate(words)]
    last = _turn(kit, "and that settled it", before + 1, "chat-6")
    indexer.catch_up(ctx, kit.tenant)
    (tsv,) = _tsv(ctx, kit.tenant, last["claim_id"])
    assert words[0] not in tsv and all(w in tsv for w in words[1:])
    assert _window(ctx, kit.tenant, last["claim_id"]).w == [t["claim_id"] for t in turns[1:]]
