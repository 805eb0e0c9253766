"""The authority guards' functions run with ``search_path = public, pg_temp`` (a fix to 0011): a trigger
runs in the writer's own session, every role may create temporary tables, and ``pg_temp`` is searched first for a
table named without a schema, so a temporary ``journal_events`` (or ``workareas``) made by a workload was what the
guards read its writes against. Re-applies the re-runnable ``97_authority_guards.sql``; the guards' tests in
``tests/integration/journal/test_authority_forgery.py`` try the temporary tables in a fresh session and a pooled one.
"""
from oml.services.storage.migrations import sqlfiles

revision = "0012"
down_revision = "0011"


def upgrade() -> None:
    sqlfiles.apply("97_authority_guards.sql")


downgrade = sqlfiles.append_only
