"""The BM25 leg counts its corpus over the rows the read admits, reads each row's length from a stored column
(``memories_fts.tsv_len``, generated from ``tsv``) and takes its candidates from the ts_rank leg's own query
text: re-applies ``60_search.sql``, ``61_bm25.sql`` (which replaces ``oml_bm25_search`` with a signature without
per-term tsqueries) and its grants, and drops ``bm25_stats``, whose tenant-wide counts are no longer read
(docs/recall.md, "BM25"; the erasure inventory loses that copy class). Adding the generated column rewrites
``memories_fts`` once. First it applies ``01_tenant_binding.sql`` (``oml_bound_tenant``, ``oml_search_limit``), which
the re-applied functions now call; functions that earlier revisions created and this one does not re-apply keep
their inline checks, which refuse the same calls with the same message."""
from alembic import op

from oml.services.storage.migrations import sqlfiles

revision = "0010"
down_revision = "0009"


def upgrade() -> None:
    sqlfiles.apply("01_tenant_binding.sql", "60_search.sql", "61_bm25.sql", "96_bm25_grants.sql")
    op.execute("DROP TABLE IF EXISTS bm25_stats")


downgrade = sqlfiles.append_only
