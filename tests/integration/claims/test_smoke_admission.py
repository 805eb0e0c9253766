import sqlalchemy as sa

from oml.services.claims.admission import Submission
from oml.services.runtime.auth import authenticate


def test_tenant_submit_promote(ctx):
    adm = ctx.admission
    t = ctx.tenancy.create_tenant("acme")
    admin = authenticate(ctx.db, t.admin_key)
    w = ctx.tenancy.create_identity(admin, "service", "ingest")
    r = ctx.tenancy.create_identity(admin, "person", "rev")
    wk = ctx.tenancy.create_principal(admin, w["identity_id"], "writer", [t.root_workarea])
    rk = ctx.tenancy.create_principal(admin, r["identity_id"], "reviewer", [t.root_workarea])
    writer = authenticate(ctx.db, wk["api_key"])
    reviewer = authenticate(ctx.db, rk["api_key"])
    res = adm.submit(writer, [Submission(t.root_workarea, {"statement": "the sky is blue"})], idempotency_key="k1")
    again = adm.submit(writer, [Submission(t.root_workarea, {"statement": "the sky is blue"})], idempotency_key="k1")
    assert again["items"] == res["items"]
    v = res["items"][0]["version_id"]
    out = adm.review(reviewer, v, "promote", "accurate")
    assert out["status"] == "promoted"
    with ctx.db.tenant("oml_server", "acme") as c:
        assert c.execute(sa.text("SELECT count(*) FROM tip_intervals WHERE tenant_id='acme' AND to_seq IS NULL")).scalar() == 1
