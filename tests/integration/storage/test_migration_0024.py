"""Migration 0024 on a database from before it: the bounded BM25 search runs its statement as static SQL, keeping
its owner, the server's grant and the maintained statistics."""
from __future__ import annotations

import sqlalchemy as sa
from alembic import command

from oml.services.storage.migrate import alembic_config

from support.admission import owner
from support.erasure import make_ekit

_SIG = "oml_bm25_topk(tsquery, text[], text[], timestamptz, uuid[], int, int, int)"
# The function as 0023 left it, as far as this migration is concerned: the statement run through EXECUTE.
_DYNAMIC = sa.text("""
CREATE OR REPLACE FUNCTION oml_bm25_topk(q tsquery, terms text[], scopes text[], valid_at timestamptz, exclude uuid[],
                                         lim int, depth int, fetched int)
  RETURNS TABLE (version_id uuid, claim_id uuid, score double precision, tip_from_seq bigint, exact boolean,
                 bound double precision)
  LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $f$
DECLARE
  t text := oml_bound_tenant();
BEGIN
  PERFORM oml_search_limit(lim);
  RETURN QUERY EXECUTE oml_bm25_topk_sql()
    USING q, scopes, NULL::timestamptz, NULL::text[], NULL::text[], valid_at, exclude, lim, t, terms, depth, fetched;
END $f$""")
_SRC = sa.text("SELECT prosrc FROM pg_proc WHERE proname = 'oml_bm25_topk'")
_KEPT = sa.text("SELECT (SELECT count(*) FROM bm25_groups WHERE tenant_id = :t), (SELECT count(*) FROM bm25_df WHERE"
                " tenant_id = :t), (SELECT count(*) FROM bm25_postings WHERE tenant_id = :t)")


def test_upgrade_from_0023_makes_the_bounded_search_static(ctx):
    k = make_ekit(ctx, "migration-0024")
    k.claim("the harbour crane lifted the red container")
    from oml.workers.index import indexer

    indexer.catch_up(ctx, k.tenant)
    with owner(ctx, k.tenant) as c:
        before = c.execute(_KEPT, {"t": k.tenant}).one()
        assert all(before)
        c.execute(_DYNAMIC)
        assert "EXECUTE oml_bm25_topk_sql()" in c.execute(_SRC).scalar()
        c.execute(sa.text("UPDATE alembic_version SET version_num = '0023'"))
    command.upgrade(alembic_config(ctx.db.owner_url.render_as_string(hide_password=False)), "0024")
    with owner(ctx, k.tenant) as c:
        src = c.execute(_SRC).scalar()
        assert "EXECUTE" not in src and "RETURN QUERY WITH g AS MATERIALIZED" in src and "$" not in src
        assert "oml_bm25_search(q, terms, scopes" in src  # the fallback of 0022 stays
        assert c.execute(_KEPT, {"t": k.tenant}).one() == before
        assert c.execute(sa.text(f"SELECT has_function_privilege('oml_server', '{_SIG}', 'EXECUTE')")).scalar()
        assert not c.execute(sa.text(f"SELECT has_function_privilege('public', '{_SIG}', 'EXECUTE')")).scalar()
        assert c.execute(sa.text("SELECT pg_get_userbyid(proowner) FROM pg_proc WHERE proname = 'oml_bm25_topk'")).scalar() == "oml_search"
        assert c.execute(sa.text("SELECT prosecdef FROM pg_proc WHERE proname = 'oml_bm25_topk'")).scalar()
