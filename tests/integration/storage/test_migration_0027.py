"""Migration 0027 on a database at 0026: recall may read its candidates' context windows (an index of
``index_threads`` by version, ``SELECT`` of three of its columns for ``oml_server``), and the indexer's ``UPDATE``
stays narrowed to its columns."""
from __future__ import annotations

import sqlalchemy as sa

from oml.services.storage import migrate

from support.bm25_function import upgrade_to
from support.owner import owner


def test_migration_0027_adds_the_index_and_the_grant_and_keeps_the_indexer_narrow(ctx):
    with owner(ctx) as c:
        c.execute(sa.text("DROP INDEX index_threads_version"))
        c.execute(sa.text("REVOKE SELECT (tenant_id, version_id, window_claims) ON index_threads FROM oml_server"))
        c.execute(sa.text("UPDATE alembic_version SET version_num = '0026'"))
    upgrade_to(ctx, "head")  # through 0027; the shared database is left at head for the tests after it
    with owner(ctx) as c:
        assert c.execute(sa.text("SELECT to_regclass('index_threads_version') IS NOT NULL")).scalar()
        assert c.execute(sa.text("SELECT has_column_privilege('oml_server', 'index_threads', 'window_claims', 'SELECT')")).scalar()
        assert not c.execute(sa.text("SELECT has_table_privilege('oml_indexer', 'index_threads', 'UPDATE')")).scalar()
        assert c.execute(sa.text("SELECT version_num FROM alembic_version")).scalar() == migrate.head()
