"""Migration 0016 on a database from before it: ``oml_admission`` may no longer write the restore fence (one pending
row refuses every tenant); it still reads it."""
from __future__ import annotations

import sqlalchemy as sa
from alembic import command

from oml.services.storage.migrate import alembic_config

from support.admission import owner

BEFORE = """
GRANT INSERT, UPDATE ON restore_state TO oml_admission;
UPDATE alembic_version SET version_num = '0014';
"""
SET = ("INSERT INTO restore_state (singleton, pending, reason) VALUES (true, false, 'operator')"
       " ON CONFLICT (singleton) DO UPDATE SET pending = restore_state.pending")


def _writes(ctx) -> bool:
    try:
        with ctx.db.system("oml_admission") as c:
            c.execute(sa.text(SET))
    except sa.exc.ProgrammingError as exc:
        assert "permission denied" in str(exc.orig)
        return False
    return True


def test_upgrade_from_0014_takes_the_fence_from_admission(ctx):
    with owner(ctx) as c:
        had = c.execute(sa.text("SELECT count(*) FROM restore_state")).scalar()
        c.execute(sa.text(BEFORE))
    try:
        assert _writes(ctx)
        command.upgrade(alembic_config(ctx.db.owner_url.render_as_string(hide_password=False)), "0016")
        assert not _writes(ctx)
        with ctx.db.system("oml_admission") as c:
            c.execute(sa.text("SELECT pending FROM restore_state"))
    finally:
        if not had:
            with owner(ctx) as c:
                c.execute(sa.text("DELETE FROM restore_state"))
