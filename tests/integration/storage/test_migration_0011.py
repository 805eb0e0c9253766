"""Migration 0011 on a database from before it: new claim versions are guarded by one statement-level check of
the set (``oml_guard_insert``), status changes still row by row (``oml_guard``), and a forged insert is still
refused while genuine admission passes."""
from __future__ import annotations

import sqlalchemy as sa
from alembic import command

from oml.services.claims.admission import Submission
from oml.services.runtime.auth import authenticate
from oml.services.storage.migrate import alembic_config

from support.admission import make_kit, owner

# Before 0011 there was no statement trigger (the row trigger guarded inserts too): dropping it and moving the
# revision back stands in for that schema; the upgrade must install it again.
BEFORE = """
DROP TRIGGER oml_guard_insert ON claim_versions;
UPDATE alembic_version SET version_num = '0010';
"""
TRIGGERS = ("SELECT tgname, tgtype & 1 = 1 AS per_row, tgtype & 4 = 4 AS on_insert FROM pg_trigger"
            " WHERE tgrelid = 'claim_versions'::regclass AND tgname LIKE 'oml_guard%' ORDER BY tgname")
FORGE = ("INSERT INTO claim_versions SELECT (jsonb_populate_record(NULL::claim_versions, to_jsonb(v) || jsonb_build_object("
         "'version_id', gen_random_uuid(), 'version_no', 99))).* FROM claim_versions v WHERE tenant_id = :t")


def test_upgrade_from_0010_guards_new_versions_as_a_set(ctx):
    kit = make_kit(ctx, "migration-0011")
    writer = authenticate(ctx.db, kit.writer_key)
    with owner(ctx) as c:
        c.execute(sa.text(BEFORE))
    command.upgrade(alembic_config(ctx.db.owner_url.render_as_string(hide_password=False)), "0011")
    with owner(ctx) as c:
        assert [tuple(r) for r in c.execute(sa.text(TRIGGERS))] == [("oml_guard", True, False), ("oml_guard_insert", False, True)]
    ctx.admission.submit(writer, [Submission(kit.root, {"statement": f"after the upgrade {i}"}) for i in range(3)])
    try:
        with ctx.db.tenant("oml_admission", kit.tenant) as c:
            c.execute(sa.text(FORGE), {"t": kit.tenant})
    except sa.exc.IntegrityError as exc:
        assert "authority guard: claim_versions row" in str(exc.orig)
    else:
        raise AssertionError("a copied version with a new id was admitted")
