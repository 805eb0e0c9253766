"""A version whose status was forged is judged by the journal before its body is read, even when its artifact row is
gone too (the verdict and the body read are one statement: services/reads/bodies.py); the refusal is recorded."""
from __future__ import annotations

import pytest
import sqlalchemy as sa

from oml.services.reads import verified_reads
from oml.services.reads.bodies import Unverified, decrypt_versions

from support.admission import owner_unguarded
from support.recall import make_world

TENANT = "verified-bodies"


@pytest.fixture(scope="module")
def w(ctx):
    w = make_world(ctx, TENANT)
    w.held = w.remember("main.eng", "Held draft about the quarterly deploy freeze.", promote=False)
    w.index()
    return w


def _refusals(ctx) -> int:
    return sum(c.refusals for c in verified_reads.report(ctx, TENANT))


def test_a_forged_status_with_its_artifact_deleted_is_still_refused_and_counted(w, ctx):
    vid = w.held["version_id"]
    with owner_unguarded(ctx, TENANT) as c:
        assert c.execute(sa.text("UPDATE claim_versions SET status = 'promoted' WHERE tenant_id = :t AND version_id = :v"),
                         {"t": TENANT, "v": vid}).rowcount == 1
        assert c.execute(sa.text("DELETE FROM artifacts WHERE tenant_id = :t AND artifact_id ="
                                 " (SELECT artifact_id FROM claim_versions WHERE tenant_id = :t AND version_id = :v)"),
                         {"t": TENANT, "v": vid}).rowcount == 1
    before = _refusals(ctx)
    with ctx.db.tenant("oml_server", TENANT) as conn:
        # What the pre-merge code computed first (verified_reads.refused over claim_versions alone):
        assert verified_reads.refused(conn, TENANT, [vid]) == {vid: "status_log.disagrees"}
    mid = _refusals(ctx)
    assert mid == before + 1
    with ctx.db.tenant("oml_server", TENANT) as conn:
        got = decrypt_versions(conn, ctx.keystore, TENANT, [vid])[vid]
    assert isinstance(got, Unverified), f"served as {got!r}: the forged status was never judged"
    assert _refusals(ctx) == mid + 1
