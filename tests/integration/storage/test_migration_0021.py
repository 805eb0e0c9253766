"""Migration 0021 on a database from before it: the verified-state snapshot table, with tenant isolation and only the
acts' role (``oml_admission``) writing it."""
from __future__ import annotations

import sqlalchemy as sa
from alembic import command

from oml.services.storage.migrate import alembic_config
from oml.services.storage.migrations.sqlfiles import SQL

from support.admission import owner

BEFORE = """
DROP TABLE verified_state_snapshots;
UPDATE alembic_version SET version_num = '0020';
"""
_TABLE = sa.text("SELECT has_table_privilege(:r, 'verified_state_snapshots', :p)")


def test_upgrade_from_0019_creates_the_snapshot_table(ctx):
    with owner(ctx) as c:
        c.execute(sa.text(BEFORE))
    command.upgrade(alembic_config(ctx.db.owner_url.render_as_string(hide_password=False)), "0021")
    with owner(ctx) as c:
        rls = c.execute(sa.text("SELECT relrowsecurity AND relforcerowsecurity FROM pg_class WHERE relname = 'verified_state_snapshots'")).scalar()
        assert rls
        for priv in ("SELECT", "INSERT", "DELETE"):
            assert c.execute(_TABLE, {"r": "oml_admission", "p": priv}).scalar(), priv
        assert not c.execute(_TABLE, {"r": "oml_admission", "p": "UPDATE"}).scalar()
        for role in ("oml_server", "oml_indexer", "oml_lake_writer", "oml_relay", "oml_reconciler"):
            for priv in ("SELECT", "INSERT", "UPDATE", "DELETE"):
                assert not c.execute(_TABLE, {"r": role, "p": priv}).scalar(), (role, priv)
    # Re-runnable: the file applied again (as a later revision may) keeps the table, its policy and grants.
    with owner(ctx) as c:
        c.exec_driver_sql((SQL / "99_verified_state_snapshots.sql").read_text())
        assert c.execute(_TABLE, {"r": "oml_admission", "p": "INSERT"}).scalar()
        assert c.execute(sa.text("SELECT count(*) FROM pg_policies WHERE tablename = 'verified_state_snapshots'")).scalar() == 1
