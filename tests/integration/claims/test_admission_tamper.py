"""Tampering with the stored journal, re-signing it, and key rotations.

Each change is made the way an attacker with database write access would:
as the schema owner, directly in SQL. ``oml journal verify`` must then fail
at the changed ``seq`` (exit 1, naming it); a history re-signed under a new
key passes an unanchored verify (exit 3, saying NOT ANCHORED) and fails
``--trusted-key``.
"""
from __future__ import annotations

import json

import pytest
import sqlalchemy as sa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from oml.domain import chain, signing
from oml.domain.canonical import canonical
from oml.domain.errors import OMLError
from oml.domain.events import SYSTEM
from oml.services.claims.admission import Submission
from oml.services.journal import journal
from oml.services.journal.verify import verify_journal
from oml.services.keys import signing_rotation
from oml.services.runtime.auth import authenticate

from support.admission import journal_len, make_kit, owner, run_cli

K = 9  # the seq each tampering hits (a claim.submitted after the kit's setup events)


def _populated(ctx, name):
    kit = make_kit(ctx, name)
    w = authenticate(ctx.db, kit.writer_key)
    ctx.admission.submit(w, [Submission(kit.root, {"statement": f"fact {i}"}) for i in range(4)])
    assert journal_len(ctx, kit.tenant) >= K + 2
    return kit


TAMPER = {
    "payload byte": "UPDATE journal_events SET canonical = set_byte(canonical, 40, get_byte(canonical, 40) # 1) WHERE tenant_id = :t AND seq = :k",
    "hash": "UPDATE journal_events SET hash = set_byte(hash, 0, get_byte(hash, 0) # 1) WHERE tenant_id = :t AND seq = :k",
    "signature": "UPDATE journal_events SET signature = set_byte(signature, 10, get_byte(signature, 10) # 1) WHERE tenant_id = :t AND seq = :k",
    "key id": "UPDATE journal_events SET kid = 'ffffffffffffffff' WHERE tenant_id = :t AND seq = :k",
    "deleted row": "DELETE FROM journal_events WHERE tenant_id = :t AND seq = :k",
    "swapped rows": ["UPDATE journal_events SET seq = 100000 WHERE tenant_id = :t AND seq = :k",
                     "UPDATE journal_events SET seq = :k WHERE tenant_id = :t AND seq = :k + 1",
                     "UPDATE journal_events SET seq = :k + 1 WHERE tenant_id = :t AND seq = 100000"],
}


@pytest.mark.parametrize("what", list(TAMPER))
def test_each_tampering_fails_at_that_seq(ctx, what):
    kit = _populated(ctx, "tamper-" + what.replace(" ", "-"))
    assert verify_journal(ctx.db, kit.tenant, kit.fingerprint).ok
    stmts = TAMPER[what] if isinstance(TAMPER[what], list) else [TAMPER[what]]
    with owner(ctx, kit.tenant) as c:
        for s in stmts:
            c.execute(sa.text(s), {"t": kit.tenant, "k": K})
    rep = verify_journal(ctx.db, kit.tenant, kit.fingerprint)
    assert not rep.ok and rep.result.bad_seq == K, rep.lines()
    assert rep.exit_code == 1


def test_deleted_tail_is_found(ctx):
    kit = _populated(ctx, "tamper-tail")
    n = journal_len(ctx, kit.tenant)
    with owner(ctx, kit.tenant) as c:
        c.execute(sa.text("DELETE FROM journal_events WHERE tenant_id = :t AND seq = :n"), {"t": kit.tenant, "n": n})
    rep = verify_journal(ctx.db, kit.tenant, kit.fingerprint)
    assert rep.result.bad_seq == n and "truncated" in rep.result.reason


def test_cli_exit_codes_and_wording(ctx):
    kit = _populated(ctx, "tamper-cli")
    ok = run_cli(ctx, ["journal", "verify", "--tenant", kit.tenant, "--trusted-key", kit.fingerprint])
    assert ok.exit_code == 0 and "anchored" in ok.stdout and "NOT ANCHORED" not in ok.stdout
    un = run_cli(ctx, ["journal", "verify", "--tenant", kit.tenant])
    assert un.exit_code == 3 and "NOT ANCHORED" in un.stdout
    wrong = run_cli(ctx, ["journal", "verify", "--tenant", kit.tenant, "--trusted-key", "ab" * 32])
    assert wrong.exit_code == 1 and "seq 1" in wrong.stdout
    assert run_cli(ctx, ["journal", "verify", "--tenant", kit.tenant, "--trusted-key", "xyz"]).exit_code == 2
    with owner(ctx, kit.tenant) as c:
        c.execute(sa.text(TAMPER["signature"]), {"t": kit.tenant, "k": K})
    bad = run_cli(ctx, ["journal", "verify", "--tenant", kit.tenant, "--trusted-key", kit.fingerprint, "--json"])
    out = json.loads(bad.stdout)
    assert bad.exit_code == 1 and out["bad_seq"] == K and out["reason"] == "bad signature"
    # An unknown tenant is a refusal, as for reconcile (docs/anchoring.md); an existing tenant's cut journal is exit 1.
    unknown = run_cli(ctx, ["journal", "verify", "--tenant", "no-such-tenant"])
    assert unknown.exit_code == 2 and "tenant.not_found" in unknown.output


def _resign_in_place(ctx, tenant: str) -> None:
    """Rewrite the whole stored history under a key the attacker generated (owner access, no KeyStore)."""
    attacker = Ed25519PrivateKey.generate()
    pub = signing.raw_public(attacker)
    kid = signing.kid(pub)
    with owner(ctx, tenant) as c:
        rows = c.execute(sa.text("SELECT seq, canonical FROM journal_events WHERE tenant_id = :t ORDER BY seq"), {"t": tenant}).all()
        c.execute(sa.text("DELETE FROM journal_events WHERE tenant_id = :t"), {"t": tenant})
        h = chain.genesis(tenant)
        for r in rows:
            ev = json.loads(bytes(r.canonical))
            if ev["type"] == "tenant.created":
                ev["data"]["signing_key"] = pub.hex()
            ev["kid"] = kid
            body = canonical(ev)
            nh = chain.link(h, body)
            c.execute(sa.text("INSERT INTO journal_events (tenant_id, seq, event_id, type, kid, at, canonical, hash, prev_hash, signature)"
                              " VALUES (:t, :s, :e, :ty, :k, now(), :c, :h, :p, :sig)"),
                      {"t": tenant, "s": r.seq, "e": ev["event_id"], "ty": ev["type"], "k": kid, "c": body, "h": nh, "p": h,
                       "sig": attacker.sign(signing.event_message(nh))})
            h = nh
        c.execute(sa.text("UPDATE chain_heads SET hash = :h WHERE tenant_id = :t"), {"h": h, "t": tenant})


def test_resigned_history_passes_unanchored_fails_anchored(ctx):
    kit = _populated(ctx, "tamper-resign")
    _resign_in_place(ctx, kit.tenant)
    un = run_cli(ctx, ["journal", "verify", "--tenant", kit.tenant])
    assert un.exit_code == 3 and "NOT ANCHORED" in un.stdout and un.stdout.startswith("OK")
    an = run_cli(ctx, ["journal", "verify", "--tenant", kit.tenant, "--trusted-key", kit.fingerprint])
    assert an.exit_code == 1 and "seq 1" in an.stdout and "trusted fingerprint" in an.stdout


def test_rotation_without_pop_is_refused_and_detected_if_forced(ctx):
    kit = _populated(ctx, "tamper-pop")
    n = journal_len(ctx, kit.tenant)
    with pytest.raises(OMLError) as e:
        signing_rotation.rotate_signing_key(ctx.acts, ctx.keystore, kit.tenant, pop_override=b"\x00" * 64)
    assert e.value.code == "keys.invalid_proof" and journal_len(ctx, kit.tenant) == n
    # Forced into the table through the append path, signed by the genuine current key.
    new = signing.raw_public(Ed25519PrivateKey.generate())
    with ctx.db.tenant("oml_admission", kit.tenant) as conn:
        head = journal.Head(conn, kit.tenant)
        journal.append(head, ctx.admission.signer, "signing_key.rotated", SYSTEM,
                       {"new_key": new.hex(), "pop": "00" * 64, "authorised_by": "current"})
    rep = verify_journal(ctx.db, kit.tenant, kit.fingerprint)
    assert not rep.ok and rep.result.bad_seq == n + 1 and "proof of possession" in rep.result.reason


def test_recovery_rotation(ctx):
    kit = _populated(ctx, "recovery")
    n = journal_len(ctx, kit.tenant)
    with pytest.raises(OMLError) as e:
        signing_rotation.rotate_signing_key(ctx.acts, ctx.keystore, kit.tenant, recovery_private_key=Ed25519PrivateKey.generate().private_bytes_raw().hex())
    assert e.value.code == "keys.not_recovery_key" and journal_len(ctx, kit.tenant) == n
    rot = run_cli(ctx, ["keys", "rotate", "--tenant", kit.tenant, "--recovery-key-file", "-", "--json"], input=kit.recovery + "\n")
    assert rot.exit_code == 0, rot.output
    out = json.loads(rot.stdout)
    with owner(ctx, kit.tenant) as c:
        ev = c.execute(sa.text("SELECT kid, canonical FROM journal_events WHERE tenant_id = :t AND seq = :s"), {"t": kit.tenant, "s": out["seq"]}).one()
    recovery_pub = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(kit.recovery)).public_key().public_bytes_raw()
    assert ev.kid == signing.kid(recovery_pub) and json.loads(bytes(ev.canonical))["data"]["authorised_by"] == "recovery"
    # Later events are signed by the new key and the whole chain verifies from the original anchor.
    w = authenticate(ctx.db, kit.writer_key)
    ctx.admission.submit(w, [Submission(kit.root, {"statement": "after recovery"})])
    with owner(ctx, kit.tenant) as c:
        kid = c.execute(sa.text("SELECT kid FROM journal_events WHERE tenant_id = :t ORDER BY seq DESC LIMIT 1"), {"t": kit.tenant}).scalar()
    assert kid == out["kid"]
    ok = run_cli(ctx, ["journal", "verify", "--tenant", kit.tenant, "--trusted-key", kit.fingerprint])
    assert ok.exit_code == 0, ok.stdout
    # An ordinary rotation by the current key also verifies.
    assert run_cli(ctx, ["keys", "rotate", "--tenant", kit.tenant]).exit_code == 0
    assert verify_journal(ctx.db, kit.tenant, kit.fingerprint).ok
