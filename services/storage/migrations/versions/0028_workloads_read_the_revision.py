"""Every workload role may read (not write) ``alembic_version``, the database's schema revision: a process that does
not migrate compares it with its release's head before it first uses a role (docs/operator-guide.md, "Upgrading").

The grant is made here rather than in a file under ``services/storage/sql``: those files are OML's schema, which 0001
runs on a new database, while ``alembic_version`` is Alembic's table, which Alembic creates before the first migration
runs. Every database, new or migrated, passes through this revision with the table in place, so one statement here
covers both; the grant is re-runnable (GRANT of a privilege held is a no-op)."""
from alembic import op

from oml.services.storage.migrations import sqlfiles

revision = "0028"
down_revision = "0027"


def upgrade() -> None:
    op.execute("GRANT SELECT ON alembic_version TO oml_admission, oml_server, oml_lake_writer, oml_reconciler, "
               "oml_indexer, oml_relay")


downgrade = sqlfiles.append_only
