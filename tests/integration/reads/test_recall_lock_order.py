"""A hybrid recall takes the index tables' locks in the order tenant creation does (``memories_fts``, then
``memory_embeddings``; ``oml_create_tenant_partitions``, 63_bm25_postings.sql), so a tenant created while a recall is
open waits for it instead of deadlocking with it (workers/index/embedding.py ``recorded_query``, services/reads/recall.py
``_opening``).

Real PostgreSQL; the recall is held between its opening pipeline (which reads the index's recorded model, its lock
kept) and its lexical leg while another thread creates a tenant."""
from __future__ import annotations

import threading
import time

import sqlalchemy as sa

from oml.services.reads import bm25 as bm25mod
from oml.services.reads.recall import Recaller, RecallRequest
from oml.workers.index import indexer

from support.erasure import make_ekit
from support.owner import owner

_WAITING = sa.text("SELECT c.relname FROM pg_locks l JOIN pg_class c ON c.oid = l.relation WHERE NOT l.granted")


def test_a_tenant_created_while_a_hybrid_recall_is_open_waits_for_it(ctx, monkeypatch):
    k = make_ekit(ctx, "lock-order")
    for d in ("the red crane in the harbour", "a storm over the coast", "crane crane crane"):
        k.claim(d)
    indexer.catch_up(ctx, k.tenant)
    opened, go = threading.Event(), threading.Event()
    real = bm25mod.bm25_leg

    def held(*a, **kw):
        opened.set()
        go.wait(30)
        return real(*a, **kw)

    monkeypatch.setattr(bm25mod, "bm25_leg", held)
    out: dict[str, object] = {}

    def recall() -> None:
        try:
            out["recall"] = Recaller(ctx, lexical="bm25").recall(k.reader, RecallRequest(query="red crane",
                                                                                         retriever="hybrid", k=5))
        except BaseException as exc:  # noqa: BLE001 - reported below
            out["recall"] = exc

    def create() -> None:
        try:
            out["create"] = ctx.tenancy.create_tenant("lock-order-new")
        except BaseException as exc:  # noqa: BLE001 - reported below
            out["create"] = exc

    r = threading.Thread(target=recall)
    r.start()
    try:
        assert opened.wait(60)
        c = threading.Thread(target=create)
        c.start()
        waiting: list[str] = []
        for _ in range(100):  # the creation queues behind the recall's locks
            with owner(ctx) as q:
                waiting = list(q.execute(_WAITING).scalars())
            if waiting:
                break
            time.sleep(0.1)
        assert waiting, "the creation never waited for the recall"
    finally:
        go.set()
        r.join(60)
    c.join(60)
    assert not isinstance(out["recall"], BaseException), out["recall"]
    assert not isinstance(out["create"], BaseException), out["create"]
    assert out["recall"]["diagnostics"]["candidates"]["vector"] > 0
