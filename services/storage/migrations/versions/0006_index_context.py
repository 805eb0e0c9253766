"""Context windows at indexing time and the BM25 leg (docs/recall.md).

New databases get ``index_threads`` and ``oml_lock_window_claims`` from ``31_index_context.sql``, and
``oml_bm25_search`` from ``61_bm25.sql``, through 0001 (the ``bm25_stats`` table this revision once created
is gone: 0010);
a database migrated before them gets the same re-runnable files, the tenant-isolation policy ``90_rls.sql``
gives every tenant table, and the grants. Existing index rows have no windows until ``oml index rebuild``.
"""
from oml.services.storage.migrations import sqlfiles

revision = "0006"
down_revision = "0005"


def upgrade() -> None:
    sqlfiles.apply("31_index_context.sql", "61_bm25.sql")
    sqlfiles.tenant_isolation("index_threads")
    sqlfiles.apply("96_index_context_grants.sql", "96_bm25_grants.sql")


downgrade = sqlfiles.append_only
