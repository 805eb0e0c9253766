"""The claim_versions guard checks new rows once per statement, as a set (docs/adr/0001-admission-write-path.md, where the
cost of the row trigger it replaces is measured): a group commit's chunk of versions is one INSERT. Status changes
stay guarded row by row. New databases get it from
``97_authority_guards.sql`` through 0001; this re-applies the same re-runnable file to a database migrated
before it.
"""
from oml.services.storage.migrations import sqlfiles

revision = "0011"
down_revision = "0010"


def upgrade() -> None:
    sqlfiles.apply("97_authority_guards.sql")


downgrade = sqlfiles.append_only
