"""Column-level UPDATE grants where a workload writes only some columns, and the integrity counter as an upsert
only (``99_lock_narrowing.sql``; docs/security-model.md, "Locks and connections"). New databases get them from
that file through 0001; this applies the same re-runnable file to a database migrated before it.
"""
from oml.services.storage.migrations import sqlfiles

revision = "0019"
down_revision = "0017"


def upgrade() -> None:
    sqlfiles.apply("99_lock_narrowing.sql")


downgrade = sqlfiles.append_only
