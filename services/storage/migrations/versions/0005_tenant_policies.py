"""Tenant classifier policy (docs/personal-data.md): the ``tenant_policies`` projection.

New databases get the table from ``22_tenant_policies.sql`` through 0001; a database migrated before it gets
the same re-runnable file, the tenant-isolation policy ``90_rls.sql`` gives every tenant table, and the grants.
Nothing to backfill: ``tenant.policy_set`` did not exist before this revision, so no journal holds one.
"""
from oml.services.storage.migrations import sqlfiles

revision = "0005"
down_revision = "0004"


def upgrade() -> None:
    sqlfiles.apply("22_tenant_policies.sql")
    sqlfiles.tenant_isolation("tenant_policies")
    sqlfiles.apply("96_tenant_policy_grants.sql")


downgrade = sqlfiles.append_only
