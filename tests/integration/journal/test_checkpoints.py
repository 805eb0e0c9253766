"""Checkpoints, the incremental Merkle frontier, inclusion and consistency proofs.

Real PostgreSQL, real admission signer, real lake-writer. Proofs fetched
over HTTP and the CLI are verified with :mod:`oml.domain.checkpoint` against
the verifier key printed at tenant creation.
"""
from __future__ import annotations

import pytest
import sqlalchemy as sa

from oml.domain import merkle
from oml.domain.checkpoint import CheckpointError, parse_consistency_proof, parse_verifier_key, verify_checkpoint, verify_inclusion_proof
from oml.domain.errors import OMLError
from oml.services.journal import checkpoints as cps
from oml.services.journal import proofs
from oml.services.keys import signing_rotation

from support.admission import bearer, owner, run_cli
from support.audit import add_claims, lake_copy, populate


@pytest.fixture(scope="module")
def ak(ctx):
    return populate(ctx, "ckpt", 3)


@pytest.fixture(scope="module")
def vkey(ctx, ak):
    # The C2SP verifier key printed at creation: the auditor's copy.
    with ctx.db.tenant("oml_server", ak.tenant) as c:
        pub = bytes(c.execute(sa.text("SELECT public_key FROM tenant_keys WHERE tenant_id = :t AND purpose = 'signing' AND version = 1"),
                              {"t": ak.tenant}).scalar())
    return pub


def _chain_hashes(ctx, tenant):
    with owner(ctx, tenant) as c:
        return [bytes(h) for h in c.execute(sa.text("SELECT hash FROM journal_events WHERE tenant_id = :t ORDER BY seq"), {"t": tenant}).scalars()]


def test_issue_is_idempotent_and_matches_a_full_recompute(ctx, ak, vkey):
    cp = cps.issue_checkpoint(ctx, ak.tenant)
    again = cps.issue_checkpoint(ctx, ak.tenant)
    assert again == cp
    hashes = _chain_hashes(ctx, ak.tenant)
    assert cp.tree_size == len(hashes)
    assert cp.root == merkle.root([merkle.event_leaf(h) for h in hashes])
    parsed = verify_checkpoint(cp.note, f"oml/{ak.tenant}", [vkey])
    assert (parsed.size, parsed.root, parsed.extensions) == (cp.tree_size, cp.root, ())
    # The frontier in merkle_state is exactly the compact range of the tree.
    with owner(ctx, ak.tenant) as c:
        st = c.execute(sa.text("SELECT tree_size, frontier FROM merkle_state WHERE tenant_id = :t"), {"t": ak.tenant}).one()
    assert merkle.CompactRange.from_bytes(st.tree_size, bytes(st.frontier)) == merkle.CompactRange.from_leaves(
        merkle.event_leaf(h) for h in hashes)


def test_frontier_advances_incrementally(ctx, ak):
    first = cps.issue_checkpoint(ctx, ak.tenant)
    for _ in range(3):
        add_claims(ctx, ak, 1, promote=False)
        cp = cps.issue_checkpoint(ctx, ak.tenant)
        hashes = _chain_hashes(ctx, ak.tenant)
        assert cp.tree_size == len(hashes) > first.tree_size
        assert cp.root == merkle.root([merkle.event_leaf(h) for h in hashes])


def test_every_inclusion_proof_and_consistency_proof_verifies(ctx, ak, vkey):
    cps.issue_checkpoint(ctx, ak.tenant)
    hashes = _chain_hashes(ctx, ak.tenant)
    origin = f"oml/{ak.tenant}"
    for seq, h in enumerate(hashes, 1):
        cp = verify_inclusion_proof(proofs.inclusion_proof(ctx, ak.tenant, seq), merkle.event_leaf(h), origin, [vkey])
        assert cp.size == len(hashes)
    with owner(ctx, ak.tenant) as c:
        sizes = list(c.execute(sa.text("SELECT tree_size FROM checkpoints WHERE tenant_id = :t ORDER BY tree_size"), {"t": ak.tenant}).scalars())
    assert len(sizes) >= 3
    for old in sizes:
        data, o, n = proofs.consistency_proof(ctx, ak.tenant, old)
        merkle.verify_consistency(o.tree_size, n.tree_size, parse_consistency_proof(data), o.root, n.root)


def test_refusals(ctx, ak):
    with pytest.raises(OMLError) as e:
        proofs.inclusion_proof(ctx, ak.tenant, 10**6)
    # Beyond the head no checkpoint will ever cover it: the seq does not exist (not "issue a checkpoint").
    assert e.value.code == "proof.invalid_range" and e.value.extra["head"] < 10**6
    with pytest.raises(OMLError) as e:
        proofs.consistency_proof(ctx, ak.tenant, 2)
    assert e.value.code == "checkpoint.not_found"
    # It names the sizes that exist, so the next try can pick one.
    sizes = e.value.extra["stored_sizes"]
    assert sizes and 2 not in sizes and sizes == sorted(sizes, reverse=True) and e.value.extra["tree_size"] == 2
    with pytest.raises(OMLError) as e:
        cps.issue_checkpoint(ctx, "no-such-tenant")
    assert e.value.code == "tenant.not_found"


def test_http_roles_and_formats(ctx, ak, client, vkey):
    origin = f"oml/{ak.tenant}"
    r = client.post("/v1/checkpoints", headers=bearer(ak.operator_key))
    assert r.status_code == 200
    issued = r.json()
    assert client.post("/v1/checkpoints", headers=bearer(ak.auditor_key)).json()["code"] == "access.denied"
    r = client.get("/v1/checkpoints/latest", headers=bearer(ak.auditor_key))
    assert r.status_code == 200 and r.json()["note"] == issued["note"]
    verify_checkpoint(r.json()["note"].encode(), origin, [vkey])
    for key in (ak.kit.writer_key, ak.kit.reviewer_key, ak.kit.admin_key):
        r = client.get("/v1/checkpoints/latest", headers=bearer(key))
        assert r.status_code == 403 and r.json()["code"] == "access.denied"
    hashes = _chain_hashes(ctx, ak.tenant)
    r = client.get("/v1/proofs/inclusion", params={"seq": 2}, headers=bearer(ak.auditor_key))
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    verify_inclusion_proof(r.content, merkle.event_leaf(hashes[1]), origin, [vkey])
    r = client.get("/v1/proofs/consistency", params={"from": 5, "to": issued["tree_size"]}, headers=bearer(ak.operator_key))
    assert r.status_code == 404 and r.json()["code"] == "checkpoint.not_found"
    first = client.get("/v1/proofs/inclusion", params={"seq": 0}, headers=bearer(ak.auditor_key))
    assert first.status_code == 422


def test_cli_issue_show_and_proofs(ctx, ak, vkey, tmp_path):
    add_claims(ctx, ak, 1, promote=False)
    r = run_cli(ctx, ["checkpoint", "issue", "--tenant", ak.tenant])
    assert r.exit_code == 0, r.output
    note = r.stdout.encode()
    cp = verify_checkpoint(note, f"oml/{ak.tenant}", [vkey])
    out = tmp_path / "p.tlog-proof"
    r = run_cli(ctx, ["proof", "inclusion", "--tenant", ak.tenant, "--seq", "1", "-o", str(out)])
    assert r.exit_code == 0, r.output
    verify_inclusion_proof(out.read_bytes(), merkle.event_leaf(_chain_hashes(ctx, ak.tenant)[0]), f"oml/{ak.tenant}", [vkey])
    with owner(ctx, ak.tenant) as c:
        first = c.execute(sa.text("SELECT min(tree_size) FROM checkpoints WHERE tenant_id = :t"), {"t": ak.tenant}).scalar()
    r = run_cli(ctx, ["proof", "consistency", "--tenant", ak.tenant, "--from", str(first), "--to", str(cp.size)])
    assert r.exit_code == 0, r.output
    with ctx.db.tenant("oml_server", ak.tenant) as c:
        old = cps.load(c, ak.tenant, first)
    merkle.verify_consistency(first, cp.size, parse_consistency_proof(r.stdout.encode()), old.root, cp.root)
    r = run_cli(ctx, ["proof", "consistency", "--tenant", ak.tenant, "--from", "1", "--to", str(cp.size)])
    assert r.exit_code == 2 and "checkpoint.not_found" in r.output and "stored_sizes" in r.stderr and str(first) in r.stderr
    r = run_cli(ctx, ["checkpoint", "show", "--tenant", ak.tenant])
    assert r.exit_code == 0 and r.stdout.encode() == note


def test_checkpoint_after_rotation_is_signed_by_the_new_key(ctx, ak, vkey):
    rot = signing_rotation.rotate_signing_key(ctx.acts, ctx.keystore, ak.tenant)
    cp = cps.issue_checkpoint(ctx, ak.tenant)
    with owner(ctx, ak.tenant) as c:
        new_pub = bytes(c.execute(sa.text("SELECT public_key FROM tenant_keys WHERE tenant_id = :t AND kid = :k"),
                                  {"t": ak.tenant, "k": rot["kid"]}).scalar())
    assert cp.kid == rot["kid"]
    verify_checkpoint(cp.note, f"oml/{ak.tenant}", [new_pub])
    with pytest.raises(CheckpointError):
        verify_checkpoint(cp.note, f"oml/{ak.tenant}", [vkey])


def test_checkpoints_reach_the_lake_and_periodic_issuance(ctx, ak):
    from deltalake import DeltaTable

    add_claims(ctx, ak, 1, promote=False)
    issued = cps.issue_due(ctx, tenants=[ak.tenant])
    assert issued == {ak.tenant: cps.latest(ctx, ak.tenant).tree_size}
    assert cps.issue_due(ctx, tenants=[ak.tenant]) == {}  # nothing new: no second checkpoint
    lake_copy(ctx, ak.tenant)
    t = DeltaTable(f"{ctx.settings.lake}/checkpoints").to_pyarrow_table(filters=[("tenant_id", "=", ak.tenant)])
    with owner(ctx, ak.tenant) as c:
        pg = {int(r.tree_size): bytes(r.note) for r in c.execute(sa.text("SELECT tree_size, note FROM checkpoints WHERE tenant_id = :t"), {"t": ak.tenant})}
    assert {int(n): bytes(b) for n, b in zip(t.column("tree_size").to_pylist(), t.column("note").to_pylist())} == pg


def test_a_broken_chain_is_never_checkpointed(ctx):
    bk = populate(ctx, "ckpt-broken", 1, canary=False)
    cps.issue_checkpoint(ctx, bk.tenant)
    add_claims(ctx, bk, 2, promote=False)
    with owner(ctx, bk.tenant) as c:
        seq = c.execute(sa.text("SELECT max(seq) - 1 FROM journal_events WHERE tenant_id = :t"), {"t": bk.tenant}).scalar()
        c.execute(sa.text("UPDATE journal_events SET canonical = canonical || '\\x20'::bytea WHERE tenant_id = :t AND seq = :s"),
                  {"t": bk.tenant, "s": seq})
    with pytest.raises(OMLError) as e:
        cps.issue_checkpoint(ctx, bk.tenant)
    assert e.value.code == "checkpoint.chain_broken" and e.value.extra == {"seq": seq}


def test_verifier_key_printed_at_creation_verifies_checkpoints(ctx):
    t = ctx.tenancy.create_tenant("ckpt-vkey")
    name, pub = parse_verifier_key(t.verifier_key)
    cp = cps.issue_checkpoint(ctx, "ckpt-vkey")
    assert name == "oml/ckpt-vkey"
    verify_checkpoint(cp.note, name, [pub])
