"""Migration 0005 (tenant classifier policy) on a database from before it: ``tenant_policies`` appears with
forced tenant isolation and its grants, and admission can journal and read a tenant's phone regions."""
from __future__ import annotations

import sqlalchemy as sa
from alembic import command

from oml.services.runtime.auth import authenticate
from oml.services.storage.migrate import alembic_config

from support.admission import make_kit, owner

BEFORE = """
DROP TABLE tenant_policies;
UPDATE alembic_version SET version_num = '0004';
"""


def test_upgrade_from_0004_creates_tenant_policies(ctx):
    kit = make_kit(ctx, "migration-0005")
    with owner(ctx) as c:
        c.execute(sa.text(BEFORE))
    command.upgrade(alembic_config(ctx.db.owner_url.render_as_string(hide_password=False)), "0005")
    with owner(ctx) as c:
        forced = c.execute(sa.text("SELECT relrowsecurity AND relforcerowsecurity FROM pg_class WHERE relname = 'tenant_policies'")).scalar()
        policies = set(c.execute(sa.text("SELECT policyname FROM pg_policies WHERE tablename = 'tenant_policies'")).scalars())
        grants = set(c.execute(sa.text(
            "SELECT grantee || ':' || privilege_type FROM information_schema.role_table_grants WHERE table_name = 'tenant_policies'"
            " AND grantee LIKE 'oml_%'")).scalars())
    assert forced and policies == {"tenant_isolation"}
    assert {"oml_admission:SELECT", "oml_admission:INSERT", "oml_admission:UPDATE", "oml_server:SELECT",
            "oml_reconciler:SELECT"} <= grants
    assert "oml_admission:DELETE" not in grants
    admin = authenticate(ctx.db, kit.admin_key)
    assert ctx.tenancy.set_tenant_policy(admin, phone_regions=["GB"])["phone_regions"] == ["GB"]
    assert ctx.tenancy.tenant_policy(admin) == {"phone_regions": ["GB"], "default": False}
    # Another tenant's binding sees no row (forced RLS).
    with ctx.db.tenant("oml_server", "someone-else") as c:
        assert c.execute(sa.text("SELECT count(*) FROM tenant_policies")).scalar() == 0
