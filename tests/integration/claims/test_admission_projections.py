"""``oml projections rebuild --verify`` (docs/design.md §The journal: Projections).

A replay of the journal into temporary tables reproduces the live tables
after every kind of act; a status flipped, a reviewer forged, a tip interval
deleted, a principal inserted or a ciphertext byte changed directly in the
database is reported by table, key and column; ``--apply`` restores the
journal's state. The comparison runs as the keyless ``oml_reconciler``.
"""
from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

from oml.services.claims.admission import Submission
from oml.services.journal.projections import verify_projections, verify_tenant
from oml.services.keys import signing_rotation
from oml.services.runtime.auth import authenticate

from support.admission import make_kit, owner, owner_unguarded, run_cli


@pytest.fixture(scope="module")
def hist(ctx):
    """A tenant whose journal exercises every projection the admission acts touch."""
    k = make_kit(ctx, "proj")
    adm = ctx.admission
    admin, w, r = (authenticate(ctx.db, x) for x in (k.admin_key, k.writer_key, k.reviewer_key))
    a = ctx.tenancy.create_workarea(admin, "alpha", k.root)["node_id"]
    b = ctx.tenancy.create_workarea(admin, "beta", a, development=True)["node_id"]
    g = ctx.tenancy.create_workarea(admin, "gamma", k.root)["node_id"]
    ctx.tenancy.reparent_workarea(admin, b, g)
    ctx.tenancy.set_workarea_policy(admin, a, pii_policy="allow")
    extra = ctx.tenancy.create_principal(admin, k.writer_identity, "reader", [a, g])
    ctx.tenancy.revoke_principal(admin, extra["principal_id"])
    s = adm.submit(w, [Submission(a, {"statement": "v1"}, valid_from="2024-01-01T00:00:00Z", valid_to="2030-01-01T00:00:00+02:00",
                                  confidence=500),
                       Submission(g, {"statement": "steer"}, kind="steering", provenance="inferred")])["items"]
    c1, v1 = s[0]["claim_id"], s[0]["version_id"]
    adm.review(r, v1, "promote", "accurate", note="looks right")
    v2 = adm.submit(w, [Submission(a, {"statement": "v2"}, claim_id=c1, supersedes=v1, derived_from=[s[1]["claim_id"]])])["items"][0]["version_id"]
    adm.review(r, v2, "promote", "accurate")
    adm.review(r, v2, "demote", "inaccurate")
    adm.review(r, s[1]["version_id"], "reject", "out_of_scope")
    held = adm.submit(w, [Submission(a, {"statement": "still held"})])["items"][0]
    signing_rotation.rotate_signing_key(adm.acts, adm.keystore, k.tenant)
    signing_rotation.rotate_signing_key(adm.acts, adm.keystore, k.tenant, recovery_private_key=k.recovery)
    adm.submit(w, [Submission(a, {"statement": "after rotations"})])
    return {"kit": k, "claim": c1, "v1": v1, "v2": v2, "held": held["version_id"]}


def test_replay_reproduces_live_tables(ctx, hist):
    t = hist["kit"].tenant
    assert verify_tenant(ctx.db, t) == []
    r = run_cli(ctx, ["projections", "rebuild", "--tenant", t, "--verify"])
    assert r.exit_code == 0 and "identical" in r.stdout


def test_runs_as_reconciler_inside_its_transaction(ctx, hist):
    t = hist["kit"].tenant
    with ctx.db.tenant("oml_reconciler", t) as c:
        live = c.execute(sa.text("SELECT count(*) FROM claim_versions WHERE tenant_id = :t"), {"t": t}).scalar()
        assert verify_projections(c, t) == []
        # The temporary tables are gone: the same transaction sees the live tables again.
        assert c.execute(sa.text("SELECT to_regclass('pg_temp.claim_versions')")).scalar() is None
        assert c.execute(sa.text("SELECT count(*) FROM claim_versions WHERE tenant_id = :t"), {"t": t}).scalar() == live


def _tamper(ctx, t, sql, **p):
    # The owner may switch the authority guards off; what it then writes is still found here.
    with owner_unguarded(ctx, t) as c:
        c.execute(sa.text(sql), {"t": t, **p})


def test_forged_rows_are_found_by_table_key_and_column_then_repaired(ctx, hist):
    k = hist["kit"]
    t = k.tenant
    _tamper(ctx, t, "UPDATE claim_versions SET status = 'promoted' WHERE tenant_id = :t AND version_id = :v", v=hist["held"])
    _tamper(ctx, t, "UPDATE claim_versions SET reviewer_identity = :i, reviewer_principal = 'ffffffffffffffff'"
                    " WHERE tenant_id = :t AND version_id = :v", v=hist["v1"], i=k.dual_identity)
    _tamper(ctx, t, "DELETE FROM tip_intervals WHERE tenant_id = :t AND version_id = :v", v=hist["v2"])
    _tamper(ctx, t, "INSERT INTO principals (tenant_id, principal_id, identity_id, role, roots, secret_hash, created_seq)"
                    " VALUES (:t, 'aaaaaaaaaaaaaaaa', :i, 'admin', ARRAY[CAST(:r AS uuid)], '\\x00', 1)", i=k.writer_identity, r=k.root)
    _tamper(ctx, t, "UPDATE workareas SET pii_policy = 'allow' WHERE tenant_id = :t AND node_id = :n", n=k.root)
    _tamper(ctx, t, "UPDATE artifacts SET ciphertext = set_byte(ciphertext, 20, get_byte(ciphertext, 20) # 1)"
                    " WHERE tenant_id = :t AND version_id = :v AND kind = 'body'", v=hist["held"])
    diffs = {(d.table, d.kind, d.columns) for d in verify_tenant(ctx.db, t)}
    assert ("claim_versions", "mismatch", ("status",)) in diffs
    assert ("claim_versions", "mismatch", ("reviewer_principal", "reviewer_identity")) in diffs
    assert ("tip_intervals", "missing", ()) in diffs
    assert ("principals", "extra", ()) in diffs
    assert ("workareas", "mismatch", ("pii_policy",)) in diffs
    assert ("artifacts", "digest", ("ciphertext",)) in diffs
    assert len(diffs) == 6
    r = run_cli(ctx, ["projections", "rebuild", "--tenant", t, "--verify"])
    assert r.exit_code == 1 and f"version_id={hist['held']}" in r.stdout and "status" in r.stdout
    js = json.loads(run_cli(ctx, ["projections", "rebuild", "--tenant", t, "--json"]).stdout)
    assert js["verdict"] == "differences" and len(js["differences"]) == 6
    # --apply restores every projection row from the journal; the artifact stays reported.
    r = run_cli(ctx, ["projections", "rebuild", "--tenant", t, "--apply"])
    assert r.exit_code == 0 and "repaired" in r.stdout
    left = verify_tenant(ctx.db, t)
    assert [(d.table, d.kind) for d in left] == [("artifacts", "digest")]
    with owner(ctx, t) as c:
        assert c.execute(sa.text("SELECT display_name FROM identities WHERE tenant_id = :t AND identity_id = :i"),
                         {"t": t, "i": k.writer_identity}).scalar() == "ingest"  # non-journal columns survive a repair
