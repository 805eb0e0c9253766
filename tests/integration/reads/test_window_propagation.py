"""Window propagation through the product (docs/recall.md, "Window propagation"): a hybrid recall gives each
admitted candidate a share of the fused scores of the admitted candidates whose context window holds it, reading
the windows the indexer recorded (``index_threads``) as ``oml_server``, and nothing else moves a score."""
from __future__ import annotations

import dataclasses

import pytest
import sqlalchemy as sa

from oml.domain import fusion as F
from oml.services.reads.recall import Recaller, RecallRequest

from support.owner import owner
from support.recall import make_world
from support.window_propagation import ENDED, QUERY, THREAD, recall, server_windows

# Beside the thread (support.window_propagation), another thread and loose claims compete.
OTHER = ["The Boston office moves to a new floor.", "Our marathon planning meeting is on Monday.",
         "Marathon sessions of code review tire everyone.", "The spring race in Boston was cancelled."]
HIDDEN = 4


@pytest.fixture(scope="module")
def world(ctx):
    w = make_world(ctx, "window-prop")
    for i, s in enumerate(THREAD):
        w.remember("main.docs", s, context={"thread": "chat-1", "position": i}, **(ENDED if i == HIDDEN else {}))
    for i, s in enumerate(OTHER):
        w.remember("main.docs", s, context={"thread": "chat-2", "position": i})
    w.index()
    w.reader = w.key("reader")
    return w


def test_a_hybrid_recall_propagates_exactly_the_admitted_candidates_scores(ctx, world):
    plain, got = recall(ctx, world, 0.0), recall(ctx, world, 0.5)
    claim_of = {h["version_id"]: h["claim_id"] for h in plain["hits"]}
    version_of = {c: v for v, c in claim_of.items()}
    held = {v: [version_of[c] for c in cs if c in version_of] for v, cs in server_windows(ctx, world.tenant).items() if v in claim_of}
    want = F.propagate([F.Ranked(h["version_id"], h["score"]) for h in plain["hits"]], held, 0.5, ctx.settings.index_context_before)
    assert [(h["version_id"], pytest.approx(h["score"])) for h in got["hits"]] == [(x.key, x.score) for x in want]
    statements = [h["body"]["statement"] for h in got["hits"]]
    before = [h["body"]["statement"] for h in plain["hits"]]
    assert THREAD[HIDDEN] not in statements and THREAD[HIDDEN] not in before
    # the answer turn rises: its followers matched the query
    assert statements.index(THREAD[1]) < before.index(THREAD[1])
    assert got["diagnostics"]["fusion"]["window_share"] == 0.5
    assert "window_share" not in plain["diagnostics"]["fusion"]


def test_the_not_admitted_turn_moves_nothing(ctx, world):
    # Its window holds turns 2 and 3; had it counted, both would score more than the admitted followers give them.
    got = {h["body"]["statement"]: h["score"] for h in recall(ctx, world, 0.5)["hits"]}
    plain = {h["body"]["statement"]: h["score"] for h in recall(ctx, world, 0.0)["hits"]}
    assert got[THREAD[2]] == pytest.approx(plain[THREAD[2]] + 0.5 * plain[THREAD[3]])
    assert got[THREAD[3]] == pytest.approx(plain[THREAD[3]])


def test_single_leg_recalls_are_not_propagated(ctx, world):
    for retriever in ("fts", "vector"):
        fusion = dataclasses.replace(F.DEFAULT, window_share=0.5)
        a = Recaller(ctx, fusion=fusion).recall(world.reader, RecallRequest(query=QUERY, retriever=retriever, k=25))
        b = Recaller(ctx).recall(world.reader, RecallRequest(query=QUERY, retriever=retriever, k=25))
        assert [(h["version_id"], h["score"]) for h in a["hits"]] == [(h["version_id"], h["score"]) for h in b["hits"]]
    # a hybrid read whose query has no lexemes is answered by the vector leg alone: not propagated either
    fusion = dataclasses.replace(F.DEFAULT, window_share=0.5)
    a = Recaller(ctx, fusion=fusion).recall(world.reader, RecallRequest(query="?! ...", retriever="hybrid", k=25))
    b = Recaller(ctx).recall(world.reader, RecallRequest(query="?! ...", retriever="hybrid", k=25))
    assert a["hits"] and "window_share" not in a["diagnostics"]["fusion"]
    assert [(h["version_id"], h["score"]) for h in a["hits"]] == [(h["version_id"], h["score"]) for h in b["hits"]]


def test_the_server_reads_window_ids_of_its_bound_tenant_only(ctx, world):
    other = make_world(ctx, "window-prop-other")
    other.remember("main", "Another tenant's Boston marathon turn.", context={"thread": "chat-1", "position": 0})
    other.remember("main", "And its follower.", context={"thread": "chat-1", "position": 1})
    other.index()
    mine = server_windows(ctx, world.tenant)
    assert len(mine) == len(THREAD) + len(OTHER) and not set(mine) & set(server_windows(ctx, other.tenant))
    with owner(ctx) as c:
        privilege = "SELECT has_column_privilege('oml_server', 'index_threads', :col, 'SELECT')"
        for col, allowed in (("version_id", True), ("window_claims", True), ("position", False),
                             ("thread_sha256", False), ("workarea_id", False)):
            assert c.execute(sa.text(privilege), {"col": col}).scalar() is allowed
        assert not c.execute(sa.text("SELECT has_table_privilege('oml_server', 'index_threads', 'INSERT, UPDATE, DELETE')")).scalar()



def test_many_claims_at_one_position_count_only_as_deep_as_the_window(ctx):
    # Six claims declared at position 1 all hold the position-0 turn in their windows: only the window's depth
    # (OML_INDEX_CONTEXT_BEFORE, 2) of them, the best-scoring, give it a share.
    w = make_world(ctx, "window-prop-crowd")
    w.remember("main", "Our quarterly budget review is on Thursday.", context={"thread": "t", "position": 0})
    for i in range(6):
        w.remember("main", f"Boston marathon results, page {i}.", context={"thread": "t", "position": 1})
    w.remember("main", "The Boston office moves to a new floor.", context={"thread": "u", "position": 0})
    w.index()
    w.reader = w.key("reader")
    plain, got = ({h["body"]["statement"]: h["score"] for h in recall(ctx, w, share)["hits"]} for share in (0.0, 0.5))
    best = sorted((v for s, v in plain.items() if s.startswith("Boston marathon results")), reverse=True)[:2]
    assert ctx.settings.index_context_before == 2
    assert got["Our quarterly budget review is on Thursday."] == pytest.approx(
        plain["Our quarterly budget review is on Thursday."] + 0.5 * sum(best))


def test_a_read_that_waits_for_its_query_vector_answers_as_one_that_did_not(ctx, world):
    """While the read waits for its query vector, the lexical candidates' rows, windows and the valid-time count are
    read (docs/recall.md, "Latency"); the vector leg's other candidates follow after it. The answer is the one a read
    that reads every candidate after the vector leg gives: hits, scores, legs and diagnostics."""
    import time

    from oml.services.reads.recall import default_embed
    from oml.services.runtime.phases import Phases

    fusion = dataclasses.replace(F.DEFAULT, window_share=0.5)
    ready, ready_ph = Recaller(ctx, fusion=fusion, read_while_waiting=False), Phases()
    embed = default_embed(ctx)
    embed("warm")

    def late(text: str):
        time.sleep(1.0)  # far beyond the lexical leg on a small tenant
        return embed(text)

    late.identity = embed.identity
    waited, ph = Recaller(ctx, fusion=fusion, embed=late), Phases()
    a = ready.recall(world.reader, RecallRequest(query=QUERY, retriever="hybrid", k=25), phases=ready_ph)
    b = waited.recall(world.reader, RecallRequest(query=QUERY, retriever="hybrid", k=25), phases=ph)
    assert "lexical_rows" not in ready_ph.ms() and "lexical_rows" in ph.ms()
    assert b["diagnostics"]["fusion"]["window_share"] == 0.5
    assert [(h["version_id"], h["score"], h["retrievers"]) for h in b["hits"]] == \
        [(h["version_id"], h["score"], h["retrievers"]) for h in a["hits"]]
    for out in (a, b):  # the read's own instant and duration
        out["diagnostics"].pop("elapsed_ms")
        out["diagnostics"]["valid_time"].pop("at")
    assert b["diagnostics"] == a["diagnostics"]
    assert b["diagnostics"]["valid_time"]["excluded_hits"]["expired"] == 1  # the ended turn, counted while waiting


def test_a_read_answers_from_its_one_snapshot_whatever_commits_while_it_waits(ctx, monkeypatch):
    """Every statement of a read sees the snapshot its transaction took at checkout (docs/recall.md, "One snapshot").
    After the early read and before the vector leg (docs/recall.md, "Latency"), one claim gets a new version (indexed),
    one is demoted and one erased; the read answers as a read that finished before any of them: the same hits, each
    claim once, every body readable. The next read sees all three."""
    import threading

    from oml.services.erasure.acts import Erasure
    from oml.services.reads import recall as recall_module
    from oml.services.reads.recall import default_embed
    from oml.services.runtime.phases import Phases

    w = make_world(ctx, "one-snapshot")
    for s in THREAD[:4]:
        w.remember("main.docs", s)
    old = w.remember("main.docs", "The Boston marathon route changes near the finish.")
    demoted = w.remember("main.docs", "The Boston marathon water stations move every mile.")
    erased = w.remember("main.docs", "The Boston marathon volunteers meet at the finish.")
    w.index()
    reader, op = w.key("reader"), w.key("operator")
    embed = default_embed(ctx)
    embed("warm")
    ask = RecallRequest(query=QUERY, retriever="hybrid", k=25)
    before = Recaller(ctx).recall(reader, ask)
    early_read = threading.Event()
    load = recall_module._load_candidates

    def load_then_tell(*args, **kw):
        load(*args, **kw)
        early_read.set()

    monkeypatch.setattr(recall_module, "_load_candidates", load_then_tell)
    new: dict = {}

    def committing(text: str):
        assert early_read.wait(30)
        new.update(w.remember("main.docs", "The Boston marathon route changes near the finish line again.",
                              claim_id=old["claim_id"], supersedes=old["version_id"]))
        ctx.admission.review(w.reviewer, demoted["version_id"], "demote", "outdated")
        Erasure(ctx).erase_claim(op, erased["claim_id"], "data_subject_request")
        w.index()
        return embed(text)

    committing.identity = embed.identity
    ph = Phases()
    # The embedding commits and indexes before it answers: seconds, past the default wait for the query vector.
    got = Recaller(ctx, embed=committing, embed_wait_s=60).recall(reader, ask, phases=ph)
    assert "lexical_rows" in ph.ms() and new
    hits = lambda out: [(h["claim_id"], h["version_id"], h["body"]) for h in out["hits"]]  # noqa: E731
    assert hits(got) == hits(before) and got["diagnostics"]["unreadable"] == before["diagnostics"]["unreadable"] == 0
    assert {old["version_id"], demoted["version_id"], erased["version_id"]} <= {h["version_id"] for h in got["hits"]}
    monkeypatch.undo()
    after = {h["claim_id"]: h["version_id"] for h in Recaller(ctx).recall(reader, ask)["hits"]}
    assert after.get(old["claim_id"]) == new["version_id"]
    assert demoted["claim_id"] not in after and erased["claim_id"] not in after
