"""Verified-state snapshots (docs/security-model.md, "Verified-state snapshots"; docs/adr/0021-verified-state-snapshots.md).

A process that starts again resumes a tenant's verified state from the newest snapshot whose MAC (under a key the
KeyStore holds, never a database role) verifies and whose head hash is the journal's row at its seq, and verifies only
the events after it. A snapshot written as the workload that can write the table, or one that names a row with another
hash, is refused: recorded in ``integrity_events`` (``state.snapshot``) and the chain verified from event 1; one past
the chain head or of an unknown format version is skipped (verified from event 1, not counted). The counts
below are :attr:`VerifiedStates.verified_events` (signature checks), never timings.
"""
from __future__ import annotations

import dataclasses
import json

import sqlalchemy as sa

from oml.domain.canonical import canonical
from oml.services.claims.admission import Submission
from oml.services.erasure.acts import Erasure
from oml.services.journal import state_snapshots, verified_state
from oml.services.keys import rotation as keys_rotation
from oml.services.keys import signing_rotation
from oml.services.reads import readlog
from oml.services.runtime.auth import authenticate
from oml.services.simulations.acts import Simulations

from support.admission import journal_len, make_kit
from support.owner import owner

ROLE = "oml_admission"  # the workload credential that writes snapshots
EVERY = state_snapshots.Policy(min_events=1, every_events=1, min_interval_s=0)
NEVER = state_snapshots.Policy(min_events=0)


def _history(ctx, tenant: str):
    """A tenant with principals (one revoked), workareas (reparented, policy set), a closed and an open simulation, a
    held and an erased claim, a signing-key and an encryption-key rotation and a read-log policy."""
    kit = make_kit(ctx, tenant)
    adm = ctx.admission
    admin, w = authenticate(ctx.db, kit.admin_key), authenticate(ctx.db, kit.writer_key)
    op = authenticate(ctx.db, ctx.tenancy.create_principal(admin, kit.dual_identity, "operator", [kit.root])["api_key"])
    dev = ctx.tenancy.create_workarea(admin, "dev", kit.root, development=True)["node_id"]
    sims = Simulations(ctx)
    closed = sims.open(op, "what if", [w.principal_id])["simulation_id"]
    sims.close(op, closed)
    sims.open(op, "still open", [w.principal_id, op.principal_id])
    er = Erasure(ctx)
    held = adm.submit(w, [Submission(kit.root, {"statement": "held"})])["items"][0]
    er.place_hold(op, held["claim_id"], "legal_request")
    gone = adm.submit(w, [Submission(kit.root, {"statement": "erase me"})])["items"][0]
    er.erase_claim(op, gone["claim_id"], "data_subject_request", rewrite=False)
    signing_rotation.rotate_signing_key(adm.acts, adm.keystore, tenant, principal=admin, actor=adm.acts.actor(admin))
    keys_rotation.rotate(ctx, tenant)
    readlog.set_policy(ctx, op, 30)
    revoked = ctx.tenancy.create_principal(admin, kit.dual_identity, "writer", [dev])
    ctx.tenancy.revoke_principal(admin, revoked["principal_id"])
    ctx.tenancy.reparent_workarea(admin, dev, None)
    ctx.tenancy.set_workarea_policy(admin, dev, development=False)
    return kit, w


def _fields(s: verified_state.TenantState) -> dict:
    """What a state holds, comparable: the dataclass's compared fields and the verifier's position and key ring."""
    out = {f.name: getattr(s, f.name) for f in dataclasses.fields(s) if f.compare and f.name != "verifier"}
    return out | {"seq": s.seq, "head": s.head, "keys": s.verifier.keys}


def _full(ctx, tenant: str) -> verified_state.TenantState:
    """The tenant's state verified from event 1 by a process that reads no snapshot."""
    fresh = verified_state.VerifiedStates(ctx.db)
    with ctx.db.tenant(ROLE, tenant) as c:
        s = fresh.current(c, tenant)
    assert fresh.verified_events == s.seq
    return s


def _cold(ctx, tenant: str) -> tuple[verified_state.TenantState, int]:
    """As a restarted process: the tenant's state on first use, and how many events that verified."""
    vs = verified_state.of(ctx.db)
    vs.forget(tenant)
    before = vs.verified_events
    with ctx.db.tenant(ROLE, tenant) as c:
        s = vs.current(c, tenant)
    return s, vs.verified_events - before


def _snapshot_now(ctx, tenant: str) -> int:
    """Write the tenant's snapshot (a first use that verifies from event 1, under a policy that always writes)."""
    vs = verified_state.of(ctx.db)
    vs.use_snapshots(ctx.keystore, EVERY)
    with owner(ctx, tenant) as c:
        c.execute(sa.text("DELETE FROM verified_state_snapshots WHERE tenant_id = :t"), {"t": tenant})
    s, _ = _cold(ctx, tenant)
    vs.use_snapshots(ctx.keystore, NEVER)  # the snapshot stays the one at this seq
    return s.seq


def _snapshots(ctx, tenant: str) -> list:
    with owner(ctx, tenant) as c:
        return c.execute(sa.text("SELECT seq, head_hash, version, state, mac FROM verified_state_snapshots WHERE tenant_id = :t"
                                 " ORDER BY seq"), {"t": tenant}).all()


def _recorded(ctx, tenant: str) -> list[tuple[int, str]]:
    with owner(ctx, tenant) as c:
        return [(r.status_seq, r.reason) for r in c.execute(sa.text(
            "SELECT status_seq, reason FROM integrity_events WHERE tenant_id = :t AND reason = 'state.snapshot'"), {"t": tenant})]


def _put(ctx, tenant: str, seq: int, head: bytes, state: bytes, mac: bytes | None, version: int = state_snapshots.VERSION) -> None:
    """As the workload role: replace the tenant's snapshots with this one."""
    with ctx.db.tenant(ROLE, tenant) as c:
        c.execute(sa.text("DELETE FROM verified_state_snapshots WHERE tenant_id = :t"), {"t": tenant})
        c.execute(sa.text("INSERT INTO verified_state_snapshots (tenant_id, seq, head_hash, version, state, mac)"
                          " VALUES (:t, :s, :h, :v, :st, :m)"), {"t": tenant, "s": seq, "h": head, "v": version, "st": state, "m": mac})


def _submit(ctx, w, kit, n: int) -> None:
    for i in range(n):
        ctx.admission.submit(w, [Submission(kit.root, {"statement": f"after the snapshot {i}"})])


def test_a_restarted_process_resumes_from_the_snapshot_and_verifies_only_the_tail(ctx):
    tenant = "snapshot-resume"
    kit, w = _history(ctx, tenant)
    assert verified_state.of(ctx.db).snapshots is not None  # the process's act runner wired them
    at = _snapshot_now(ctx, tenant)
    (snap,) = _snapshots(ctx, tenant)
    assert snap.seq == at == journal_len(ctx, tenant) and snap.version == state_snapshots.VERSION
    _submit(ctx, w, kit, 3)
    head = journal_len(ctx, tenant)
    assert head == at + 3
    # First use in a "new" process: only the three events after the snapshot are verified ...
    resumed, verified = _cold(ctx, tenant)
    assert verified == 3
    # ... and what it holds is exactly what verifying every event from 1 gives.
    full = _full(ctx, tenant)
    assert _fields(resumed) == _fields(full)
    assert resumed.principals and resumed.simulations and resumed.holds and resumed.erased and resumed.readlog_days == 30
    assert len(resumed.encryption) == 2 and len(resumed.verifier.keys.history) == 2
    # An act resumes the same way (its head lock, its catch-up), and is served.
    vs = verified_state.of(ctx.db)
    vs.forget(tenant)
    before = vs.verified_events
    _submit(ctx, w, kit, 1)
    assert vs.verified_events - before == 3
    assert _recorded(ctx, tenant) == []


def test_a_snapshot_forged_as_the_workload_is_refused_and_recorded(ctx):
    tenant = "snapshot-forged"
    kit, w = _history(ctx, tenant)
    _snapshot_now(ctx, tenant)
    (snap,) = _snapshots(ctx, tenant)
    # The workload can insert (and delete) snapshots, but holds no MAC key: it edits the state -- its own writer
    # principal becomes an admin -- and keeps the genuine MAC, or makes one up, or leaves it out.
    state = json.loads(bytes(snap.state))
    state["principals"][w.principal_id]["role"] = "admin"
    edited = canonical(state)
    for mac in (bytes(snap.mac), b"\x00" * 32, None):
        _put(ctx, tenant, snap.seq, bytes(snap.head_hash), edited, mac)
        s, verified = _cold(ctx, tenant)
        assert verified == journal_len(ctx, tenant)  # from event 1
        assert s.principals[w.principal_id]["role"] == "writer"
        assert _fields(s) == _fields(_full(ctx, tenant))
    assert _recorded(ctx, tenant) == [(snap.seq, "state.snapshot")]  # counted (three refusals, one row)
    with owner(ctx, tenant) as c:
        assert c.execute(sa.text("SELECT refusals FROM integrity_events WHERE tenant_id = :t AND reason = 'state.snapshot'"),
                         {"t": tenant}).scalar() == 3


def test_a_snapshot_whose_seq_names_a_row_with_another_hash_is_refused(ctx):
    tenant = "snapshot-moved"
    kit, w = _history(ctx, tenant)
    at = _snapshot_now(ctx, tenant)
    (snap,) = _snapshots(ctx, tenant)
    _submit(ctx, w, kit, 2)
    key = verified_state.of(ctx.db).snapshots.key(tenant)
    state, head = bytes(snap.state), bytes(snap.head_hash)
    # Correctly MACed (as a snapshot of another database under the same tenant key would be), but the journal's row
    # at that seq is not the one it verified: refused and recorded.
    _put(ctx, tenant, at - 1, head, state, state_snapshots.mac(key, tenant, at - 1, head, state_snapshots.VERSION, state))
    s, verified = _cold(ctx, tenant)
    assert verified == journal_len(ctx, tenant)
    assert _fields(s) == _fields(_full(ctx, tenant))
    assert _recorded(ctx, tenant) == [(at - 1, "state.snapshot")]
    # Past the chain head (a read on a standby behind the primary, a journal restored alone): not used, and not
    # counted, since only a key holder can have written it; neither by a read nor by an act at its locked head.
    _put(ctx, tenant, at + 50, head, state, state_snapshots.mac(key, tenant, at + 50, head, state_snapshots.VERSION, state))
    s, verified = _cold(ctx, tenant)
    assert verified == journal_len(ctx, tenant)
    assert _fields(s) == _fields(_full(ctx, tenant))
    vs = verified_state.of(ctx.db)
    vs.forget(tenant)
    before = vs.verified_events
    _submit(ctx, w, kit, 1)
    assert vs.verified_events - before == journal_len(ctx, tenant) - 1
    assert _recorded(ctx, tenant) == [(at - 1, "state.snapshot")]


def test_a_snapshot_of_an_unknown_version_is_ignored(ctx):
    tenant = "snapshot-version"
    kit, w = _history(ctx, tenant)
    at = _snapshot_now(ctx, tenant)
    (snap,) = _snapshots(ctx, tenant)
    key = verified_state.of(ctx.db).snapshots.key(tenant)
    state, head = bytes(snap.state), bytes(snap.head_hash)
    _put(ctx, tenant, at, head, state, state_snapshots.mac(key, tenant, at, head, 2, state), version=2)
    s, verified = _cold(ctx, tenant)
    assert verified == at and _recorded(ctx, tenant) == []  # verified from event 1, nothing refused


def test_a_snapshot_is_written_by_policy_and_older_ones_are_deleted(ctx):
    tenant = "snapshot-policy"
    kit, w = _history(ctx, tenant)
    vs = verified_state.of(ctx.db)
    with owner(ctx, tenant) as c:
        c.execute(sa.text("DELETE FROM verified_state_snapshots WHERE tenant_id = :t"), {"t": tenant})
    vs.use_snapshots(ctx.keystore, state_snapshots.Policy(min_events=10_000, every_events=3, min_interval_s=0))
    _cold(ctx, tenant)  # fewer events than min_events, and no snapshot yet read: the state is past every_events
    first = [r.seq for r in _snapshots(ctx, tenant)]
    assert first == [journal_len(ctx, tenant)]
    _submit(ctx, w, kit, 2)  # own appends: two events past the snapshot, not yet three
    assert [r.seq for r in _snapshots(ctx, tenant)] == first
    _submit(ctx, w, kit, 1)
    assert [r.seq for r in _snapshots(ctx, tenant)] == [journal_len(ctx, tenant)]  # the new one only
    vs.use_snapshots(ctx.keystore, NEVER)
