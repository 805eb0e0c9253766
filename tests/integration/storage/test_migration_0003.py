"""Migration 0003 (authority guards) on a database from before it: admission loses DELETE and the broad UPDATE on
projection rows, and the guards refuse a principal that is not the projection of its journal event."""
from __future__ import annotations

import sqlalchemy as sa

from oml.services.storage.migrate import upgrade

from support.admission import make_kit, owner

BEFORE = """
GRANT SELECT, INSERT, UPDATE, DELETE ON identities, workareas, principals, claims, claim_versions,
  tip_intervals, claim_edges, simulations, sim_tip_intervals TO oml_admission;
DROP TRIGGER IF EXISTS oml_guard ON principals;
DROP TRIGGER IF EXISTS oml_guard ON tenant_keys;
DROP TRIGGER IF EXISTS oml_guard ON claim_versions;
UPDATE alembic_version SET version_num = '0002';
"""


def test_upgrade_from_0002_narrows_admission_and_installs_the_guards(ctx):
    kit = make_kit(ctx, "migration-0003")
    with owner(ctx) as c:
        c.execute(sa.text(BEFORE))
    upgrade(ctx.db.owner_url.render_as_string(hide_password=False))
    with owner(ctx) as c:
        assert set(c.execute(sa.text("SELECT tgrelid::regclass::text FROM pg_trigger WHERE tgname = 'oml_guard'")).scalars()) == {
            "principals", "tenant_keys", "claim_versions", "workareas", "tenant_policies", "retention_policies", "claims"}
        privs = set(c.execute(sa.text(
            "SELECT table_name || ':' || privilege_type FROM information_schema.role_table_grants"
            " WHERE grantee = 'oml_admission' AND table_name IN ('principals', 'claim_versions', 'claims')")).scalars())
    assert not privs & {"principals:DELETE", "principals:UPDATE", "claim_versions:DELETE", "claims:DELETE"}
    try:
        with ctx.db.tenant("oml_admission", kit.tenant) as c:
            c.execute(sa.text("UPDATE principals SET role = 'admin' WHERE tenant_id = :t"), {"t": kit.tenant})
    except sa.exc.DBAPIError as exc:
        assert exc.orig.sqlstate == "42501"
    else:
        raise AssertionError("admission may still change a principal's role")
