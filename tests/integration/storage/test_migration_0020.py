"""Migration 0020 on a database from before it: no BM25 statistics or postings, no triggers on memories_fts, the
erasure rewrite without the two new targets. After the upgrade every existing tenant has its partitions, filled from
memories_fts (equal to a recount), the default BM25 read goes to the bounded search with the same ids as before, and
an erasure may record the new rewrite targets."""
from __future__ import annotations

import sqlalchemy as sa
from alembic import command

from oml.services.reads.recall import Recaller, RecallRequest
from oml.services.storage.migrate import alembic_config

from support.erasure import owner
from support.recall import make_world


def test_upgrade_from_0017_fills_the_bm25_tables(ctx):
    w = make_world(ctx, "migration-0020")
    a = w.remember("main.eng", "the harbour crane lifted the red container")
    w.remember("main.eng", "a quiet harbour at dusk")
    w.remember("main.eng", "crane crane harbour")
    w.index()
    reader = w.key("reader", "main.eng")
    ask = RecallRequest(query="harbour crane", retriever="fts", k=10)
    before = [h["claim_id"] for h in Recaller(ctx, lexical="bm25").recall(reader, ask)["hits"]]
    assert a["claim_id"] in before
    with owner(ctx, w.tenant) as c:  # what 0019 had
        for trig in ("bm25_maintain_insert", "bm25_maintain_update", "bm25_maintain_delete"):
            c.execute(sa.text(f"DROP TRIGGER {trig} ON memories_fts"))
        c.execute(sa.text("DROP FUNCTION oml_bm25_topk(tsquery, text[], text[], timestamptz, uuid[], int, int, int)"))
        c.execute(sa.text("DROP TABLE bm25_groups, bm25_df, bm25_postings"))
        c.execute(sa.text("ALTER TABLE erasure_rewrites DROP CONSTRAINT erasure_rewrites_target_check"))
        c.execute(sa.text("ALTER TABLE erasure_rewrites ADD CONSTRAINT erasure_rewrites_target_check CHECK (target IN"
                          " ('artifacts', 'wrapped_deks', 'claim_subjects', 'memories_fts', 'memory_embeddings',"
                          " 'sim_memories_fts', 'sim_memory_embeddings', 'pg_statistic'))"))
        c.execute(sa.text("UPDATE alembic_version SET version_num = '0019'"))
    command.upgrade(alembic_config(ctx.db.owner_url.render_as_string(hide_password=False)), "0020")
    with owner(ctx, w.tenant) as c:
        served = "FROM memories_fts WHERE tenant_id = :t AND tip_to_seq IS NULL AND provenance <> 'simulation'"
        assert c.execute(sa.text("SELECT sum(n), sum(sumdl) FROM bm25_groups WHERE tenant_id = :t"), {"t": w.tenant}).one() == \
            c.execute(sa.text(f"SELECT count(*), sum(tsv_len) {served}"), {"t": w.tenant}).one()
        assert c.execute(sa.text("SELECT count(*) FROM bm25_postings WHERE tenant_id = :t"), {"t": w.tenant}).scalar() == \
            c.execute(sa.text(f"SELECT count(*) FROM (SELECT unnest(tsv) {served}) u"), {"t": w.tenant}).scalar()
        c.execute(sa.text("INSERT INTO erasure_rewrites (tenant_id, target, requested_seq, requested_xid)"
                          " VALUES (:t, 'bm25_postings', 0, pg_current_xact_id())"), {"t": w.tenant})
        c.execute(sa.text("DELETE FROM erasure_rewrites WHERE tenant_id = :t AND target = 'bm25_postings'"), {"t": w.tenant})
    out = Recaller(ctx, lexical="bm25").recall(reader, ask)
    assert out["diagnostics"]["legs"]["fts"]["search"] == "bounded"
    assert [h["claim_id"] for h in out["hits"]] == before
