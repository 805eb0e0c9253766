"""The authority guards on workareas, tenant and retention policies and claims (docs/security-model.md,
Authority; docs/adr/0003-authority-replay-and-grants.md).

A workarea's parent, path, development flag and personal-data policy, a tenant's phone regions and read-log
retention, and a claim's legal hold and erasure mark must be what the journal last said. New databases get it from ``97_authority_guards.sql`` through 0001; this re-applies the same
re-runnable file to a database migrated before it.
"""
from oml.services.storage.migrations import sqlfiles

revision = "0008"
down_revision = "0007"


def upgrade() -> None:
    sqlfiles.apply("97_authority_guards.sql")


downgrade = sqlfiles.append_only
