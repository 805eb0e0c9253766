"""A history made through admission with every kind of act replays with no authority finding (domain/replay.py)
and the same projections: the replay accepts what admission permits."""
from __future__ import annotations

from oml.services.claims.admission import Submission
from oml.services.erasure.acts import Erasure
from oml.services.journal.projections import verify_tenant
from oml.services.journal.verify import verify_journal
from oml.services.keys import rotation as keys_rotation
from oml.services.keys import signing_rotation
from oml.services.reads import readlog
from oml.services.runtime.auth import authenticate
from oml.services.simulations.acts import Simulations
from oml.workers.index import indexer
from oml.workers.reconcile import reconciler

from support.admission import make_kit


def test_every_kind_of_genuine_act_replays_without_a_finding(ctx, tmp_path):
    kit = make_kit(ctx, "replay-genuine")
    adm = ctx.admission
    admin = authenticate(ctx.db, kit.admin_key)
    w = authenticate(ctx.db, kit.writer_key)
    r = authenticate(ctx.db, kit.reviewer_key)
    opk = ctx.tenancy.create_principal(admin, kit.dual_identity, "operator", [kit.root])["api_key"]
    op = authenticate(ctx.db, opk)
    dev = ctx.tenancy.create_workarea(admin, "dev", kit.root, development=True)["node_id"]
    dw = authenticate(ctx.db, kit.dual_writer_key)
    dr = authenticate(ctx.db, kit.dual_reviewer_key)
    sv = adm.submit(dw, [Submission(dev, {"statement": "self"})])["items"][0]
    adm.review(dr, sv["version_id"], "promote", "accurate")
    v1 = adm.submit(w, [Submission(kit.root, {"statement": "one"})])["items"][0]
    adm.review(r, v1["version_id"], "promote", "accurate")
    v2 = adm.submit(w, [Submission(kit.root, {"statement": "two"}, claim_id=v1["claim_id"], supersedes=v1["version_id"])])["items"][0]
    adm.review(r, v2["version_id"], "promote", "accurate", note="looks right")
    adm.review(r, v2["version_id"], "demote", "outdated")
    sims = Simulations(ctx)
    s = sims.open(op, "what if", [w.principal_id, r.principal_id])["simulation_id"]
    t1 = sims.submit(w, s, [Submission(kit.root, {"statement": "sim"}, claim_id=v1["claim_id"], supersedes=v1["version_id"])])["items"][0]
    adm.review(r, t1["version_id"], "promote", "accurate")
    t2 = sims.submit(w, s, [Submission(kit.root, {"statement": "sim new"})])["items"][0]
    adm.review(r, t2["version_id"], "promote", "accurate")
    t3 = adm.submit(w, [Submission(kit.root, {"statement": "derived"}, derived_from=[t2["claim_id"]])])["items"][0]
    adm.review(r, t3["version_id"], "reject", "inaccurate")
    sims.close(op, s)
    er = Erasure(ctx)
    v3 = adm.submit(w, [Submission(kit.root, {"statement": "erase me"})])["items"][0]
    er.place_hold(op, v3["claim_id"], "legal_request")
    er.release_hold(op, v3["claim_id"], "legal_request")
    er.erase_claim(op, v3["claim_id"], "data_subject_request", rewrite=False)
    signing_rotation.rotate_signing_key(adm.acts, adm.keystore, kit.tenant, principal=admin, actor=adm.acts.actor(admin))
    signing_rotation.rotate_signing_key(adm.acts, adm.keystore, kit.tenant, recovery_private_key=kit.recovery)
    keys_rotation.rotate(ctx, kit.tenant)
    readlog.set_policy(ctx, op, 30)
    ak = ctx.tenancy.create_principal(admin, kit.dual_identity, "writer", [dev])
    ctx.tenancy.revoke_principal(admin, ak["principal_id"])
    ctx.tenancy.reparent_workarea(admin, dev, None)
    ctx.tenancy.set_workarea_policy(admin, dev, development=False)
    indexer.enroll(ctx, kit.tenant)
    readlog.apply_retention(ctx, kit.tenant, principal=op)
    reconciler.run(ctx, kit.tenant, out_dir=tmp_path, trusted_fingerprint=kit.fingerprint)
    rep = verify_journal(ctx.db, kit.tenant, kit.fingerprint)
    assert rep.ok, rep.lines()
    assert verify_tenant(ctx.db, kit.tenant) == []
    res = reconciler.reconcile(ctx, kit.tenant, trusted_fingerprint=kit.fingerprint)
    assert not [d for d in res.discrepancies if d.kind == reconciler.UNAUTHORISED_ACT]
