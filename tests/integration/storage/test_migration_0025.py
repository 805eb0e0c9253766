"""Migration 0025 on a database at 0024: the bounded BM25 search reads its lists and picks its candidates in an order
with no ties left, keeping its owner and the server's grant."""
from __future__ import annotations

import sqlalchemy as sa

from support.bm25_function import SRC, assert_kept, generator, upgrade_to
from support.owner import owner

_ORDERS = [("p.impact DESC, p.tip_from_seq DESC, p.version_id DESC LIMIT", "p.impact DESC, p.tip_from_seq DESC LIMIT"),
           ("u.partial DESC, u.ub DESC, u.tip_from_seq DESC, u.version_id LIMIT", "u.partial DESC, u.ub DESC LIMIT")]


def test_upgrade_from_0024_orders_the_bounded_search_to_its_last_column(ctx):
    with owner(ctx) as c:
        old = c.execute(sa.text("SELECT oml_bm25_topk_sql()")).scalar()
        for new, before in _ORDERS:
            assert new in old
            old = old.replace(new, before)
        c.exec_driver_sql("CREATE OR REPLACE FUNCTION oml_bm25_topk_sql() RETURNS text LANGUAGE sql IMMUTABLE RETURN '"
                          + old.replace("'", "''") + "'")
        c.connection.driver_connection.execute(generator())
        src = c.execute(SRC).scalar()
        assert all(before in src and new not in src for new, before in _ORDERS)
        c.execute(sa.text("UPDATE alembic_version SET version_num = '0024'"))
    upgrade_to(ctx, "0025")
    with owner(ctx) as c:
        src = c.execute(SRC).scalar()
        assert all(new in src for new, _ in _ORDERS) and "$" not in src
        assert_kept(c)
