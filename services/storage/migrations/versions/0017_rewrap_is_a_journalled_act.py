"""A rewrap is a journalled act: ``oml keys rewrap`` writes each new wrapped DEK as ``oml_admission`` in the
transaction that appends ``encryption_key.rewrapped`` naming its SHA-256, so reads and ``oml index verify`` can
compare every wrapped DEK with a signed digest (docs/key-management.md, docs/security-model.md). Admission could
already insert and delete wrapped DEKs; the column UPDATE adds no power the digest check does not see. The line is
also in ``95_grants.sql`` for new databases.
"""
from alembic import op

revision = "0017"
down_revision = "0016"


def upgrade() -> None:
    op.execute("GRANT UPDATE (wrapped, key_version) ON wrapped_deks TO oml_admission")


def downgrade() -> None:
    op.execute("REVOKE UPDATE (wrapped, key_version) ON wrapped_deks FROM oml_admission")
