"""What PUBLIC may do in OML's database (docs/adr/0003-authority-replay-and-grants.md).

Applies ``98_public_privileges.sql`` -- TEMPORARY on the
database revoked from PUBLIC and granted to ``oml_reconciler``, CREATE on schema public revoked from PUBLIC -- to a
database migrated before it. A database created later from this one as a template does not inherit database
privileges: run the file on it too (tests/support/database.py does)."""
from oml.services.storage.migrations import sqlfiles

revision = "0013"
down_revision = "0012"


def upgrade() -> None:
    sqlfiles.apply("98_public_privileges.sql")


downgrade = sqlfiles.append_only
