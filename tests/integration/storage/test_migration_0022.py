"""Migration 0022 on a database from before it: the bounded BM25 search gains its fallback for a workarea whose rows
lie on both sides of a read's scope, and the maintained statistics and the server's grant are kept."""
from __future__ import annotations

import sqlalchemy as sa
from alembic import command

from oml.services.storage.migrate import alembic_config

from support.admission import owner
from support.erasure import make_ekit

_FALLBACK = sa.text("SELECT prosrc LIKE '%oml_bm25_search(q, terms, scopes%' FROM pg_proc WHERE proname = 'oml_bm25_topk'")
_KEPT = sa.text("SELECT (SELECT count(*) FROM bm25_groups WHERE tenant_id = :t), (SELECT count(*) FROM bm25_df WHERE"
                " tenant_id = :t), (SELECT count(*) FROM bm25_postings WHERE tenant_id = :t)")


def test_upgrade_from_0021_gives_the_bounded_search_its_fallback(ctx):
    k = make_ekit(ctx, "migration-0022")
    k.claim("the harbour crane lifted the red container")
    from oml.workers.index import indexer

    indexer.catch_up(ctx, k.tenant)
    with owner(ctx, k.tenant) as c:
        before = c.execute(_KEPT, {"t": k.tenant}).one()
        assert all(before)
        c.execute(sa.text("UPDATE alembic_version SET version_num = '0021'"))
    command.upgrade(alembic_config(ctx.db.owner_url.render_as_string(hide_password=False)), "0022")
    with owner(ctx, k.tenant) as c:
        assert c.execute(_FALLBACK).scalar()
        assert c.execute(_KEPT, {"t": k.tenant}).one() == before
        assert c.execute(sa.text("SELECT has_function_privilege('oml_server', 'oml_bm25_topk(tsquery, text[], text[],"
                                 " timestamptz, uuid[], int, int, int)', 'EXECUTE')")).scalar()
        assert c.execute(sa.text("SELECT pg_get_userbyid(proowner) FROM pg_proc WHERE proname = 'oml_bm25_topk'")).scalar() == "oml_search"
