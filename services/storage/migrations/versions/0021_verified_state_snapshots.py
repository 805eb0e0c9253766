"""Verified-state snapshots: the table a restarted process resumes a tenant's verified state from, instead of
verifying its chain from event 1 (``99_verified_state_snapshots.sql``; docs/adr/0021-verified-state-snapshots.md).
Applies the re-runnable file, which new databases run through 0001.
"""
from oml.services.storage.migrations import sqlfiles

revision = "0021"
down_revision = "0020"


def upgrade() -> None:
    sqlfiles.apply("99_verified_state_snapshots.sql")


downgrade = sqlfiles.append_only
