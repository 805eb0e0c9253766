"""A recall waits a bounded time for its query vector (docs/recall.md, "Waiting for the query vector"): it holds its
locks on the index tables while it waits, so a hung model must not keep it, and a model switch queued behind it,
waiting. Past the bound it answers from the lexical leg, flagged ``vector.timeout``; the run goes on, and its vector
serves the next read. Real PostgreSQL; the model is a function held by an event."""
from __future__ import annotations

import dataclasses
import threading
import time

import numpy as np
import pytest
import sqlalchemy as sa

from oml.services.reads.recall import Recaller, RecallRequest
from oml.workers.index.embedding import QueryEmbedder

from support.owner import owner
from support.recall import constant_vector, reader_world

ASK = RecallRequest(query="glacier survey", retriever="hybrid", k=3)
_HELD = sa.text("SELECT count(*) FROM pg_locks WHERE relation = 'memory_embeddings'::regclass AND granted"
                " AND mode = 'AccessShareLock' AND pid <> pg_backend_pid()")


@pytest.fixture(scope="module")
def world(ctx):
    return reader_world(ctx, "embedwait", ["The glacier survey measured less ice than planned.",
                                           "A quiet afternoon by the lake.", "Minutes of the budget meeting."])


def _reasons(out: dict) -> list[str]:
    return [d["reason"] for d in out["diagnostics"]["degraded"]]


def _switch_lock(ctx, timeout: str) -> None:
    """The lock a model switch takes (workers/index/model_switch.py), as the owner, waiting at most ``timeout``."""
    with owner(ctx) as conn:
        conn.execute(sa.text(f"SET LOCAL lock_timeout = '{timeout}'"))
        conn.execute(sa.text("LOCK TABLE memories_fts, memory_embeddings IN ACCESS EXCLUSIVE MODE"))


def test_a_recall_whose_query_vector_is_late_answers_lexically_and_lets_go_of_its_locks(ctx, world):
    gate, calls = threading.Event(), []

    def hung(text: str) -> list[float]:
        calls.append(text)
        if not gate.wait(60):
            raise TimeoutError("the test never released the model")
        return constant_vector(text)

    r = Recaller(ctx, embed=hung, embed_wait_s=0.3)
    try:
        t0 = time.monotonic()
        out = r.recall(world.reader, ASK)
        assert time.monotonic() - t0 < 8
        diag = out["diagnostics"]
        assert out["hits"] and _reasons(out) == ["vector.timeout"], diag["degraded"]
        assert "FTS only" in diag["degraded"][0]["detail"] and "OML_RECALL_EMBED_WAIT_S" in diag["degraded"][0]["detail"]
        assert "vector" not in diag["candidates"] and diag["candidates"]["fts"] >= 1
        # The model is still hung, the recall's locks are gone: a model switch's lock is granted at once.
        _switch_lock(ctx, "1s")
        assert not gate.is_set()
        # A read of the same text waits for the same run rather than queueing another; with no lexical leg it
        # answers no hits, steering rows only, saying why.
        vec = r.recall(world.reader, dataclasses.replace(ASK, retriever="vector"))
        assert vec["hits"] == [] and _reasons(vec) == ["vector.timeout"] and "no hits" in vec["diagnostics"]["degraded"][0]["detail"]
        assert calls == ["glacier survey"]
    finally:
        gate.set()
    # Once the model answers, the next read has its vector leg (the run it joins, or a new one).
    later = Recaller(ctx, embed=hung, embed_wait_s=10).recall(world.reader, ASK)
    assert later["diagnostics"]["candidates"]["vector"] == 3 and "vector.timeout" not in _reasons(later)


def test_a_model_switch_waits_for_a_hung_recall_at_most_the_bound(ctx, world):
    gate = threading.Event()

    def hung(text: str) -> list[float]:
        gate.wait(60)
        return constant_vector(text)

    out: dict[str, object] = {}

    def read() -> None:
        try:
            out["recall"] = Recaller(ctx, embed=hung, embed_wait_s=1.5).recall(world.reader, ASK)
        except BaseException as exc:  # noqa: BLE001 - reported below
            out["recall"] = exc

    t = threading.Thread(target=read)
    t.start()
    try:
        for _ in range(200):  # until the read holds its locks
            with owner(ctx) as conn:
                if conn.execute(_HELD).scalar():
                    break
            time.sleep(0.02)
        else:
            pytest.fail("the recall never took its locks")
        t0 = time.monotonic()
        _switch_lock(ctx, "8s")  # queued behind the read until it gives up on its vector, then granted
        waited = time.monotonic() - t0
        t.join(10)
    finally:
        gate.set()
        t.join(60)
    assert not isinstance(out["recall"], BaseException), out["recall"]
    assert _reasons(out["recall"]) == ["vector.timeout"] and waited < 8


def test_a_late_query_vector_is_cached_for_the_next_read(ctx, world, tmp_path):
    gate, runs = threading.Event(), []
    embedder = QueryEmbedder(str(tmp_path / "model"), tmp_path / "cache", cache_size=8)

    def encode(text: str) -> np.ndarray:
        runs.append(text)
        gate.wait(60)
        return np.asarray(constant_vector(text), dtype=np.float32)

    embedder._encode = encode  # the loaded backend: the model, held by the event
    try:
        first = Recaller(ctx, embed=embedder, embed_wait_s=0.3).recall(world.reader, ASK)
        assert _reasons(first) == ["vector.timeout"]
    finally:
        gate.set()
    for _ in range(500):  # the abandoned run finishes on its worker and fills the LRU
        if embedder.misses:
            break
        time.sleep(0.01)
    assert embedder.misses == 1
    later = Recaller(ctx, embed=embedder, embed_wait_s=10).recall(world.reader, ASK)
    assert later["diagnostics"]["candidates"]["vector"] == 3 and "vector.timeout" not in _reasons(later)
    assert runs == ["glacier survey"] and embedder.hits == 1
