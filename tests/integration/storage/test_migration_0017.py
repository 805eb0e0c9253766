"""Migration 0017 on a database from before it: ``oml_admission`` may write a wrapped DEK's ``wrapped`` and
``key_version`` (the rewrap act writes them in the transaction that journals their digests), and nothing else of it."""
from __future__ import annotations

import sqlalchemy as sa
from alembic import command

from oml.services.storage.migrate import alembic_config

from support.admission import owner

BEFORE = """
REVOKE UPDATE (wrapped, key_version) ON wrapped_deks FROM oml_admission;
UPDATE alembic_version SET version_num = '0016';
"""


def _may(ctx, column: str) -> bool:
    with owner(ctx) as c:
        return bool(c.execute(sa.text("SELECT has_column_privilege('oml_admission', 'wrapped_deks', :c, 'UPDATE')"),
                              {"c": column}).scalar())


def test_upgrade_from_0016_lets_admission_write_a_rewrap(ctx):
    with owner(ctx) as c:
        c.execute(sa.text(BEFORE))
    assert not _may(ctx, "wrapped") and not _may(ctx, "key_version")
    command.upgrade(alembic_config(ctx.db.owner_url.render_as_string(hide_password=False)), "0017")
    assert _may(ctx, "wrapped") and _may(ctx, "key_version")
    assert not _may(ctx, "artifact_id") and not _may(ctx, "tenant_id")
