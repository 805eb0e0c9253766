"""Migration 0014 on a database from before it: the reconciler may read which artifacts have a wrapped DEK
(``tenant_id, artifact_id``) and still nothing of the DEK itself."""
from __future__ import annotations

import sqlalchemy as sa
from alembic import command

from oml.services.storage.migrate import alembic_config

from support.admission import make_kit, owner

BEFORE = """
REVOKE SELECT (tenant_id, artifact_id) ON wrapped_deks FROM oml_reconciler;
UPDATE alembic_version SET version_num = '0013';
"""


def _reads(ctx, tenant: str, sql: str) -> bool:
    try:
        with ctx.db.tenant("oml_reconciler", tenant) as c:
            c.execute(sa.text(sql), {"t": tenant})
    except sa.exc.ProgrammingError as exc:
        assert "permission denied" in str(exc.orig)
        return False
    return True


def test_upgrade_from_0013_lets_the_reconciler_see_dek_ids_only(ctx):
    kit = make_kit(ctx, "migration-0014")
    ids = "SELECT artifact_id FROM wrapped_deks WHERE tenant_id = :t"
    with owner(ctx) as c:
        c.execute(sa.text(BEFORE))
    assert not _reads(ctx, kit.tenant, ids)
    command.upgrade(alembic_config(ctx.db.owner_url.render_as_string(hide_password=False)), "0014")
    assert _reads(ctx, kit.tenant, ids)
    for secret in ("wrapped", "key_version", "*"):
        assert not _reads(ctx, kit.tenant, f"SELECT {secret} FROM wrapped_deks WHERE tenant_id = :t")
