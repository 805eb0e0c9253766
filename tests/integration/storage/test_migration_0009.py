"""Migration 0009 on a database from before it: idempotency records written with the client's key in clear are
rewritten to its digest, and a retry after the upgrade still gets the first answer (replayed)."""
from __future__ import annotations

import sqlalchemy as sa
from alembic import command

from oml.services.claims.admission import Submission
from oml.services.runtime.auth import authenticate
from oml.services.storage.migrate import alembic_config

from support.admission import make_kit, owner


def test_upgrade_from_0008_hashes_stored_keys(ctx):
    kit = make_kit(ctx, "migration-0009")
    writer = authenticate(ctx.db, kit.writer_key)
    sub = [Submission(kit.root, {"statement": "written before the upgrade"})]
    first = ctx.admission.submit(writer, sub, idempotency_key="before-0009")
    with owner(ctx, kit.tenant) as c:  # what 0008 stored: the key itself
        c.execute(sa.text("UPDATE idempotency_keys SET key = 'before-0009' WHERE tenant_id = :t"), {"t": kit.tenant})
        c.execute(sa.text("UPDATE alembic_version SET version_num = '0008'"))
    command.upgrade(alembic_config(ctx.db.owner_url.render_as_string(hide_password=False)), "0009")
    with owner(ctx, kit.tenant) as c:
        assert c.execute(sa.text("SELECT count(*) FROM idempotency_keys WHERE tenant_id = :t AND key = 'before-0009'"),
                         {"t": kit.tenant}).scalar() == 0
    again = ctx.admission.submit(writer, sub, idempotency_key="before-0009")
    assert again["replayed"] is True and again["items"] == first["items"]
