"""The authority guard on claim_versions also checks status changes (docs/security-model.md, Authority).

A version's status may change only to what the journal event at its new ``status_seq`` gives this version,
and never back to an earlier event. New databases get it from ``97_authority_guards.sql`` through 0001; this
re-applies the same re-runnable file to a database migrated before it.
"""
from oml.services.storage.migrations import sqlfiles

revision = "0007"
down_revision = "0006"


def upgrade() -> None:
    sqlfiles.apply("97_authority_guards.sql")


downgrade = sqlfiles.append_only
