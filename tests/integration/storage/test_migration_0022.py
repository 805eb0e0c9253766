"""Migration 0022 on a database from before it: the bounded BM25 search gains its fallback for a workarea whose rows
lie on both sides of a read's scope, and the maintained statistics and the server's grant are kept."""
from __future__ import annotations

import sqlalchemy as sa

from support.admission import owner
from support.bm25_function import KEPT, SIG, indexed_tenant, upgrade_to

_FALLBACK = sa.text("SELECT prosrc LIKE '%oml_bm25_search(q, terms, scopes%' FROM pg_proc WHERE proname = 'oml_bm25_topk'")


def test_upgrade_from_0021_gives_the_bounded_search_its_fallback(ctx):
    k, before = indexed_tenant(ctx, "migration-0022")
    with owner(ctx, k.tenant) as c:
        c.execute(sa.text("UPDATE alembic_version SET version_num = '0021'"))
    upgrade_to(ctx, "0022")
    with owner(ctx, k.tenant) as c:
        assert c.execute(_FALLBACK).scalar()
        assert c.execute(KEPT, {"t": k.tenant}).one() == before
        assert c.execute(sa.text(f"SELECT has_function_privilege('oml_server', '{SIG}', 'EXECUTE')")).scalar()
        assert c.execute(sa.text("SELECT pg_get_userbyid(proowner) FROM pg_proc WHERE proname = 'oml_bm25_topk'")).scalar() == "oml_search"
