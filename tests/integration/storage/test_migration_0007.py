"""Migration 0007 (the status guard) on a database from before it: the claim_versions guard then also
checks status changes, so a workload can no longer flip a held version to promoted."""
from __future__ import annotations

import pytest
import sqlalchemy as sa
from alembic import command

from oml.services.claims.admission import Submission
from oml.services.runtime.auth import authenticate
from oml.services.storage.migrate import alembic_config

from support.admission import make_kit, owner

# The guard as 0003 created it: new rows only.
BEFORE = """
DROP TRIGGER oml_guard ON claim_versions;
CREATE TRIGGER oml_guard BEFORE INSERT ON claim_versions FOR EACH ROW EXECUTE FUNCTION oml_guard_claim_versions();
UPDATE alembic_version SET version_num = '0006';
"""
FLIP = "UPDATE claim_versions SET status = 'promoted' WHERE tenant_id = :t AND version_id = :v"


def test_upgrade_from_0006_guards_status_changes(ctx):
    kit = make_kit(ctx, "migration-0007")
    v = ctx.admission.submit(authenticate(ctx.db, kit.writer_key), [Submission(kit.root, {"statement": "held"})])["items"][0]
    with owner(ctx) as c:
        c.execute(sa.text(BEFORE))
    with ctx.db.tenant("oml_admission", kit.tenant) as c:
        # Before: the old trigger does not look at updates (rolled back, so the version stays held).
        assert c.execute(sa.text(FLIP), {"t": kit.tenant, "v": v["version_id"]}).rowcount == 1
        c.rollback()
    command.upgrade(alembic_config(ctx.db.owner_url.render_as_string(hide_password=False)), "0007")
    with pytest.raises(sa.exc.IntegrityError, match="authority guard"):
        with ctx.db.tenant("oml_admission", kit.tenant) as c:
            c.execute(sa.text(FLIP), {"t": kit.tenant, "v": v["version_id"]})
    # A genuine promotion still passes the guard.
    reviewer = authenticate(ctx.db, kit.reviewer_key)
    assert ctx.admission.review(reviewer, v["version_id"], "promote", "accurate")["status"] == "promoted"
