"""A tenant whose verified state broke is served again once its journal is repaired, without a restart
(docs/security-model.md, "Acting only on verified state"; docs/adr/0018-acting-on-verified-state.md).

As ``oml_admission`` an attacker appends a hash-linked event signed by a key of its own and moves the head: every
act of the tenant is refused (``integrity.unverified_state``), and stays refused while the bad row is there. The
operator repairs the journal (here as a restore would: the forged row gone, the head back); the next act verifies
the chain again from event 1 and is served.
"""
from __future__ import annotations

import uuid

import sqlalchemy as sa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from fastapi.testclient import TestClient

from oml.domain import chain, signing
from oml.domain.canonical import now
from oml.domain.events import SYSTEM, encode, event_object
from oml.services.entrypoints.http.app import create_app

from support.admission import bearer, make_kit, owner_unguarded
from support.owner import chain_checks_off

TENANT = "state-recovery"
UNVERIFIED = "integrity.unverified_state"


def _forge(ctx) -> tuple[int, int, bytes]:
    """As ``oml_admission``: a linked ``tenant.policy_set`` signed by the attacker's key, the head moved onto it.
    Returns its seq and the head before it."""
    attacker = Ed25519PrivateKey.generate()
    with ctx.db.tenant("oml_admission", TENANT) as c:
        head = c.execute(sa.text("SELECT seq, hash FROM chain_heads WHERE tenant_id = :t FOR UPDATE"), {"t": TENANT}).one()
        kid = c.execute(sa.text("SELECT kid FROM tenant_keys WHERE tenant_id = :t AND purpose = 'signing' AND retired_seq IS NULL"),
                        {"t": TENANT}).scalar()
        seq, prev = int(head.seq) + 1, bytes(head.hash)
        ev = event_object(tenant=TENANT, seq=seq, type="tenant.policy_set", event_id=str(uuid.uuid4()), at=now(), actor=SYSTEM,
                          kid=kid, data={"phone_regions": ["DE"]})
        body = encode(ev)
        h = chain.link(prev, body)
        c.execute(sa.text("INSERT INTO journal_events (tenant_id, seq, event_id, type, kid, at, canonical, hash, prev_hash, signature)"
                          " VALUES (:t, :s, CAST(:e AS uuid), 'tenant.policy_set', :k, now(), :b, :h, :p, :sig)"),
                  {"t": TENANT, "s": seq, "e": ev["event_id"], "k": kid, "b": body, "h": h, "p": prev,
                   "sig": attacker.sign(signing.event_message(h))})
        c.execute(sa.text("UPDATE chain_heads SET seq = :s, hash = :h WHERE tenant_id = :t"), {"t": TENANT, "s": seq, "h": h})
    return seq, int(head.seq), prev


def test_a_repaired_journal_clears_a_broken_state_without_a_restart(ctx):
    kit = make_kit(ctx, TENANT)
    client = TestClient(create_app(ctx), raise_server_exceptions=False)

    def submit(text: str):
        return client.post("/v1/claims", json={"workarea_id": kit.root, "body": {"statement": text}}, headers=bearer(kit.writer_key))

    assert submit("Before the forgery.").status_code == 200
    seq, old_seq, old_hash = _forge(ctx)
    for _ in range(2):  # refused, and still refused while the bad row is there
        r = submit("Refused while the journal does not verify.")
        assert r.status_code == 500 and r.json()["code"] == UNVERIFIED and r.json()["seq"] == seq, r.text
    # The operator's repair (as a restore of the journal would leave it): the forged row gone, the head back.
    # Only the owner may move a head back, with the chain triggers off.
    with owner_unguarded(ctx, TENANT) as c, chain_checks_off(c):
        c.execute(sa.text("DELETE FROM journal_events WHERE tenant_id = :t AND seq = :s"), {"t": TENANT, "s": seq})
        c.execute(sa.text("UPDATE chain_heads SET seq = :s, hash = :h WHERE tenant_id = :t"), {"t": TENANT, "s": old_seq, "h": old_hash})
    r = submit("Served again once the journal is repaired.")
    assert r.status_code == 200, r.text
    # The tenant's verified state came back whole: an act that reads authority from it works too.
    assert submit("And the next one.").status_code == 200
