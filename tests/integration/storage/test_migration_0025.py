"""Migration 0025 on a database at 0024: the bounded BM25 search reads its lists and picks its candidates in an order
with no ties left, keeping its owner and the server's grant."""
from __future__ import annotations

import sqlalchemy as sa
from alembic import command

from oml.services.storage.migrate import alembic_config

from support.owner import owner
from support.paths import REPO

_SIG = "oml_bm25_topk(tsquery, text[], text[], timestamptz, uuid[], int, int, int)"
_SRC = sa.text("SELECT prosrc FROM pg_proc WHERE proname = 'oml_bm25_topk'")
_ORDERS = [("p.impact DESC, p.tip_from_seq DESC, p.version_id DESC LIMIT", "p.impact DESC, p.tip_from_seq DESC LIMIT"),
           ("u.partial DESC, u.ub DESC, u.tip_from_seq DESC, u.version_id LIMIT", "u.partial DESC, u.ub DESC LIMIT")]


def _generator() -> str:
    text = (REPO / "services" / "storage" / "sql" / "63_bm25_postings.sql").read_text()
    start = text.index("DO $gen$\nDECLARE\n  stmt text := oml_bm25_topk_sql();")
    return text[start:text.index("END $gen$;", start) + len("END $gen$;")]


def test_upgrade_from_0024_orders_the_bounded_search_to_its_last_column(ctx):
    with owner(ctx) as c:
        old = c.execute(sa.text("SELECT oml_bm25_topk_sql()")).scalar()
        for new, before in _ORDERS:
            assert new in old
            old = old.replace(new, before)
        c.exec_driver_sql("CREATE OR REPLACE FUNCTION oml_bm25_topk_sql() RETURNS text LANGUAGE sql IMMUTABLE RETURN '"
                          + old.replace("'", "''") + "'")
        c.connection.driver_connection.execute(_generator())
        src = c.execute(_SRC).scalar()
        assert all(before in src and new not in src for new, before in _ORDERS)
        c.execute(sa.text("UPDATE alembic_version SET version_num = '0024'"))
    command.upgrade(alembic_config(ctx.db.owner_url.render_as_string(hide_password=False)), "0025")
    with owner(ctx) as c:
        src = c.execute(_SRC).scalar()
        assert all(new in src for new, _ in _ORDERS) and "$" not in src
        assert c.execute(sa.text(f"SELECT has_function_privilege('oml_server', '{_SIG}', 'EXECUTE')")).scalar()
        assert not c.execute(sa.text(f"SELECT has_function_privilege('public', '{_SIG}', 'EXECUTE')")).scalar()
        assert c.execute(sa.text("SELECT pg_get_userbyid(proowner) FROM pg_proc WHERE proname = 'oml_bm25_topk'")).scalar() == "oml_search"
