"""The bounded BM25 function (63_bm25_postings.sql) as the migration tests look at it: its source, the DO block
that generates it, the statistics a migration must keep, and the grants it must keep."""
from __future__ import annotations

import sqlalchemy as sa
from alembic import command

from oml.services.storage.migrate import alembic_config

from support.paths import REPO

SIG = "oml_bm25_topk(tsquery, text[], text[], timestamptz, uuid[], int, int, int)"
SRC = sa.text("SELECT prosrc FROM pg_proc WHERE proname = 'oml_bm25_topk'")
KEPT = sa.text("SELECT (SELECT count(*) FROM bm25_groups WHERE tenant_id = :t), (SELECT count(*) FROM bm25_df WHERE"
               " tenant_id = :t), (SELECT count(*) FROM bm25_postings WHERE tenant_id = :t)")


def generator() -> str:
    """The DO block of 63_bm25_postings.sql that makes oml_bm25_topk from oml_bm25_topk_sql()."""
    text = (REPO / "services" / "storage" / "sql" / "63_bm25_postings.sql").read_text()
    start = text.index("DO $gen$\nDECLARE\n  stmt text := oml_bm25_topk_sql();")
    return text[start:text.index("END $gen$;", start) + len("END $gen$;")]


def indexed_tenant(ctx, name: str):
    """A kit whose tenant holds one indexed claim, and its kept statistics (KEPT's counts, all non-zero)."""
    from oml.workers.index import indexer

    from support.admission import owner
    from support.erasure import make_ekit

    k = make_ekit(ctx, name)
    k.claim("the harbour crane lifted the red container")
    indexer.catch_up(ctx, k.tenant)
    with owner(ctx, k.tenant) as c:
        before = c.execute(KEPT, {"t": k.tenant}).one()
    assert all(before)
    return k, before


def upgrade_to(ctx, revision: str) -> None:
    """Alembic's upgrade of the test database to ``revision``, as the schema owner."""
    command.upgrade(alembic_config(ctx.db.owner_url.render_as_string(hide_password=False)), revision)


def assert_kept(conn) -> None:
    """Owner oml_search, SECURITY DEFINER, EXECUTE for oml_server and not for PUBLIC."""
    assert conn.execute(sa.text(f"SELECT has_function_privilege('oml_server', '{SIG}', 'EXECUTE')")).scalar()
    assert not conn.execute(sa.text(f"SELECT has_function_privilege('public', '{SIG}', 'EXECUTE')")).scalar()
    assert conn.execute(sa.text("SELECT pg_get_userbyid(proowner) FROM pg_proc WHERE proname = 'oml_bm25_topk'")).scalar() == "oml_search"
    assert conn.execute(sa.text("SELECT prosecdef FROM pg_proc WHERE proname = 'oml_bm25_topk'")).scalar()
