"""Acting only on verified state (docs/security-model.md, "Acting only on verified state").

Each test is a forgery made with one workload credential, ``oml_admission``, as an attacker holding it would: a hash-linked
journal event whose signature is not the tenant's (the attacker holds no signing key), plus the projection row
that event "backs" -- which the authority guards accept, since they compare values, not signatures -- or a row
changed with no event at all. Then the act that would have trusted the row is asked for through the real HTTP
API or the ``oml`` CLI, and is refused with ``integrity.unverified_state`` (500) and counted in
``integrity_events``, with nothing of the act done.
"""
from __future__ import annotations

import uuid

import sqlalchemy as sa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from fastapi.testclient import TestClient

from oml.domain import chain, envelope, signing
from oml.domain.canonical import now
from oml.domain.events import SYSTEM, Actor, encode, event_object
from oml.services.entrypoints.http.app import create_app
from oml.services.runtime.auth import authenticate

from support.admission import bearer, make_kit, reader_of_a, run_cli
from support.owner import owner

ROLE = "oml_admission"  # the stolen workload credential
UNVERIFIED = "integrity.unverified_state"


def forge(ctx, tenant: str, type: str, data: dict, actor: Actor = SYSTEM, then: list[tuple[str, dict]] = ()) -> int:
    """As ``oml_admission``: append ``type`` hash-linked to the head, under the current kid but signed by a key of
    the attacker's own, move the head, and run ``then`` (the projection rows) in the same transaction. Returns its seq."""
    attacker = Ed25519PrivateKey.generate()
    with ctx.db.tenant(ROLE, tenant) as c:
        head = c.execute(sa.text("SELECT seq, hash FROM chain_heads WHERE tenant_id = :t FOR UPDATE"), {"t": tenant}).one()
        kid = c.execute(sa.text("SELECT kid FROM tenant_keys WHERE tenant_id = :t AND purpose = 'signing' AND retired_seq IS NULL"),
                        {"t": tenant}).scalar()
        seq, prev = head.seq + 1, bytes(head.hash)
        ev = event_object(tenant=tenant, seq=seq, type=type, event_id=str(uuid.uuid4()), at=now(), actor=actor, kid=kid, data=data)
        body = encode(ev)
        h = chain.link(prev, body)
        c.execute(sa.text("INSERT INTO journal_events (tenant_id, seq, event_id, type, kid, at, canonical, hash, prev_hash, signature)"
                          " VALUES (:t, :s, CAST(:e AS uuid), :ty, :k, now(), :b, :h, :p, :sig)"),
                  {"t": tenant, "s": seq, "e": ev["event_id"], "ty": type, "k": kid, "b": body, "h": h, "p": prev,
                   "sig": attacker.sign(signing.event_message(h))})
        c.execute(sa.text("UPDATE chain_heads SET seq = :s, hash = :h WHERE tenant_id = :t"), {"t": tenant, "s": seq, "h": h})
        for sql, params in then:
            c.execute(sa.text(sql), {"t": tenant, "seq": seq, **params})
    return seq


def refused(r, *, status: int = 500) -> None:
    assert r.status_code == status and r.json()["code"] == UNVERIFIED, r.text


def recorded(ctx, tenant: str) -> list[tuple[int, str]]:
    with owner(ctx, tenant) as c:
        return [(r.status_seq, r.reason) for r in c.execute(sa.text(
            "SELECT status_seq, reason FROM integrity_events WHERE tenant_id = :t AND reason LIKE 'state.%'"), {"t": tenant})]


def submit(client, key: str, root: str, statement: str, **extra):
    return client.post("/v1/claims", json={"workarea_id": root, "body": {"statement": statement}, **extra}, headers=bearer(key))


# ---------------------------------------------------------------- H1: encryption redirected

def test_a_forged_encryption_key_never_wraps_a_dek(ctx):
    kit = make_kit(ctx, "signed-h1")
    client = TestClient(create_app(ctx))
    for i in range(2):  # old bodies, wrapped to the tenant's own key
        assert submit(client, kit.writer_key, kit.root, f"before the forgery {i}").status_code == 200
    attacker = X25519PrivateKey.generate()
    pub = envelope.x25519_public_raw(attacker)
    seq = forge(ctx, kit.tenant, "encryption_key.rotated", {"new_key": pub.hex(), "version": 2}, then=[
        ("UPDATE tenant_keys SET retired_seq = :seq WHERE tenant_id = :t AND purpose = 'encryption' AND version = 1", {}),
        ("INSERT INTO tenant_keys (tenant_id, kid, purpose, version, public_key, registered_seq)"
         " VALUES (:t, :k, 'encryption', 2, :pub, :seq)", {"k": signing.kid(pub), "pub": pub})])

    # New bodies: admission refuses rather than wrap a DEK to the attacker's key.
    refused(submit(client, kit.writer_key, kit.root, "after the forgery"))
    # Old bodies: the rewrap refuses before it touches a DEK.
    rw = run_cli(ctx, ["keys", "rewrap", "--tenant", kit.tenant])
    assert rw.exit_code != 0 and UNVERIFIED in rw.output and "rewrapped" not in rw.output, rw.output
    with owner(ctx, kit.tenant) as c:
        versions = c.execute(sa.text("SELECT key_version, count(*) FROM wrapped_deks WHERE tenant_id = :t GROUP BY 1"),
                             {"t": kit.tenant}).all()
    assert [tuple(v) for v in versions] == [(1, 2)]  # nothing is wrapped to the attacker's key
    # The listing names the version as unverified, not the KeyStore as wrong.
    ls = run_cli(ctx, ["keys", "encryption-versions", "--tenant", kit.tenant])
    text = ls.output.replace("\n", " ")
    assert ls.exit_code == 1 and "UNVERIFIED" in ls.output and "does not verify" in text and "wrong KeyStore" not in text, ls.output
    assert (seq, "state.signature") in recorded(ctx, kit.tenant)


# ---------------------------------------------------------------- M1: forged policy and lifecycle rows

def _policy(ctx, tenant: str, node: str, admin, *, development: bool, pii_policy: str) -> int:
    return forge(ctx, tenant, "workarea.policy_set", {"node_id": node, "development": development, "pii_policy": pii_policy},
                 actor=Actor(admin.principal_id, admin.identity_id), then=[(
                     "UPDATE workareas SET development = :d, pii_policy = :pp WHERE tenant_id = :t AND node_id = CAST(:n AS uuid)",
                     {"d": development, "pp": pii_policy, "n": node})])


def _workarea(ctx, tenant: str, node: str):
    with owner(ctx, tenant) as c:
        return c.execute(sa.text("SELECT development, pii_policy FROM workareas WHERE tenant_id = :t AND node_id = CAST(:n AS uuid)"),
                         {"t": tenant, "n": node}).one()


def test_a_forged_development_flag_does_not_let_a_writer_promote_its_own_claim(ctx):
    kit = make_kit(ctx, "signed-dev")
    client = TestClient(create_app(ctx))
    v = submit(client, kit.dual_writer_key, kit.root, "promote me myself").json()
    admin = authenticate(ctx.db, kit.admin_key)
    seq = _policy(ctx, kit.tenant, kit.root, admin, development=True, pii_policy=_workarea(ctx, kit.tenant, kit.root).pii_policy)
    r = client.post(f"/v1/versions/{v['version_id']}/review", json={"decision": "promote", "reason": "accurate"},
                    headers=bearer(kit.dual_reviewer_key))
    refused(r)
    with owner(ctx, kit.tenant) as c:
        assert c.execute(sa.text("SELECT status FROM claim_versions WHERE tenant_id = :t AND version_id = CAST(:v AS uuid)"),
                         {"t": kit.tenant, "v": v["version_id"]}).scalar() == "held"
    assert (seq, "state.signature") in recorded(ctx, kit.tenant)


def test_a_forged_hold_release_does_not_let_an_operator_erase_a_held_claim(ctx):
    kit = make_kit(ctx, "signed-hold")
    client = TestClient(create_app(ctx))
    admin = authenticate(ctx.db, kit.admin_key)
    op_ident = ctx.tenancy.create_identity(admin, "person", "operator")["identity_id"]
    operator = ctx.tenancy.create_principal(admin, op_ident, "operator", [kit.root])["api_key"]
    v = submit(client, kit.writer_key, kit.root, "kept for the court").json()
    r = client.post(f"/v1/claims/{v['claim_id']}/hold", json={"reason": "legal_request"}, headers=bearer(operator))
    assert r.status_code == 200, r.text
    op = authenticate(ctx.db, operator)
    seq = forge(ctx, kit.tenant, "claim.hold_released", {"claim_id": v["claim_id"], "reason": "legal_request"},
                actor=Actor(op.principal_id, op.identity_id), then=[(
                    "UPDATE claims SET legal_hold = false WHERE tenant_id = :t AND claim_id = CAST(:c AS uuid)", {"c": v["claim_id"]})])
    r = client.post(f"/v1/erasures/claims/{v['claim_id']}", json={"reason": "data_subject_request"}, headers=bearer(operator))
    refused(r)
    with owner(ctx, kit.tenant) as c:
        row = c.execute(sa.text("SELECT erased_seq, (SELECT count(*) FROM wrapped_deks d JOIN artifacts a USING (tenant_id, artifact_id)"
                                " WHERE a.tenant_id = :t AND a.claim_id = CAST(:c AS uuid)) AS deks"
                                " FROM claims WHERE tenant_id = :t AND claim_id = CAST(:c AS uuid)"),
                        {"t": kit.tenant, "c": v["claim_id"]}).one()
    assert row.erased_seq is None and row.deks == 1  # nothing shredded
    assert (seq, "state.signature") in recorded(ctx, kit.tenant)


def test_a_forged_allow_policy_does_not_admit_personal_data(ctx):
    kit = make_kit(ctx, "signed-pii")
    client = TestClient(create_app(ctx))
    personal = "Call Jane at +44 20 7946 0958 or jane.doe@example.com about the rota."
    first = submit(client, kit.writer_key, kit.root, personal)
    assert first.status_code == 422 and first.json()["code"] == "admission.personal_data", first.text
    admin = authenticate(ctx.db, kit.admin_key)
    seq = _policy(ctx, kit.tenant, kit.root, admin, development=False, pii_policy="allow")
    assert _workarea(ctx, kit.tenant, kit.root).pii_policy == "allow"  # the guard let the row in
    refused(submit(client, kit.writer_key, kit.root, personal))
    with owner(ctx, kit.tenant) as c:
        assert c.execute(sa.text("SELECT count(*) FROM claim_versions WHERE tenant_id = :t"), {"t": kit.tenant}).scalar() == 0
    assert (seq, "state.signature") in recorded(ctx, kit.tenant)


def test_a_simulation_reopened_in_its_row_takes_no_writes(ctx):
    kit = make_kit(ctx, "signed-sim")
    client = TestClient(create_app(ctx))
    writer = authenticate(ctx.db, kit.writer_key)
    r = client.post("/v1/simulations", json={"name": "drill", "audience": [writer.principal_id]}, headers=bearer(kit.admin_key))
    assert r.status_code == 200, r.text
    sim = r.json()["simulation_id"]
    inside = {"workarea_id": kit.root, "body": {"statement": "written during the drill"}}
    assert client.post(f"/v1/simulations/{sim}/claims", json=inside, headers=bearer(kit.writer_key)).status_code == 200
    assert client.post(f"/v1/simulations/{sim}/close", headers=bearer(kit.admin_key)).status_code == 200
    closed = client.post(f"/v1/simulations/{sim}/claims", json=inside, headers=bearer(kit.writer_key))
    assert closed.status_code == 409 and closed.json()["code"] == "simulation.closed", closed.text
    # No event: the column is cleared in the row alone (admission holds the grant, and no guard reads it).
    with ctx.db.tenant(ROLE, kit.tenant) as c:
        c.execute(sa.text("UPDATE simulations SET closed_seq = NULL WHERE tenant_id = :t AND simulation_id = CAST(:s AS uuid)"),
                  {"t": kit.tenant, "s": sim})
    refused(client.post(f"/v1/simulations/{sim}/claims", json=inside, headers=bearer(kit.writer_key)))
    with owner(ctx, kit.tenant) as c:
        assert c.execute(sa.text("SELECT count(*) FROM claim_versions WHERE tenant_id = :t AND simulation_id = CAST(:s AS uuid)"),
                         {"t": kit.tenant, "s": sim}).scalar() == 1
    assert any(reason == "state.mismatch" for _, reason in recorded(ctx, kit.tenant))



# ---------------------------------------------------------------- the checks cost nothing when nothing is forged

def test_genuine_acts_pass_and_catch_up_with_other_processes(ctx):
    """Acts by this process, and acts journalled meanwhile by another process (a second act runner with its own
    state), are accepted: the state catches up by verifying what it did not sign itself."""
    from oml.services.journal import verified_state

    kit = make_kit(ctx, "signed-genuine")
    client = TestClient(create_app(ctx))
    assert submit(client, kit.writer_key, kit.root, "one").status_code == 200
    verified_state.of(ctx.db).forget(kit.tenant)  # as a fresh process would start
    v = submit(client, kit.writer_key, kit.root, "two").json()
    r = client.post(f"/v1/versions/{v['version_id']}/review", json={"decision": "promote", "reason": "accurate"},
                    headers=bearer(kit.reviewer_key))
    assert r.status_code == 200, r.text
    rot = run_cli(ctx, ["keys", "rotate-encryption", "--tenant", kit.tenant])
    assert rot.exit_code == 0, rot.output
    assert submit(client, kit.writer_key, kit.root, "three").status_code == 200
    ls = run_cli(ctx, ["keys", "encryption-versions", "--tenant", kit.tenant])
    assert ls.exit_code == 0 and "UNVERIFIED" not in ls.output, ls.output
    assert recorded(ctx, kit.tenant) == []



# ---------------------------------------------------------------- a reparent that widens a key's scope

def test_a_forged_reparent_does_not_widen_a_keys_scope(ctx):
    kit = make_kit(ctx, "signed-reparent")
    client = TestClient(create_app(ctx))
    admin, a, b, reader = reader_of_a(ctx, kit)
    v = submit(client, kit.writer_key, b, "kept in b").json()
    r = client.post(f"/v1/versions/{v['version_id']}/review", json={"decision": "promote", "reason": "accurate"},
                    headers=bearer(kit.reviewer_key))
    assert r.status_code == 200, r.text
    assert client.get(f"/v1/claims/{v['claim_id']}", headers=bearer(reader)).status_code == 404  # outside its root
    forge(ctx, kit.tenant, "workarea.reparented", {"node_id": b, "new_parent_id": a},
          actor=Actor(admin.principal_id, admin.identity_id), then=[
              ("UPDATE workareas SET parent_id = CAST(:a AS uuid) WHERE tenant_id = :t AND node_id = CAST(:b AS uuid)", {"a": a, "b": b}),
              ("UPDATE workareas SET path = (SELECT path FROM workareas WHERE tenant_id = :t AND node_id = CAST(:a AS uuid)) || '.b'"
               " WHERE tenant_id = :t AND node_id = CAST(:b AS uuid)", {"a": a, "b": b})])
    r = client.get(f"/v1/claims/{v['claim_id']}", headers=bearer(reader))
    assert r.status_code == 401 and r.json()["code"] == "access.unauthenticated", r.text
    assert any(reason == "state.mismatch" for _, reason in recorded(ctx, kit.tenant))
