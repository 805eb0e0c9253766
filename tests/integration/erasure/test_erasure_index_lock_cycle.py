"""An erasure that meets the indexer in a lock cycle is refused as retryable, and nothing of it is committed.

Every writer of ``memories_fts`` also updates the tenant's BM25 statistics rows (``bm25_groups``, ``bm25_df``;
63_bm25_postings.sql) in its own transaction: the indexer's batch, which writes workarea after workarea, and a
subject erasure, which deletes its claims' rows claim by claim. When each holds the statistics row of a workarea
the other writes next, PostgreSQL ends one of them (``DeadlockDetected``). Real PostgreSQL, the real HTTP app and
erasure act; the indexer's side is a transaction as ``oml_indexer`` that writes index rows as its batch does.
"""
from __future__ import annotations

import threading
import uuid

import sqlalchemy as sa
from fastapi.testclient import TestClient

from oml.services.entrypoints.http.app import create_app
from oml.workers.index import indexer

from support.admission import bearer
from support.erasure import make_ekit

SUBJECT = "lock.cycle@example.org"


def _index_row(conn: sa.Connection, tenant: str, workarea: str, path: str, text: str) -> None:
    """One index row, as the indexer's batch inserts it (a version promoted since its last batch)."""
    conn.execute(sa.text(
        "INSERT INTO memories_fts (tenant_id, version_id, claim_id, workarea_id, path, kind, provenance, self_signed,"
        " tip_from_seq, tip_from_at, tsv) VALUES (:t, :v, :c, :w, :p, 'fact', 'observed', false, 1000000, now(),"
        " to_tsvector('english', :x))"),
        {"t": tenant, "v": uuid.uuid4(), "c": uuid.uuid4(), "w": workarea, "p": path, "x": text})


def test_a_subject_erasure_in_a_lock_cycle_with_the_indexer_is_refused_as_retryable(ctx):
    k = make_ekit(ctx, "erasure-lock-cycle")
    subj = [{"kind": "email", "value": SUBJECT}]
    a = k.claim("alpha ledger entry", workarea=k.wa, subjects=subj)
    b = k.claim("beta ledger entry", workarea=k.wb, subjects=subj)
    indexer.catch_up(ctx, k.tenant)
    # The erasure deletes its claims' rows in claim id order; the indexer writes the second one's workarea first.
    (_, wa_first, path_first), (_, wa_second, path_second) = sorted(
        [(a["claim_id"], k.wa, "main.a"), (b["claim_id"], k.wb, "main.b")])
    client = TestClient(create_app(ctx), raise_server_exceptions=False)
    answer: dict = {}

    def erase() -> None:
        answer["r"] = client.post("/v1/erasures/subject", json={"kind": "email", "value": SUBJECT,
                                                                "reason": "data_subject_request", "rewrite": False},
                                  headers=bearer(k.keys["operator"]))

    with ctx.db.engine("oml_indexer").connect() as batch:
        tx = batch.begin()
        batch.execute(sa.text("SELECT set_config('oml.tenant_id', :t, true)"), {"t": k.tenant})
        pid = batch.execute(sa.text("SELECT pg_backend_pid()")).scalar()
        _index_row(batch, k.tenant, wa_second, path_second, "gamma ledger entry")
        eraser = threading.Thread(target=erase)
        eraser.start()
        # Wait until the erasure waits for the batch (it holds the first workarea's statistics by then).
        with ctx.db.engine(None).connect() as mon:
            while eraser.is_alive() and not mon.execute(sa.text(
                    "SELECT count(*) FROM pg_locks WHERE NOT granted AND :p = ANY(pg_blocking_pids(pid))"), {"p": pid}).scalar():
                mon.execute(sa.text("SELECT pg_sleep(0.02)"))
        # The erasure waited first, so its deadlock check runs first and ends it; the batch goes on.
        _index_row(batch, k.tenant, wa_first, path_first, "delta ledger entry")
        tx.commit()
        eraser.join()
    r = answer["r"]
    assert r.status_code == 503, r.text
    got = r.json()
    assert got["code"] == "service.unavailable" and got["reason"] == "deadlock", got
    assert r.headers["content-type"].startswith("application/problem+json") and r.headers["retry-after"]
    # Nothing of the refused erasure was committed: both claims are still served; a retry erases them.
    for c in (a, b):
        assert client.get(f"/v1/claims/{c['claim_id']}", headers=bearer(k.keys["reader"])).status_code == 200
    again = client.post("/v1/erasures/subject", json={"kind": "email", "value": SUBJECT, "reason": "data_subject_request",
                                                      "rewrite": False}, headers=bearer(k.keys["operator"]))
    assert again.status_code == 200, again.text
    assert {e["claim_id"] for e in again.json()["erasures"]} == {a["claim_id"], b["claim_id"]}
