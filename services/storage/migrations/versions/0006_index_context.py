"""Context windows at indexing time and the BM25 leg (docs/recall.md; issue 18 items 1 and 3).

New databases get ``index_threads`` and ``oml_lock_window_claims`` from ``31_index_context.sql``, and
``bm25_stats`` and ``oml_bm25_search`` from ``61_bm25.sql``, through 0001;
a database migrated before them gets the same re-runnable files, the tenant-isolation policy ``90_rls.sql``
gives every tenant table, and the grants. Existing index rows have no windows until ``oml index rebuild``.
"""
from importlib import resources

from alembic import op

revision = "0006"
down_revision = "0005"

_RLS = "".join(f"""
ALTER TABLE {t} ENABLE ROW LEVEL SECURITY;
ALTER TABLE {t} FORCE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS tenant_isolation ON {t};
CREATE POLICY tenant_isolation ON {t} USING (tenant_id = oml_current_tenant())
  WITH CHECK (tenant_id = oml_current_tenant());
""" for t in ("index_threads", "bm25_stats"))


def upgrade() -> None:
    sql = resources.files("oml.services.storage.sql")
    for name in ("31_index_context.sql", "61_bm25.sql"):
        op.execute((sql / name).read_text())
    op.execute(_RLS)
    for name in ("96_index_context_grants.sql", "96_bm25_grants.sql"):
        op.execute((sql / name).read_text())


def downgrade() -> None:
    raise NotImplementedError("OML's journal is append-only; restore from backup instead of downgrading")
