"""Reads that answer from one REPEATABLE READ snapshot (docs/recall.md, "One snapshot") against what commits while
they run, where the read's answer depends on something outside its snapshot: the process's caches of verified
journal state (services/reads/verified_reads.py, services/journal/verified_state.py), the catalog (a model
switch's TRUNCATE and column change, workers/index/model_switch.py) and the key's root paths, which authentication
read in a transaction of its own (services/reads/scope.py)."""
from __future__ import annotations

import threading
import time

import pytest
import sqlalchemy as sa

from oml.domain.errors import OMLError
from oml.services.journal import verified_state
from oml.services.keys import rotation as keys_rotation
from oml.services.reads import fetch as fetch_module
from oml.services.reads import recall as recall_module
from oml.services.reads import sim_read
from oml.services.reads.fetch import fetch
from oml.services.reads.recall import Recaller, RecallRequest
from oml.services.simulations.acts import Simulations
from oml.workers.index import embedding, model_switch

from support.owner import owner
from support.recall import constant_vector, make_world


def _integrity(ctx, tenant: str) -> list[tuple]:
    with owner(ctx, tenant) as c:
        return [tuple(r) for r in c.execute(sa.text(
            "SELECT reason, refusals FROM integrity_events WHERE tenant_id = :t ORDER BY reason"), {"t": tenant})]


def _rotate_then_read_elsewhere(ctx, tenant: str, read) -> dict:
    """Rotate ``tenant``'s key (every DEK rewrapped, committed), then run ``read`` on another thread: a read after
    the commit, in this process, whose DEK check loads the rewrap into the process's cache."""
    out = {"rotation": keys_rotation.rotate(ctx, tenant)}
    t = threading.Thread(target=lambda: out.setdefault("other", read()))
    t.start()
    t.join(60)
    return out


def test_a_fetch_whose_snapshot_predates_a_rewrap_opens_the_body(ctx, monkeypatch):
    w = make_world(ctx, "race-rewrap-fetch")
    item = w.remember("main", "The rotation canary statement.")
    w.index()
    reader = w.key("reader")
    fetch(ctx, reader, claim_id=item["claim_id"])
    real, done = fetch_module.decrypt_version, {}

    def rotating(conn, keystore, tenant, vid):  # the fetch's snapshot is taken; its bodies are not read yet
        if not done:
            done["outer"] = True  # the other thread's fetch comes through here too
            done.update(_rotate_then_read_elsewhere(ctx, tenant, lambda: fetch(ctx, reader, claim_id=item["claim_id"])))
        return real(conn, keystore, tenant, vid)

    monkeypatch.setattr(fetch_module, "decrypt_version", rotating)
    got = fetch(ctx, reader, claim_id=item["claim_id"])
    assert done["rotation"]["rewrapped"] >= 1 and done["other"]["body"]["statement"] == "The rotation canary statement."
    assert got["body"]["statement"] == "The rotation canary statement."
    assert _integrity(ctx, w.tenant) == []


def test_a_recall_whose_snapshot_predates_a_rewrap_serves_the_hit(ctx, monkeypatch):
    w = make_world(ctx, "race-rewrap-recall")
    w.remember("main", "The rotation canary statement for recall.")
    w.index()
    reader = w.key("reader")
    rec = Recaller(ctx, embed=constant_vector)
    ask = RecallRequest(query="rotation canary", retriever="fts", k=3)
    assert rec.recall(reader, ask)["hits"]
    real, done = recall_module.decrypt_versions, {}

    def rotating(conn, keystore, tenant, vids):
        if not done:
            done["outer"] = True  # the other thread's recall comes through here too
            done.update(_rotate_then_read_elsewhere(ctx, tenant, lambda: rec.recall(reader, ask)))
        return real(conn, keystore, tenant, vids)

    monkeypatch.setattr(recall_module, "decrypt_versions", rotating)
    got = rec.recall(reader, ask)
    assert len(done["other"]["hits"]) == 1
    assert len(got["hits"]) == 1 and got["diagnostics"]["unreadable"] == 0
    assert _integrity(ctx, w.tenant) == []


TINY = 8
_WAITING = ("SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation WHERE NOT l.granted"
            " AND c.relname = 'memory_embeddings'")


def test_a_switch_committed_while_a_recall_waits_for_the_model_lock_is_seen(ctx):
    """What ``oml index rebuild --model`` commits in its step 2 (tables emptied, column altered, state rebuilding),
    then the tenant re-embedded, while a hybrid recall that has checked out waits for the embedding table's lock."""
    w = make_world(ctx, "race-switch")
    for s in ("the lighthouse keeper logs every passing ship", "deploys to production happen on tuesdays"):
        w.remember("main", s)
    w.index()
    reader = w.key("reader")
    rec = Recaller(ctx)
    ask = RecallRequest(query="lighthouse keeper ships", retriever="hybrid", k=5)
    assert rec.recall(reader, ask)["diagnostics"]["candidates"]["vector"] > 0
    out: dict = {}
    t = threading.Thread(target=lambda: out.setdefault("got", rec.recall(reader, ask)))
    try:
        with owner(ctx, w.tenant) as c:
            rows = [dict(r) for r in c.execute(sa.text("SELECT * FROM memory_embeddings WHERE tenant_id = :t"),
                                               {"t": w.tenant}).mappings()]
            c.execute(sa.text(f"LOCK TABLE {', '.join(model_switch.TABLES)} IN ACCESS EXCLUSIVE MODE"))
            t.start()
            deadline = time.monotonic() + 30
            while not c.connection.driver_connection.execute(_WAITING).fetchone()[0]:
                assert time.monotonic() < deadline, "the recall never waited for the lock"
                time.sleep(0.02)
            c.execute(sa.text(f"TRUNCATE {', '.join(model_switch.TABLES)}"))
            for table in model_switch.TABLES:
                c.execute(sa.text(f"ALTER TABLE {table} ALTER COLUMN embedding TYPE vector({TINY})"))
            model_switch._record(c, embedding.IndexModel(TINY, "tiny", "1" * 64, "rebuilding"))
        with owner(ctx, w.tenant) as c:
            cols = list(rows[0])
            values = ", ".join(f"CAST(:{k} AS vector({TINY}))" if k == "embedding" else f":{k}" for k in cols)
            c.execute(sa.text(f"INSERT INTO memory_embeddings ({', '.join(cols)}) VALUES ({values})"),
                      [r | {"embedding": "[" + ",".join(["0.125"] * TINY) + "]"} for r in rows])
        t.join(60)
        diag = out["got"]["diagnostics"]
        # As a read after the switch answers (READ COMMITTED does): the vector leg stood aside, and says so.
        assert [d["reason"] for d in diag["degraded"]] == ["vector.rebuilding"] and "vector" not in diag["candidates"]
    finally:
        if t.is_alive():
            t.join(60)
        model_switch.switch(ctx, "minilm")


def test_a_read_whose_snapshot_predates_a_simulation_close_leaves_the_verified_state_alone(ctx, monkeypatch):
    w = make_world(ctx, "race-sim-close")
    for i in range(20):
        w.remember("main", f"Filler claim number {i} about harbour cranes.")
    w.index()
    reader = w.key("reader")
    sims = Simulations(ctx)
    sim = sims.open(w.admin, "rehearsal", [reader.principal_id])["simulation_id"]
    rec = Recaller(ctx, embed=constant_vector)
    ask = RecallRequest(query="harbour cranes", retriever="fts", k=3)
    rec.recall(reader, ask)
    states = verified_state.of(ctx.db)
    state = states._state(w.tenant)
    real, seen = sim_read.audience_of, {}

    def closing(conn, principal, fetched=None):  # the read's snapshot and its audience rows show the simulation open
        if not seen:
            sims.close(w.admin, sim)
            seen.update(seq=state.seq, verified=states.verified_events)
        return real(conn, principal, fetched)

    monkeypatch.setattr(sim_read, "audience_of", closing)
    assert rec.recall(reader, ask)["hits"]
    assert state.seq == seen["seq"], "the shared state went back to the read's snapshot"
    assert states.verified_events == seen["verified"], "the read verified the tenant's chain again from event 1"


def test_an_integrity_count_written_from_a_read_adds_to_a_concurrent_one(ctx):
    """A read counts the refusals it made through its own engine (REPEATABLE READ); the count's transaction is READ
    COMMITTED, so an upsert of the same row that a concurrent count holds waits for it and adds to it, where a
    snapshot would be refused (40001) and the count left in the process."""
    import uuid

    from oml.services.reads import verified_reads
    from oml.services.storage.db import SNAPSHOT_ISOLATION

    tenant = make_world(ctx, "race-integrity-count").tenant
    key = (str(uuid.uuid4()), 1, "dek.digest")
    holder = ctx.db.engine("oml_server").connect()
    tx = holder.begin()
    holder.execute(sa.text("SELECT set_config('oml.tenant_id', :t, true)"), {"t": tenant})
    holder.execute(verified_reads._RECORD, {"t": tenant, "v": key[0], "s": key[1], "r": key[2], "n": 1})
    errors: list = []

    def count_from_a_read():
        try:
            verified_reads._write(ctx.db.engine("oml_server", isolation=SNAPSHOT_ISOLATION), tenant, {key: 1})
        except Exception as exc:  # noqa: BLE001 - asserted below
            errors.append(exc)

    t = threading.Thread(target=count_from_a_read)
    t.start()
    time.sleep(0.5)  # the read's count waits for the row the holder inserted
    tx.commit()
    holder.close()
    t.join(30)
    assert errors == []
    with owner(ctx, tenant) as c:
        assert c.execute(sa.text("SELECT refusals FROM integrity_events WHERE tenant_id = :t AND version_id = :v"),
                         {"t": tenant, "v": key[0]}).scalar() == 2


def test_a_key_authenticated_before_its_root_moved_reads_the_roots_paths_of_the_reads_snapshot(ctx):
    """A Principal carries its roots' paths as authentication read them. Its root ``main.ops`` is then moved under
    ``main.archive`` and a new ``main.ops`` is made, with claims of its own: a read that compared the stale path
    ``main.ops`` with its snapshot's paths would serve the new subtree, which the key never had. Each read resolves
    the roots in its own snapshot (services/reads/scope.py): the key reads the moved subtree, at its new path, only."""
    from oml.services.entrypoints.http.routes_claims import review_queue
    from oml.services.erasure.acts import Erasure
    from oml.services.tenancy.listing import list_workareas

    w = make_world(ctx, "race-root-moved")
    old_ops = w.area("main.ops")
    archive = w.area("main.archive")
    kept = w.remember("main.ops", "The furnace maintenance log is kept in the basement ledger.")
    held_old = w.remember("main.ops", "The furnace inspection is due in the spring.", promote=False)
    reader, reviewer = w.key("reader", "main.ops"), w.key("reviewer", "main.ops")
    operator = w.key("operator")
    assert reader.root_paths == ("main.ops",)

    w.ctx.tenancy.reparent_workarea(w.admin, old_ops, archive)
    new_ops = w.ctx.tenancy.create_workarea(w.admin, "ops", w.root)["node_id"]
    w.workareas["main.ops"] = new_ops
    secret = w.remember("main.ops", "The furnace room door code is written on the red card.")
    held_new = w.remember("main.ops", "The furnace room door code changes in the spring.", promote=False)
    gone = w.remember("main.ops", "The furnace room spare key hangs by the boiler.")
    Erasure(ctx).erase_claim(operator, gone["claim_id"], "data_subject_request", rewrite=False)
    w.index()

    recaller = Recaller(ctx, embed=constant_vector)
    out = recaller.recall(reader, RecallRequest(query="furnace", retriever="fts", k=10))
    assert out["diagnostics"]["scope"] == ["main.archive.ops"]
    assert [h["claim_id"] for h in out["hits"]] == [kept["claim_id"]]
    assert "door code" not in str(out)
    scoped = recaller.recall(reader, RecallRequest(query="furnace", retriever="fts", k=10, workarea_id=old_ops))
    assert [h["claim_id"] for h in scoped["hits"]] == [kept["claim_id"]]
    with pytest.raises(OMLError) as refused:
        recaller.recall(reader, RecallRequest(query="furnace", retriever="fts", k=10, workarea_id=new_ops))
    assert refused.value.code == "workarea.not_found"

    assert fetch(ctx, reader, claim_id=kept["claim_id"])["body"]["statement"].startswith("The furnace maintenance")
    for cid in (secret["claim_id"], gone["claim_id"]):  # not served, and not erased inside its access either
        with pytest.raises(OMLError) as missing:
            fetch(ctx, reader, claim_id=cid)
        assert missing.value.code == "claim.not_found"
    with pytest.raises(OMLError) as refused:
        fetch(ctx, reader, claim_id=secret["claim_id"], workarea_id=new_ops)
    assert refused.value.code == "workarea.not_found"
    with pytest.raises(OMLError) as missing:
        fetch_module.lineage(ctx, reader, secret["claim_id"])
    assert missing.value.code == "claim.not_found"
    assert fetch_module.lineage(ctx, reader, kept["claim_id"])["claim_id"] == kept["claim_id"]

    queued = [i["claim_id"] for i in review_queue(ctx, reviewer)["items"]]
    assert held_old["claim_id"] in queued and held_new["claim_id"] not in queued
    assert [(a["node_id"], a["path"]) for a in list_workareas(ctx, reader)] == [(old_ops, "main.archive.ops")]


def test_a_key_revoked_after_authentication_reads_nothing(ctx):
    """The read's snapshot does not hold the key as live: no root resolves, and the read answers as authentication
    would have (services/reads/scope.py)."""
    from oml.services.entrypoints.http.routes_claims import own_work

    w = make_world(ctx, "race-key-revoked")
    item = w.remember("main", "The revoked key must not read this statement.")
    w.index()
    reader = w.key("reader")
    assert fetch(ctx, reader, claim_id=item["claim_id"])["claim_id"] == item["claim_id"]
    w.ctx.tenancy.revoke_principal(w.admin, reader.principal_id)
    w.ctx.tenancy.revoke_principal(w.admin, w.writer.principal_id)
    for read in (lambda: fetch(ctx, reader, claim_id=item["claim_id"]),
                 lambda: Recaller(ctx, embed=constant_vector).recall(reader, RecallRequest(query="revoked", retriever="fts")),
                 lambda: fetch_module.lineage(ctx, reader, item["claim_id"]),
                 lambda: own_work(ctx, w.writer)):
        with pytest.raises(OMLError) as refused:
            read()
        assert refused.value.code == "access.unauthenticated"
