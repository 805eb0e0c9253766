"""Chain membership (docs/security-model.md, "Chain membership"; 97_chain_membership.sql).

Each forgery is made with one workload credential, ``oml_admission``, as an attacker holding it would. The first
kind is an **orphan**: a journal row of the type an authority guard looks for, inserted above the chain head without
moving the head, plus the projection row that names it. The guards accept a row when a journal row of the right type
sits at the seq it names, and the verified state reads the journal only up to the head, so an orphan acted on would
widen a reader's scope (a reparent), make an erasure answer "already erased" and keep the data, or make retention
delete the read log. The tests prove that the transaction inserting it is refused at commit, and that each act does
what the genuine journal says. Then the same orphans with the chain check switched off by the schema owner (a database whose
owner disabled it): the acts themselves compare their rows with the verified state and refuse.
"""
from __future__ import annotations

import datetime as dt
import secrets
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import sqlalchemy as sa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from fastapi.testclient import TestClient

from oml.domain import chain, signing
from oml.domain.canonical import now
from oml.domain.errors import OMLError
from oml.domain.events import SYSTEM, Actor, encode, event_object
from oml.services.entrypoints.http.app import create_app
from oml.services.reads import readlog
from oml.services.runtime.auth import authenticate

from support.admission import bearer, make_kit, reader_of_a
from support.owner import owner
from support.recall import read_events, world_with_reads

ROLE = "oml_admission"  # the stolen workload credential
WORKLOADS = ("oml_admission", "oml_server", "oml_lake_writer", "oml_reconciler", "oml_indexer", "oml_relay")
UNVERIFIED = "integrity.unverified_state"
_INSERT = sa.text("INSERT INTO journal_events (tenant_id, seq, event_id, type, kid, at, canonical, hash, prev_hash, signature)"
                  " VALUES (:t, :s, CAST(:e AS uuid), :ty, :k, now(), :b, :h, :p, :sig)")


def _row(c, tenant: str, type: str, data: dict, actor: Actor, seq: int, prev: bytes) -> dict:
    kid = c.execute(sa.text("SELECT kid FROM tenant_keys WHERE tenant_id = :t AND purpose = 'signing' AND retired_seq IS NULL"),
                    {"t": tenant}).scalar()
    ev = event_object(tenant=tenant, seq=seq, type=type, event_id=str(uuid.uuid4()), at=now(), actor=actor, kid=kid, data=data)
    body = encode(ev)
    h = chain.link(prev, body)
    return {"t": tenant, "s": seq, "e": ev["event_id"], "ty": type, "k": kid, "b": body, "h": h, "p": prev,
            "sig": Ed25519PrivateKey.generate().sign(signing.event_message(h))}


def orphan(ctx, tenant: str, type: str, data: dict, actor: Actor = SYSTEM, then: list[tuple[str, dict]] = (), *,
           gap: int = 1) -> int:
    """As ``oml_admission``: insert ``type`` at ``gap`` seqs above the head, without moving the head, and run ``then``
    (the projection rows naming it) in the same transaction. ``gap`` 1 links it to the head; a larger gap links it to
    nothing, so it stays out of the way of the tenant's next genuine append. Returns its seq."""
    with ctx.db.tenant(ROLE, tenant) as c:
        head = c.execute(sa.text("SELECT seq, hash FROM chain_heads WHERE tenant_id = :t"), {"t": tenant}).one()
        seq = head.seq + gap
        c.execute(_INSERT, _row(c, tenant, type, data, actor, seq, bytes(head.hash) if gap == 1 else secrets.token_bytes(32)))
        for sql, params in then:
            c.execute(sa.text(sql), {"t": tenant, "seq": seq, **params})
    return seq


def refused_at_commit(exc: pytest.ExceptionInfo, what: str) -> None:
    assert exc.value.orig.sqlstate == "23000" and "chain membership" in str(exc.value) and what in str(exc.value), exc.value


@contextmanager
def chain_check_off(ctx) -> Iterator[None]:
    """The journal's chain-membership trigger disabled by the schema owner for the body (the owner may disable a
    table's triggers; a workload may not), on again after it."""
    with owner(ctx) as c:
        c.execute(sa.text("ALTER TABLE journal_events DISABLE TRIGGER oml_chain_member"))
    try:
        yield
    finally:
        with owner(ctx) as c:
            c.execute(sa.text("ALTER TABLE journal_events ENABLE TRIGGER oml_chain_member"))


def recorded(ctx, tenant: str) -> list[str]:
    with owner(ctx, tenant) as c:
        return list(c.execute(sa.text("SELECT reason FROM integrity_events WHERE tenant_id = :t AND reason LIKE 'state.%'"),
                              {"t": tenant}).scalars())


def _deks(ctx, tenant: str, claim_id: str) -> int:
    with owner(ctx, tenant) as c:
        return c.execute(sa.text("SELECT count(*) FROM wrapped_deks d JOIN artifacts a USING (tenant_id, artifact_id)"
                                 " WHERE a.tenant_id = :t AND a.claim_id = CAST(:c AS uuid)"), {"t": tenant, "c": claim_id}).scalar()


def _operator(ctx, kit) -> str:
    admin = authenticate(ctx.db, kit.admin_key)
    ident = ctx.tenancy.create_identity(admin, "person", "operator")["identity_id"]
    return ctx.tenancy.create_principal(admin, ident, "operator", [kit.root])["api_key"]


def _submit(client, key: str, root: str, statement: str) -> dict:
    r = client.post("/v1/claims", json={"workarea_id": root, "body": {"statement": statement}}, headers=bearer(key))
    assert r.status_code == 200, r.text
    return r.json()


# ---------------------------------------------------------------- grants

def test_no_workload_rewrites_or_removes_the_journal_or_a_head(ctx):
    with owner(ctx) as c:
        for role in WORKLOADS:
            for table, privs in (("journal_events", ("UPDATE", "DELETE", "TRUNCATE")), ("chain_heads", ("DELETE", "TRUNCATE"))):
                for priv in privs:
                    assert not c.execute(sa.text("SELECT has_table_privilege(:r, :t, :p)"),
                                         {"r": role, "t": table, "p": priv}).scalar(), (role, table, priv)
    with owner(ctx) as c:
        triggers = {(r.tgname, r.tgdeferrable, r.tginitdeferred) for r in c.execute(sa.text(
            "SELECT tgname, tgdeferrable, tginitdeferred FROM pg_trigger WHERE tgname IN ('oml_chain_member', 'oml_chain_head')"))}
    assert triggers == {("oml_chain_member", True, True), ("oml_chain_head", True, True)}


# ---------------------------------------------------------------- the chain's own shape

def test_the_head_never_moves_back_nor_off_the_chain(ctx):
    kit = make_kit(ctx, "chain-head")
    with ctx.db.tenant(ROLE, kit.tenant) as c:
        head = c.execute(sa.text("SELECT seq, hash FROM chain_heads WHERE tenant_id = :t"), {"t": kit.tenant}).one()
        back = c.execute(sa.text("SELECT hash FROM journal_events WHERE tenant_id = :t AND seq = :s"),
                         {"t": kit.tenant, "s": head.seq - 1}).scalar()
    with pytest.raises(sa.exc.IntegrityError) as e:  # back one event, to a genuine row's hash
        with ctx.db.tenant(ROLE, kit.tenant) as c:
            c.execute(sa.text("UPDATE chain_heads SET seq = :s, hash = :h WHERE tenant_id = :t"),
                      {"t": kit.tenant, "s": head.seq - 1, "h": back})
    refused_at_commit(e, "moves the head back")
    with pytest.raises(sa.exc.IntegrityError) as e:  # the same seq, another hash
        with ctx.db.tenant(ROLE, kit.tenant) as c:
            c.execute(sa.text("UPDATE chain_heads SET hash = :h WHERE tenant_id = :t"), {"t": kit.tenant, "h": secrets.token_bytes(32)})
    refused_at_commit(e, "does not name the hash")
    with pytest.raises(sa.exc.IntegrityError) as e:  # a row after the head that links to nothing, and the head moved to it
        with ctx.db.tenant(ROLE, kit.tenant) as c:
            row = _row(c, kit.tenant, "tenant.policy_set", {"phone_regions": ["GB"]}, SYSTEM, head.seq + 1, secrets.token_bytes(32))
            c.execute(_INSERT, row)
            c.execute(sa.text("UPDATE chain_heads SET seq = :s, hash = :h WHERE tenant_id = :t"),
                      {"t": kit.tenant, "s": row["s"], "h": row["h"]})
    refused_at_commit(e, "does not link to the row before it")
    with pytest.raises(sa.exc.IntegrityError) as e:  # linked, but its hash is not the link of its bytes
        with ctx.db.tenant(ROLE, kit.tenant) as c:
            row = _row(c, kit.tenant, "tenant.policy_set", {"phone_regions": ["GB"]}, SYSTEM, head.seq + 1, bytes(head.hash))
            row["h"] = secrets.token_bytes(32)
            c.execute(_INSERT, row)
            c.execute(sa.text("UPDATE chain_heads SET seq = :s, hash = :h WHERE tenant_id = :t"),
                      {"t": kit.tenant, "s": row["s"], "h": row["h"]})
    refused_at_commit(e, "has a hash that is not its link")
    with owner(ctx, kit.tenant) as c:
        assert c.execute(sa.text("SELECT seq FROM chain_heads WHERE tenant_id = :t"), {"t": kit.tenant}).scalar() == head.seq
        assert c.execute(sa.text("SELECT max(seq) FROM journal_events WHERE tenant_id = :t"), {"t": kit.tenant}).scalar() == head.seq


# ---------------------------------------------------------------- orphans: refused at commit

def test_an_orphan_reparent_does_not_widen_a_readers_scope(ctx):
    kit = make_kit(ctx, "orphan-reparent")
    client = TestClient(create_app(ctx))
    admin, a, b, reader = reader_of_a(ctx, kit)
    v = _submit(client, kit.writer_key, b, "kept in b")
    r = client.post(f"/v1/versions/{v['version_id']}/review", json={"decision": "promote", "reason": "accurate"},
                    headers=bearer(kit.reviewer_key))
    assert r.status_code == 200, r.text
    assert client.get(f"/v1/claims/{v['claim_id']}", headers=bearer(reader)).status_code == 404  # outside its root
    with pytest.raises(sa.exc.IntegrityError) as e:
        orphan(ctx, kit.tenant, "workarea.reparented", {"node_id": b, "new_parent_id": a},
               actor=Actor(admin.principal_id, admin.identity_id), then=[
                   ("UPDATE workareas SET parent_id = CAST(:a AS uuid) WHERE tenant_id = :t AND node_id = CAST(:b AS uuid)", {"a": a, "b": b}),
                   ("UPDATE workareas SET path = (SELECT path FROM workareas WHERE tenant_id = :t AND node_id = CAST(:a AS uuid)) || '.b'"
                    " WHERE tenant_id = :t AND node_id = CAST(:b AS uuid)", {"a": a, "b": b})])
    refused_at_commit(e, "lies above the chain head")
    assert client.get(f"/v1/claims/{v['claim_id']}", headers=bearer(reader)).status_code == 404


def test_an_orphan_erasure_does_not_make_erase_keep_the_data(ctx):
    kit = make_kit(ctx, "orphan-erased")
    client = TestClient(create_app(ctx))
    operator = _operator(ctx, kit)
    v = _submit(client, kit.writer_key, kit.root, "to be erased for real")
    with pytest.raises(sa.exc.IntegrityError) as e:
        orphan(ctx, kit.tenant, "claim.erased", {"claim_id": v["claim_id"], "reason": "data_subject_request", "artifacts": []},
               then=[("UPDATE claims SET erased_seq = :seq WHERE tenant_id = :t AND claim_id = CAST(:c AS uuid)", {"c": v["claim_id"]})])
    refused_at_commit(e, "lies above the chain head")
    r = client.post(f"/v1/erasures/claims/{v['claim_id']}", json={"reason": "data_subject_request"}, headers=bearer(operator))
    assert r.status_code == 200, r.text
    assert [x["already_erased"] for x in r.json()["erasures"]] == [False]
    assert _deks(ctx, kit.tenant, v["claim_id"]) == 0  # shredded


def _readlog_world(ctx, tenant: str):
    w, _, operator, _ = world_with_reads(ctx, tenant, "A fact to read before the retention window.")
    readlog.set_policy(ctx, operator, 30)
    readlog.seal(ctx, tenant)
    return w, operator


def test_an_orphan_retention_policy_does_not_delete_the_read_log(ctx):
    w, operator = _readlog_world(ctx, "orphan-retention")
    logged = len(read_events(ctx, w.tenant))
    assert logged > 0
    with pytest.raises(sa.exc.IntegrityError) as e:
        orphan(ctx, w.tenant, "retention.policy_set", {"readlog_days": 1},
               actor=Actor(operator.principal_id, operator.identity_id),
               then=[("UPDATE retention_policies SET readlog_days = 1, set_seq = :seq WHERE tenant_id = :t", {})])
    refused_at_commit(e, "lies above the chain head")
    two_days_on = dt.datetime.now(dt.UTC) + dt.timedelta(days=2)
    out = readlog.apply_retention(ctx, w.tenant, principal=operator, at=two_days_on)
    assert out["readlog_days"] == 30 and out["reads_removed"] == 0
    assert len(read_events(ctx, w.tenant)) == logged


# ---------------------------------------------------------------- orphans the database let in: the acts refuse

def test_erase_compares_erased_seq_with_the_verified_journal(ctx):
    kit = make_kit(ctx, "orphan-erased-off")
    client = TestClient(create_app(ctx))
    operator = _operator(ctx, kit)
    v = _submit(client, kit.writer_key, kit.root, "kept until erased for real")
    with chain_check_off(ctx):
        orphan(ctx, kit.tenant, "claim.erased", {"claim_id": v["claim_id"], "reason": "data_subject_request", "artifacts": []},
               gap=1000,
               then=[("UPDATE claims SET erased_seq = :seq WHERE tenant_id = :t AND claim_id = CAST(:c AS uuid)", {"c": v["claim_id"]})])
    r = client.post(f"/v1/erasures/claims/{v['claim_id']}", json={"reason": "data_subject_request"}, headers=bearer(operator))
    assert r.status_code == 500 and r.json()["code"] == UNVERIFIED, r.text  # not "already erased"
    assert _deks(ctx, kit.tenant, v["claim_id"]) == 1
    assert "state.mismatch" in recorded(ctx, kit.tenant)


def test_retention_compares_its_window_with_the_verified_journal(ctx):
    w, operator = _readlog_world(ctx, "orphan-retention-off")
    logged = len(read_events(ctx, w.tenant))
    with chain_check_off(ctx):
        orphan(ctx, w.tenant, "retention.policy_set", {"readlog_days": 1}, actor=Actor(operator.principal_id, operator.identity_id),
               gap=1000, then=[("UPDATE retention_policies SET readlog_days = 1, set_seq = :seq WHERE tenant_id = :t", {})])
    with pytest.raises(OMLError) as e:
        readlog.apply_retention(ctx, w.tenant, principal=operator, at=dt.datetime.now(dt.UTC) + dt.timedelta(days=2))
    assert e.value.code == UNVERIFIED and e.value.status == 500
    assert len(read_events(ctx, w.tenant)) == logged
    assert "state.mismatch" in recorded(ctx, w.tenant)
