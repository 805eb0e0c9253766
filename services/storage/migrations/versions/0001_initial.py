"""Initial schema: roles, tenant tables, indexes, RLS and grants.

The SQL lives in ``services/storage/sql/*.sql`` and runs in file-name order;
each file holds one concern (roles, core, claims, index, read log, audit,
RLS, grants) so a reviewer can read the schema as SQL.
"""
from importlib import resources

from alembic import op

from oml.services.storage.migrations import sqlfiles

revision = "0001"
down_revision = None


def upgrade() -> None:
    files = sorted(p for p in resources.files("oml.services.storage.sql").iterdir() if p.name.endswith(".sql"))
    for f in files:
        op.execute(f.read_text())


downgrade = sqlfiles.append_only
