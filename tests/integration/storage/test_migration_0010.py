"""Migration 0010 on a database from before it: the first BM25 leg (tenant-wide ``bm25_stats``, a per-term tsquery
argument) and rows indexed without ``tsv_len`` become the scoped leg over a generated length, and BM25 recall answers
at once with the same ids as before the upgrade."""
from __future__ import annotations

import sqlalchemy as sa
from alembic import command

from oml.services.reads.recall import Recaller, RecallRequest
from oml.services.storage.migrate import alembic_config

from support.erasure import owner
from support.recall import make_world

OLD_FUNCTION = """
CREATE TABLE bm25_stats (tenant_id text PRIMARY KEY, docs bigint NOT NULL, total_len bigint NOT NULL);
CREATE FUNCTION oml_bm25_search(q tsquery, terms text[], term_queries tsquery[], scopes text[], as_of timestamptz,
                                kinds text[], provenances text[], valid_at timestamptz, exclude uuid[], lim int,
                                k1 double precision DEFAULT 1.2, b double precision DEFAULT 0.75)
  RETURNS TABLE (version_id uuid, claim_id uuid, score double precision, tip_from_seq bigint)
  LANGUAGE sql AS $$ SELECT NULL::uuid, NULL::uuid, NULL::float8, NULL::bigint WHERE false $$;
"""


def test_upgrade_from_0009_scopes_the_bm25_leg(ctx):
    w = make_world(ctx, "migration-0010")
    a = w.remember("main.eng", "the harbour crane lifted the red container")
    w.remember("main.eng", "a quiet harbour at dusk")
    w.index()
    reader = w.key("reader", "main.eng")
    ask = RecallRequest(query="harbour crane", retriever="fts", k=10)
    before = [h["claim_id"] for h in Recaller(ctx, lexical="bm25").recall(reader, ask)["hits"]]
    assert before[0] == a["claim_id"]
    with owner(ctx, w.tenant) as c:  # what 0009 had: no length column, the first function, the stats table
        c.execute(sa.text("DROP FUNCTION oml_bm25_search(tsquery, text[], text[], timestamptz, text[], text[],"
                          " timestamptz, uuid[], int, double precision, double precision)"))
        c.execute(sa.text("ALTER TABLE memories_fts DROP COLUMN tsv_len CASCADE"))
        c.execute(sa.text(OLD_FUNCTION))
        c.execute(sa.text("UPDATE alembic_version SET version_num = '0009'"))
    command.upgrade(alembic_config(ctx.db.owner_url.render_as_string(hide_password=False)), "0010")
    with owner(ctx, w.tenant) as c:
        assert c.execute(sa.text("SELECT to_regclass('bm25_stats')")).scalar() is None
        assert c.execute(sa.text("SELECT count(*) FROM memories_fts WHERE tenant_id = :t AND tsv_len IS DISTINCT FROM"
                                 " oml_tsv_length(tsv)"), {"t": w.tenant}).scalar() == 0
        assert c.execute(sa.text("SELECT count(*) FROM pg_proc WHERE proname = 'oml_bm25_search'")).scalar() == 1
    after = [h["claim_id"] for h in Recaller(ctx, lexical="bm25").recall(reader, ask)["hits"]]
    assert after == before
