"""Authority guards (docs/security-model.md, Authority): narrower admission grants and the triggers that make a
principal, a tenant key and a version's status the projection of the journal event each names.

New databases get them from ``97_authority_guards.sql`` through 0001; this applies the same re-runnable file to a
database migrated before it. The triggers check rows written from now on; rows already there are checked by the
authority replay (``oml journal verify``, ``oml reconcile``).
"""
from oml.services.storage.migrations import sqlfiles

revision = "0003"
down_revision = "0002"


def upgrade() -> None:
    sqlfiles.apply("97_authority_guards.sql")


downgrade = sqlfiles.append_only
