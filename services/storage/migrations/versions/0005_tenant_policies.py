"""Tenant classifier policy (docs/personal-data.md; issue 13 item 2): the ``tenant_policies`` projection.

New databases get the table from ``22_tenant_policies.sql`` through 0001; a database migrated before it gets
the same re-runnable file, the tenant-isolation policy ``90_rls.sql`` gives every tenant table, and the grants.
Nothing to backfill: ``tenant.policy_set`` did not exist before this revision, so no journal holds one.
"""
from importlib import resources

from alembic import op

revision = "0005"
down_revision = "0004"

_RLS = """
ALTER TABLE tenant_policies ENABLE ROW LEVEL SECURITY;
ALTER TABLE tenant_policies FORCE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS tenant_isolation ON tenant_policies;
CREATE POLICY tenant_isolation ON tenant_policies USING (tenant_id = oml_current_tenant())
  WITH CHECK (tenant_id = oml_current_tenant());
"""


def upgrade() -> None:
    sql = resources.files("oml.services.storage.sql")
    op.execute((sql / "22_tenant_policies.sql").read_text())
    op.execute(_RLS)
    op.execute((sql / "96_tenant_policy_grants.sql").read_text())


def downgrade() -> None:
    raise NotImplementedError("OML's journal is append-only; restore from backup instead of downgrading")
