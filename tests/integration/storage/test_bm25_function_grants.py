"""Only the indexer calls the BM25 recount and drift functions; no workload role may call them or read their tables,
and the drift function answers for the bound tenant only. Real PostgreSQL with the migrated roles and grants."""
from __future__ import annotations

import pytest
import sqlalchemy as sa

from support.owner import owner

ROLES = ["oml_admission", "oml_server", "oml_lake_writer", "oml_reconciler", "oml_relay"]


def test_only_the_indexer_may_call_the_recount_and_the_drift_check(ctx):
    with owner(ctx) as c:
        for fn in ("oml_bm25_drift()", "oml_bm25_rebuild()"):
            got = {r: c.execute(sa.text("SELECT has_function_privilege(:r, :f, 'EXECUTE')"), {"r": r, "f": fn}).scalar()
                   for r in ROLES + ["oml_indexer", "public"]}
            assert got == {r: r == "oml_indexer" for r in got}, (fn, got)
        for table in ("bm25_df", "bm25_postings", "bm25_groups"):
            got = {r: c.execute(sa.text("SELECT has_table_privilege(:r, :t, 'SELECT')"), {"r": r, "t": table}).scalar()
                   for r in ROLES + ["oml_indexer"]}
            assert not any(got.values()), (table, got)


@pytest.mark.parametrize("role", ROLES)
def test_a_workload_role_calling_them_is_refused(ctx, role):
    with ctx.db.engine(None).connect() as c:
        tenant = c.execute(sa.text("SELECT tenant_id FROM tenants LIMIT 1")).scalar()
    if tenant is None:
        ctx.tenancy.create_tenant("bm25-grants")
        tenant = "bm25-grants"
    for fn in ("SELECT * FROM oml_bm25_drift()", "SELECT oml_bm25_rebuild()"):
        with pytest.raises(sa.exc.ProgrammingError, match="permission denied"), ctx.db.tenant(role, tenant) as c:
            c.execute(sa.text(fn))
