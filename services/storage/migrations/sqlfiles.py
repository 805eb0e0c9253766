"""What the migrations share: re-applying OML's re-runnable SQL files, and the one answer to a downgrade.

New databases run every file under ``services/storage/sql`` through 0001; a later revision brings a database
migrated before it up to date by re-applying the files it changed (each is written to run again safely).
"""
from __future__ import annotations

from importlib import resources
from typing import NoReturn

from alembic import op

SQL = resources.files("oml.services.storage.sql")


def apply(*names: str) -> None:
    """Execute the named files of ``services/storage/sql``, in the order given."""
    for name in names:
        op.execute((SQL / name).read_text())


def tenant_isolation(*tables: str) -> None:
    """Give ``tables`` the tenant policy 90_rls.sql gives every tenant table (that file as a whole is not
    re-runnable: its narrow exceptions would be created twice)."""
    for t in tables:
        op.execute(f"ALTER TABLE {t} ENABLE ROW LEVEL SECURITY")
        op.execute(f"ALTER TABLE {t} FORCE ROW LEVEL SECURITY")
        op.execute(f"DROP POLICY IF EXISTS tenant_isolation ON {t}")
        op.execute(f"CREATE POLICY tenant_isolation ON {t} USING (tenant_id = oml_current_tenant())"
                   " WITH CHECK (tenant_id = oml_current_tenant())")


def append_only() -> NoReturn:
    """OML's revisions do not go back: the journal is append-only, and a restore replaces a database whole."""
    raise NotImplementedError("OML's journal is append-only; restore from backup instead of downgrading")
