"""The per-process key history of verified reads follows the journal (docs/security-model.md, "Verified reads").

A row a workload writes into ``journal_events`` at a seq far above the head (``oml_admission`` may insert journal
rows) is read by a verified read (here: the body read's journalled rewraps); it never verifies, and it must not
freeze the tenant's key history below a signing key rotated afterwards: a version signed under the new key is still
served, and one signed under the old key after the rotation is not.
"""
from __future__ import annotations

import os
import uuid

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from oml.services.entrypoints.http.app import create_app
from oml.services.keys import signing_rotation
from oml.services.reads import verified_reads

from support.admission import owner_unguarded
from support.owner import chain_checks_off
from support.recall import make_world, owner

TENANT = "key-history"


@pytest.fixture(scope="module")
def w(ctx):
    w = make_world(ctx, TENANT)
    w.before = w.remember("main", "The backup drill runs on the first Tuesday.")
    w.reader = w.key("reader")
    w.client = TestClient(create_app(ctx))
    return w


def fetch(w, claim_id: str) -> int:
    return w.client.get(f"/v1/claims/{claim_id}", headers={"Authorization": f"Bearer {w.keys[w.reader.principal_id]}"}).status_code


def _forge_far_row(ctx) -> int:
    """As ``oml_admission``: a rewrap row 1000 seqs above the head, signed by nobody the chain knows."""
    with owner(ctx, TENANT) as c:
        head = int(c.execute(sa.text("SELECT max(seq) FROM journal_events WHERE tenant_id = :t"), {"t": TENANT}).scalar())
    seq = head + 1000
    row = {"t": TENANT, "s": seq, "e": str(uuid.uuid4()), "k": "ed25519:forged", "c": b'{"type":"encryption_key.rewrapped"}',
           "h": os.urandom(32), "p": os.urandom(32), "g": os.urandom(64)}
    sql = sa.text("INSERT INTO journal_events (tenant_id, seq, event_id, type, kid, at, canonical, hash, prev_hash, signature)"
                  " VALUES (:t, :s, CAST(:e AS uuid), 'encryption_key.rewrapped', :k, now(), :c, :h, :p, :g)")
    try:
        with ctx.db.tenant("oml_admission", TENANT) as c:
            c.execute(sql, row)
    except sa.exc.DBAPIError:
        # The chain-membership check refuses a row off the chain at commit; the cache must hold anyway against the
        # owner, who may switch the checks off.
        with owner_unguarded(ctx, TENANT) as c, chain_checks_off(c):
            c.execute(sql, row)
    return seq


def test_a_forged_far_row_does_not_freeze_the_key_history_below_a_rotation(w, ctx):
    verified_reads.clear_cache()
    _forge_far_row(ctx)
    assert fetch(w, w.before["claim_id"]) == 200  # reads the journalled rewraps, the forged row among them
    rotated = signing_rotation.rotate_signing_key(ctx.acts, ctx.keystore, TENANT)
    after = w.remember("main", "Restores are rehearsed every quarter.")
    # Signed under the key the rotation registered: the history must have read that rotation.
    assert fetch(w, after["claim_id"]) == 200
    assert fetch(w, w.before["claim_id"]) == 200
    with owner(ctx, TENANT) as c:
        kid = c.execute(sa.text("SELECT kid FROM journal_events WHERE tenant_id = :t AND seq = :s"),
                        {"t": TENANT, "s": rotated["seq"] + 1}).scalar()
    assert kid == rotated["kid"]


def test_a_key_event_that_appears_below_the_history_rebuilds_it(w, ctx):
    """A key event read again with other bytes (a repaired or restored journal) rebuilds the history from event 1."""
    verified_reads.clear_cache()
    assert fetch(w, w.before["claim_id"]) == 200
    keys = verified_reads._KEYS.get(TENANT)
    assert keys is not None and keys.seen
    # Pretend the history offered a key event that is not in the journal at that seq: the next extension rebuilds.
    keys.seen = {(s, b"\x00" * 32) for s, _ in keys.seen}
    keys.upto = 0
    verified_reads._EVENTS.clear()
    assert fetch(w, w.before["claim_id"]) == 200
    assert verified_reads._KEYS.get(TENANT) is not keys
