"""Only the reconciler and the schema owner may create temporary tables (decisions X7): applies
``98_temporary_tables.sql`` (revoke TEMPORARY on the database from PUBLIC, grant it to ``oml_reconciler``) to a
database migrated before it. A database created later from this one as a template does not inherit database
privileges: run the file on it too (tests/conftest.py does)."""
from oml.services.storage.migrations import sqlfiles

revision = "0013"
down_revision = "0012"


def upgrade() -> None:
    sqlfiles.apply("98_temporary_tables.sql")


downgrade = sqlfiles.append_only
