"""The BM25 leg keeps its statistics and impact-ordered postings instead of counting them per query
(docs/adr/0020-bm25-bounded-top-k.md): applies ``63_bm25_postings.sql`` (the tables ``bm25_groups``,
``bm25_df`` and ``bm25_postings``, the statement triggers on ``memories_fts`` that keep them, the bounded search
``oml_bm25_topk`` and ``oml_create_tenant_partitions``, which now also creates a tenant's partitions of the two
per-tenant tables) and its grant, gives the tables the tenant policy, then creates every existing tenant's
partitions and fills them from ``memories_fts`` (one set-based pass per tenant). The two per-tenant tables hold
lexemes, so they become erasure rewrite targets: ``erasure_rewrites.target`` admits them and
``71_erasure_rewrite.sql`` (``oml_erasure_rewrite``, moved out of ``70_erasure.sql`` so it can be re-applied)
rewrites the tenant's partition of each (docs/erasure.md)."""
from alembic import op

from oml.services.storage.migrations import sqlfiles

revision = "0020"
down_revision = "0019"


def upgrade() -> None:
    sqlfiles.apply("63_bm25_postings.sql", "96_bm25_grants.sql", "71_erasure_rewrite.sql")
    op.execute("ALTER TABLE erasure_rewrites DROP CONSTRAINT IF EXISTS erasure_rewrites_target_check")
    op.execute("ALTER TABLE erasure_rewrites ADD CONSTRAINT erasure_rewrites_target_check CHECK (target IN ('artifacts',"
               " 'wrapped_deks', 'claim_subjects', 'memories_fts', 'memory_embeddings', 'bm25_postings', 'bm25_df',"
               " 'sim_memories_fts', 'sim_memory_embeddings', 'pg_statistic'))")
    sqlfiles.tenant_isolation("bm25_groups", "bm25_df", "bm25_postings")
    op.execute("""DO $$
DECLARE t text;
BEGIN
  FOR t IN SELECT tenant_id FROM tenants ORDER BY tenant_no LOOP
    PERFORM set_config('oml.tenant_id', t, true);
    PERFORM oml_create_tenant_partitions();
    PERFORM oml_bm25_rebuild();
  END LOOP;
END $$""")


downgrade = sqlfiles.append_only
