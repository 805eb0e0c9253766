"""Every path that writes a claim's index rows writes the same ones: catch-up, dependents re-indexed when a
neighbour changes or is erased, a version re-entering tip, and ``indexer.rebuild``.

Real PostgreSQL + pgvector, the real model, feed, erasure and indexer. The current rows (``tip_to_seq IS NULL``)
after a catch-up that saw the thread change turn by turn are byte-identical to those ``rebuild`` writes from the
journal, and each ``tsv`` is ``to_tsvector('english', lexical_text(own, window))`` (docs/recall.md, "Context at
indexing time"); the BM25 statistics match a recount (``oml_bm25_drift()`` counts no differing row) after each step.
"""
from __future__ import annotations

import pytest
import sqlalchemy as sa

from oml.domain import context_window as windows
from oml.domain.recall import fold_accents
from oml.services.claims.admission import Submission
from oml.services.erasure.acts import Erasure
from oml.workers.index import indexer

from support.erasure import canary, make_ekit, owner


@pytest.fixture(scope="module")
def kit(ctx):
    return make_ekit(ctx, "txtpaths")


def _turn(kit, text: str, position: int, thread: str) -> dict:
    return kit.claim(text, context={"thread": thread, "position": position})


def _current(ctx, tenant: str) -> dict[str, tuple[str, str, str]]:
    """claim id -> (version id, tsv as text, embedding as text) of its current rows."""
    with owner(ctx, tenant) as c:
        rows = c.execute(sa.text(
            "SELECT f.claim_id::text, f.version_id::text, f.tsv::text, e.embedding::text FROM memories_fts f"
            " JOIN memory_embeddings e USING (tenant_id, version_id, tip_from_seq)"
            " WHERE f.tenant_id = :t AND f.tip_to_seq IS NULL"), {"t": tenant}).all()
    return {r[0]: (r[1], r[2], r[3]) for r in rows}


def _expected_tsv(ctx, tenant: str, own: str, window: list[str]) -> str:
    with owner(ctx, tenant) as c:
        return c.execute(sa.text("SELECT to_tsvector('english'::regconfig, :x)::text"),
                         {"x": fold_accents(windows.lexical_text(own, window))}).scalar_one()


def _drift(ctx, tenant: str) -> list:
    with owner(ctx, tenant) as c:
        return c.execute(sa.text("SELECT tbl, differing FROM oml_bm25_drift() WHERE differing <> 0")).all()


def _assert_rebuild_agrees(ctx, kit) -> dict[str, tuple[str, str, str]]:
    before = _current(ctx, kit.tenant)
    assert _drift(ctx, kit.tenant) == []
    indexer.rebuild(ctx, kit.tenant)
    after = _current(ctx, kit.tenant)
    assert _drift(ctx, kit.tenant) == []
    assert after.keys() == before.keys()
    for claim in before:
        assert after[claim][:2] == before[claim][:2], claim
    return after


def test_catch_up_dependents_erasure_and_rebuild_write_the_same_rows(ctx, kit):
    before = ctx.settings.index_context_before
    assert before >= 1
    words = [canary() for _ in range(5)]
    # Turns arrive out of order, each indexed on its own: the later ones are re-indexed as dependents.
    c = _turn(kit, f"the {words[2]} was repaired on friday", 2, "paths-1")
    indexer.catch_up(ctx, kit.tenant)
    a = _turn(kit, f"the {words[0]} crane at the harbour", 0, "paths-1")
    indexer.catch_up(ctx, kit.tenant)
    b = _turn(kit, f"it broke again, the {words[1]} said", 1, "paths-1")
    d = _turn(kit, f"and the {words[3]} paid for it", 3, "paths-1")
    indexer.catch_up(ctx, kit.tenant)
    # A neighbour gets a new tip: its dependents are re-indexed with its new text.
    ctx.admission.review(kit.reviewer, ctx.admission.submit(kit.writer, [Submission(
        kit.wa, {"statement": f"the {words[4]} crane at the harbour", "context": {"thread": "paths-1", "position": 0}},
        claim_id=a["claim_id"], supersedes=a["version_id"])])["items"][0]["version_id"], "promote", "accurate")
    indexer.catch_up(ctx, kit.tenant)
    assert _drift(ctx, kit.tenant) == []
    got = _assert_rebuild_agrees(ctx, kit)
    own = {b["claim_id"]: f"it broke again, the {words[1]} said", c["claim_id"]: f"the {words[2]} was repaired on friday",
           d["claim_id"]: f"and the {words[3]} paid for it"}
    stmts = [f"the {words[4]} crane at the harbour", own[b["claim_id"]], own[c["claim_id"]], own[d["claim_id"]]]
    for i, claim in enumerate([b["claim_id"], c["claim_id"], d["claim_id"]], start=1):
        assert got[claim][1] == _expected_tsv(ctx, kit.tenant, own[claim], stmts[max(0, i - before):i])

    # An erased neighbour leaves its dependents' rows at the erasure; the indexer rebuilds them without it.
    Erasure(ctx).erase_claim(kit.operator, b["claim_id"], "data_subject_request")
    assert _drift(ctx, kit.tenant) == []
    indexer.catch_up(ctx, kit.tenant)
    got = _assert_rebuild_agrees(ctx, kit)
    live = [stmts[0], stmts[2], stmts[3]]
    assert got[c["claim_id"]][1] == _expected_tsv(ctx, kit.tenant, live[1], live[max(0, 1 - before):1])


def test_a_version_re_entering_tip_gets_its_window_of_now(ctx, kit):
    """A version that is the tip again after its successor is demoted is indexed with the window of now, and its
    thread place comes back: the neighbour after it has it in its window again, as a rebuild writes."""
    assert ctx.settings.index_context_before == 2
    words = [canary() for _ in range(4)]
    a = _turn(kit, f"the {words[0]} ferry left early", 0, "paths-2")
    b = _turn(kit, f"the {words[1]} stayed behind", 1, "paths-2")
    c = _turn(kit, f"the {words[2]} went home", 2, "paths-2")
    indexer.catch_up(ctx, kit.tenant)
    # b's successor declares no thread: b leaves the thread and c's window loses it.
    b2 = kit.supersede(b, "a statement outside any thread")
    indexer.catch_up(ctx, kit.tenant)
    # Meanwhile a gets a new tip, which b (outside the thread) does not follow.
    a2 = ctx.admission.submit(kit.writer, [Submission(
        kit.wa, {"statement": f"the {words[3]} ferry left late", "context": {"thread": "paths-2", "position": 0}},
        claim_id=a["claim_id"], supersedes=a["version_id"])])["items"][0]
    ctx.admission.review(kit.reviewer, a2["version_id"], "promote", "accurate")
    indexer.catch_up(ctx, kit.tenant)
    # b's successor is demoted: b's first version is the tip again, back in the thread at position 1.
    ctx.admission.review(kit.reviewer, b2["version_id"], "demote", "inaccurate")
    indexer.catch_up(ctx, kit.tenant)

    got = _current(ctx, kit.tenant)
    assert got[b["claim_id"]][0] == b["version_id"]
    assert got[b["claim_id"]][1] == _expected_tsv(ctx, kit.tenant, f"the {words[1]} stayed behind",
                                                  [f"the {words[3]} ferry left late"])
    assert got[c["claim_id"]][1] == _expected_tsv(ctx, kit.tenant, f"the {words[2]} went home",
                                                  [f"the {words[3]} ferry left late", f"the {words[1]} stayed behind"])
    _assert_rebuild_agrees(ctx, kit)
    with owner(ctx, kit.tenant) as conn:
        w = conn.execute(sa.text("SELECT window_claims::text[] FROM index_threads WHERE tenant_id = :t AND claim_id = :c"),
                         {"t": kit.tenant, "c": c["claim_id"]}).scalar_one()
    assert w == [a["claim_id"], b["claim_id"]]
