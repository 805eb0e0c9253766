"""Migration 0026 on a database at 0025: the bounded BM25 search fetches twice its limit when it read every list whole,
looks its candidates up by key and keeps one generic plan per session (its own ``plan_cache_mode``), keeping its owner
and the server's grant."""
from __future__ import annotations

import sqlalchemy as sa

from support.bm25_function import SRC, assert_kept, generator, upgrade_to
from support.owner import owner

_CONFIG = sa.text("SELECT proconfig FROM pg_proc WHERE proname = 'oml_bm25_topk'")
_PICK_0025 = ("pick AS MATERIALIZED (SELECT u.version_id, u.tip_from_seq, u.partial FROM ub u"
              " WHERE u.version_id NOT IN (SELECT x.version_id FROM x)"
              " ORDER BY u.partial DESC, u.ub DESC, u.tip_from_seq DESC, u.version_id LIMIT $12),")
_CAND_0025 = ("cand AS MATERIALIZED (SELECT m.* FROM ({scope}) m"
              " WHERE (m.version_id, m.tip_from_seq) IN (SELECT p.version_id, p.tip_from_seq FROM pick p)),")
_LOOKUP = "m.version_id = p.version_id AND m.tip_from_seq = p.tip_from_seq LIMIT 1"


def test_upgrade_from_0025_fetches_by_what_was_cut_and_keeps_a_generic_plan(ctx):
    with owner(ctx) as c:
        text = c.execute(sa.text("SELECT oml_bm25_topk_sql()")).scalar()
        scope = c.execute(sa.text("SELECT oml_fts_scope_sql()")).scalar()
        start, end = text.index(" fl AS MATERIALIZED"), text.index(" toks AS MATERIALIZED")
        old = (text[:start] + " " + _PICK_0025 + "\n " + _CAND_0025.format(scope=scope) + "\n" + text[end:]).replace(
            "(SELECT count(*) FROM pick) >= (SELECT fl.n FROM fl)", "(SELECT count(*) FROM pick) >= $12")
        c.exec_driver_sql("CREATE OR REPLACE FUNCTION oml_bm25_topk_sql() RETURNS text LANGUAGE sql IMMUTABLE RETURN '"
                          + old.replace("'", "''") + "'")
        c.connection.driver_connection.execute(generator().replace(" SET plan_cache_mode = force_generic_plan", "")
                                               .replace("\n  SET enable_seqscan = off", ""))
        assert "fl.n" not in c.execute(SRC).scalar() and _LOOKUP not in c.execute(SRC).scalar()
        assert not any("plan_cache_mode" in s or "enable_seqscan" in s for s in c.execute(_CONFIG).scalar())
        c.execute(sa.text("UPDATE alembic_version SET version_num = '0025'"))
    upgrade_to(ctx, "0026")
    with owner(ctx) as c:
        src = c.execute(SRC).scalar()
        assert "(SELECT fl.n FROM fl)" in src and "least(oml_bm25_topk.fetched, 2 * oml_bm25_topk.lim)" in src
        assert _LOOKUP in src
        assert "$" not in src
        assert {"plan_cache_mode=force_generic_plan", "enable_seqscan=off"} <= set(c.execute(_CONFIG).scalar())
        assert_kept(c)
