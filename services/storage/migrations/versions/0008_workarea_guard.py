"""The authority guard on workareas (hostile review X3; docs/security-model.md, Authority).

A workarea's parent, path, development flag and personal-data policy must be what the journal last said for
its node. New databases get it from ``97_authority_guards.sql`` through 0001; this re-applies the same
re-runnable file to a database migrated before it.
"""
from importlib import resources

from alembic import op

revision = "0008"
down_revision = "0007"


def upgrade() -> None:
    op.execute((resources.files("oml.services.storage.sql") / "97_authority_guards.sql").read_text())


def downgrade() -> None:
    raise NotImplementedError("OML's journal is append-only; restore from backup instead of downgrading")
