"""What one workload credential can do to others (docs/security-model.md, "Locks and connections" and "Idempotency
records"): column-level UPDATE grants where a workload writes only some columns, the integrity counter as an
upsert that only grows (``99_lock_narrowing.sql``), and the MAC column of idempotency records
(``99_idempotency_mac.sql``). New databases get both files through 0001; this applies the same re-runnable files
to a database migrated before them. Records written before it have no MAC and are refused on replay (the client
retries with a new key); each workload role's connection limit is set by every migration run
(``services/storage/migrate.py``).
"""
from oml.services.storage.migrations import sqlfiles

revision = "0019"
down_revision = "0018"


def upgrade() -> None:
    sqlfiles.apply("99_idempotency_mac.sql", "99_lock_narrowing.sql")


downgrade = sqlfiles.append_only
