"""The restore fence (``restore_state``) is written by the owner only: one pending row refuses every tenant's
requests, so a workload role that could insert it could stop the whole service (docs/security-model.md,
"Bodies, fences and wrapped DEKs"). ``oml restore begin`` and ``oml restore reapply-erasures`` run with the owner's
credentials. The line is also in ``96_erasure_grants.sql`` for new databases.
"""
from alembic import op

revision = "0016"
down_revision = "0014"


def upgrade() -> None:
    op.execute("REVOKE INSERT, UPDATE, DELETE ON restore_state FROM oml_admission")


def downgrade() -> None:
    op.execute("GRANT INSERT, UPDATE ON restore_state TO oml_admission")
