"""The reconciler may see which artifacts still have a wrapped DEK (``tenant_id``, ``artifact_id``; never ``wrapped``
nor ``key_version``), so the projection comparison reports a DEK deleted without a journalled erasure, which
``oml_admission`` can do (it holds DELETE on ``wrapped_deks`` to shred) and reads had taken for an erasure
(docs/adr/0004-verified-reads.md). The line is also in ``95_grants.sql`` for new databases.
"""
from alembic import op

revision = "0014"
down_revision = "0013"


def upgrade() -> None:
    op.execute("GRANT SELECT (tenant_id, artifact_id) ON wrapped_deks TO oml_reconciler")


def downgrade() -> None:
    op.execute("REVOKE SELECT (tenant_id, artifact_id) ON wrapped_deks FROM oml_reconciler")
