"""oml-indexer against real PostgreSQL + pgvector, the real model and the real indexing feed."""
from __future__ import annotations

import json

import numpy as np
import pytest
import sqlalchemy as sa

from oml.domain.errors import OMLError
from oml.services.claims.admission import Submission
from oml.services.reads.indexing_feed import IndexingFeed
from oml.workers.index import embedding, indexer

from support.owner import owner
from support.workers import assert_index_exact, head, index_rows, promote, setup_tenant, submit, supersede


@pytest.fixture(scope="module")
def env(ctx):
    return setup_tenant(ctx, "idx")


def _cursor(ctx, tenant):
    with ctx.db.tenant("oml_indexer", tenant) as c:
        return c.execute(sa.text("SELECT seq FROM consumer_cursors WHERE tenant_id = :t AND consumer = 'indexer'"),
                         {"t": tenant}).scalar()


def test_index_holds_exactly_the_tip_intervals(ctx, env):
    a = promote(ctx, env, "the sky over the harbour is blue")
    b = promote(ctx, env, "deploys happen on tuesdays")
    held = submit(ctx, env, ["an unreviewed claim about penguins"])[0]
    assert indexer.catch_up(ctx, env.tenant) > 0
    assert _cursor(ctx, env.tenant) == head(ctx, env.tenant)
    assert_index_exact(ctx, env.tenant)
    current = {v for v, _, to in index_rows(ctx, env.tenant) if to is None}
    assert current == {a["version_id"], b["version_id"]}
    assert held["version_id"] not in {v for v, _, _ in index_rows(ctx, env.tenant)}
    # Nothing pending: a second run consumes nothing and changes nothing.
    assert indexer.catch_up(ctx, env.tenant) == 0
    assert_index_exact(ctx, env.tenant)


def test_supersession_and_demotion_close_and_reopen_intervals(ctx, env):
    v1 = promote(ctx, env, "the build takes ten minutes")
    v2 = supersede(ctx, env, v1["claim_id"], v1["version_id"], "the build takes four minutes")
    indexer.catch_up(ctx, env.tenant)
    assert_index_exact(ctx, env.tenant)
    rows = {v: to for v, _, to in index_rows(ctx, env.tenant) if v in (v1["version_id"], v2["version_id"])}
    assert rows[v1["version_id"]] == v2["seq"] + 1 and rows[v2["version_id"]] is None
    # Demoting the tip closes its interval and re-opens v1: a new interval, indexed from the feed again (its context
    # window is that of now), so the same text and the same embedding up to the model's float noise.
    ctx.admission.review(env.reviewer, v2["version_id"], "demote", "inaccurate")
    indexer.catch_up(ctx, env.tenant)
    assert_index_exact(ctx, env.tenant)
    open_rows = [(v, f) for v, f, to in index_rows(ctx, env.tenant, "memory_embeddings") if to is None]
    assert (v1["version_id"], head(ctx, env.tenant)) in open_rows
    with ctx.db.tenant("oml_indexer", env.tenant) as c:
        embs = c.execute(sa.text("SELECT embedding::text FROM memory_embeddings WHERE tenant_id = :t AND version_id = :v"),
                         {"t": env.tenant, "v": v1["version_id"]}).scalars().all()
        tsvs = c.execute(sa.text("SELECT tsv::text FROM memories_fts WHERE tenant_id = :t AND version_id = :v"),
                         {"t": env.tenant, "v": v1["version_id"]}).scalars().all()
    assert len(embs) == 2 and np.allclose(json.loads(embs[0]), json.loads(embs[1]), atol=1e-5)
    assert len(tsvs) == 2 and tsvs[0] == tsvs[1]


def test_fts_and_vectors_find_the_text(ctx, env):
    promote(ctx, env, "quarterly revenue grew in the northern region")
    indexer.catch_up(ctx, env.tenant)
    emb = embedding.get_embedder(ctx.settings)
    q = emb.encode(["how did revenue develop in the north?"])[0]
    with ctx.db.tenant("oml_indexer", env.tenant) as c:
        hits = c.execute(sa.text("SELECT count(*) FROM memories_fts WHERE tenant_id = :t AND tip_to_seq IS NULL"
                                 " AND tsv @@ plainto_tsquery('english', 'revenue region')"), {"t": env.tenant}).scalar()
        top = c.execute(sa.text("SELECT f.tsv::text FROM memory_embeddings e JOIN memories_fts f ON f.tenant_id = e.tenant_id"
                                " AND f.version_id = e.version_id AND f.tip_from_seq = e.tip_from_seq"
                                " WHERE e.tenant_id = :t AND e.tip_to_seq IS NULL ORDER BY e.embedding <=> CAST(:q AS vector) LIMIT 1"),
                            {"t": env.tenant, "q": "[" + ",".join(map(str, q.tolist())) + "]"}).scalar()
        paths = set(c.execute(sa.text("SELECT path FROM memories_fts WHERE tenant_id = :t"), {"t": env.tenant}).scalars())
    assert hits == 1
    assert "revenu" in top
    # subject and tags are indexed too
    assert "subj" in top and "t1" in top
    assert paths == {"main"}


def test_every_feed_read_is_logged_with_ids_only(ctx, env):
    v = promote(ctx, env, "the staging cluster has sixteen nodes")
    indexer.catch_up(ctx, env.tenant)
    with ctx.db.tenant("oml_server", env.tenant) as c:
        rows = c.execute(sa.text("SELECT role, op, claim_ids, query_digest FROM read_events WHERE tenant_id = :t"
                                 " AND op = 'indexing_feed' AND :c = ANY(claim_ids)"),
                         {"t": env.tenant, "c": v["claim_id"]}).all()
    assert len(rows) == 1
    assert rows[0].role == "indexer" and rows[0].query_digest is None


def test_feed_refuses_other_roles_and_reports_per_item_errors(ctx, env):
    feed = IndexingFeed(ctx.db, ctx.keystore)
    with pytest.raises(OMLError) as e:
        feed.fetch(env.reader if hasattr(env, "reader") else env.writer, [])
    assert e.value.code == "access.denied"
    p = indexer.indexer_principal(ctx, env.tenant)
    v = promote(ctx, env, "the office opens at eight")
    items = feed.fetch(p, [v["version_id"], "not-a-uuid", "00000000-0000-0000-0000-000000000000"])
    assert items[0].ok and items[0].statement == "the office opens at eight"
    assert [i.error for i in items[1:]] == ["version.not_found", "version.not_found"]


def test_indexer_role_cannot_read_bodies_or_deks(ctx, env):
    for table in ("artifacts", "wrapped_deks"):
        with pytest.raises(sa.exc.ProgrammingError, match="permission denied"):
            with ctx.db.tenant("oml_indexer", env.tenant) as c:
                c.execute(sa.text(f"SELECT 1 FROM {table} LIMIT 1"))


def test_poison_body_is_recorded_and_skipped(ctx):
    env = setup_tenant(ctx, "idx-poison")
    bad = promote(ctx, env, "this body loses its key")
    good = promote(ctx, env, "this body keeps its key")
    with ctx.db.engine(None).begin() as c:  # the owner stands in for a lost DEK
        c.execute(sa.text("DELETE FROM wrapped_deks WHERE tenant_id = :t AND artifact_id ="
                          " (SELECT artifact_id FROM claim_versions WHERE tenant_id = :t AND version_id = :v)"),
                  {"t": env.tenant, "v": bad["version_id"]})
    indexer.catch_up(ctx, env.tenant)
    assert _cursor(ctx, env.tenant) == head(ctx, env.tenant)
    versions = {v for v, _, _ in index_rows(ctx, env.tenant)}
    assert good["version_id"] in versions and bad["version_id"] not in versions
    with ctx.db.tenant("oml_indexer", env.tenant) as c:
        reasons = c.execute(sa.text("SELECT seq, reason FROM poison_messages WHERE tenant_id = :t AND consumer = 'indexer'"),
                            {"t": env.tenant}).all()
    assert [(r.seq, r.reason) for r in reasons] == [(bad["seq"] + 1, "body.dek_missing")]
    from oml.workers.runtime import lag

    row = next(r for r in lag.report(ctx, tenant=env.tenant) if r.consumer == "indexer")
    assert row.poison == 1 and row.lag == 0


def test_erased_claim_loses_every_row(ctx, env):
    v = promote(ctx, env, "a claim that will be erased")
    indexer.catch_up(ctx, env.tenant)
    assert v["version_id"] in {x for x, _, _ in index_rows(ctx, env.tenant)}
    ctx.acts.system_event(env.tenant, "claim.erased", {"claim_id": v["claim_id"], "reason": "data_subject_request"})
    indexer.catch_up(ctx, env.tenant)
    assert v["version_id"] not in {x for x, _, _ in index_rows(ctx, env.tenant)}
    assert v["version_id"] not in {x for x, _, _ in index_rows(ctx, env.tenant, "memory_embeddings")}
    assert_index_exact(ctx, env.tenant)


def test_reparent_rewrites_paths(ctx, env):
    a = ctx.tenancy.create_workarea(env.admin, "alpha", env.root)
    b = ctx.tenancy.create_workarea(env.admin, "beta", env.root)
    promote(ctx, env, "alpha knows this", workarea=a["node_id"])
    indexer.catch_up(ctx, env.tenant)
    ctx.tenancy.reparent_workarea(env.admin, a["node_id"], b["node_id"])
    indexer.catch_up(ctx, env.tenant)
    with ctx.db.tenant("oml_indexer", env.tenant) as c:
        paths = set(c.execute(sa.text("SELECT path FROM memory_embeddings WHERE tenant_id = :t AND workarea_id = :w"),
                              {"t": env.tenant, "w": a["node_id"]}).scalars())
    assert paths == {"main.beta.alpha"}


def test_tainted_versions_never_enter_shared_tables(ctx, env):
    from oml.services.simulations.acts import Simulations

    sims = Simulations(ctx)
    real = promote(ctx, env, "the launch is planned for march")
    indexer.catch_up(ctx, env.tenant)
    before = sorted(index_rows(ctx, env.tenant))
    sim = sims.open(env.admin, "what-if", [env.writer.principal_id, env.reviewer.principal_id])["simulation_id"]
    overlay = sims.supersede(env.writer, sim, real["claim_id"], {"statement": "what if the launch slipped to june"})
    born = sims.submit(env.writer, sim, [Submission(env.root, {"statement": "a claim born in the simulation"})])["items"][0]
    for v in (overlay, born):
        sims.review(env.reviewer, v["version_id"], "promote", "accurate")
    indexer.catch_up(ctx, env.tenant)
    shared = {x for t in ("memories_fts", "memory_embeddings") for x, _, _ in index_rows(ctx, env.tenant, t)}
    assert overlay["version_id"] not in shared and born["version_id"] not in shared
    # The real claim's default tip row did not move.
    assert sorted(index_rows(ctx, env.tenant)) == before
    sims.close(env.admin, sim)
    indexer.catch_up(ctx, env.tenant)
    assert sorted(index_rows(ctx, env.tenant)) == before
    assert_index_exact(ctx, env.tenant)


def test_rebuild_reproduces_the_index(ctx, env):
    indexer.catch_up(ctx, env.tenant)
    before = sorted(index_rows(ctx, env.tenant)), sorted(index_rows(ctx, env.tenant, "memory_embeddings"))
    with ctx.db.engine(None).begin() as c:
        c.execute(sa.text("DELETE FROM memories_fts WHERE tenant_id = :t"), {"t": env.tenant})
        c.execute(sa.text("UPDATE memory_embeddings SET tip_to_seq = 1 WHERE tenant_id = :t"), {"t": env.tenant})
    assert indexer.rebuild(ctx, env.tenant) == head(ctx, env.tenant)
    after = sorted(index_rows(ctx, env.tenant)), sorted(index_rows(ctx, env.tenant, "memory_embeddings"))
    assert after == before
    assert_index_exact(ctx, env.tenant)


def test_model_dimension_is_checked_against_the_schema(ctx):
    emb = embedding.get_embedder(ctx.settings)
    assert embedding.check_dimension(emb, ctx.db) == 384

    class Wrong:
        dimension, path = 128, "elsewhere"

    with pytest.raises(embedding.DimensionMismatch):
        embedding.check_dimension(Wrong(), ctx.db)
    vecs = emb.encode(["a", "b", "c"])
    assert vecs.shape == (3, 384) and np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-4)


def test_indexer_through_the_http_feed(ctx, env, monkeypatch):
    """The split deployment: with OML_INDEXING_FEED_URL the indexer presents its key to POST /v1/indexing-feed."""
    import threading
    import time

    import uvicorn

    from oml.services.entrypoints.http.app import create_app

    from support.workers import free_port

    indexer.indexer_principal(ctx, env.tenant)  # enrolled: the key file exists
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(ctx), host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        monkeypatch.setenv("OML_INDEXING_FEED_URL", f"http://127.0.0.1:{port}")
        assert isinstance(indexer.default_feed(ctx), indexer.RemoteFeed)
        v = promote(ctx, env, "a statement fetched over http")
        with ctx.db.tenant("oml_server", env.tenant) as c:
            reads = c.execute(sa.text("SELECT count(*) FROM read_events WHERE tenant_id = :t AND op = 'indexing_feed'"),
                              {"t": env.tenant}).scalar()
        indexer.catch_up(ctx, env.tenant)
        assert v["version_id"] in {x for x, _, to in index_rows(ctx, env.tenant) if to is None}
        assert_index_exact(ctx, env.tenant)
        with ctx.db.tenant("oml_server", env.tenant) as c:
            assert c.execute(sa.text("SELECT count(*) FROM read_events WHERE tenant_id = :t AND op = 'indexing_feed'"),
                             {"t": env.tenant}).scalar() == reads + 1
        # Without a key file the remote indexer cannot enrol itself: it refuses, it does not guess.
        other = setup_tenant(ctx, "idx-remote")
        promote(ctx, other, "no key for this tenant")
        with pytest.raises(OMLError) as e:
            indexer.catch_up(ctx, other.tenant)
        assert e.value.code == "indexer.not_enrolled"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def test_bench_index_runs(ctx):
    from oml_tools.bench import index as bench

    res = bench.run(ctx, claims=5)
    assert res["indexer"]["rows"] == 5 and res["raw"]["claims"] == 5
    lines = bench.render(res)
    assert any("raw ÷ indexer" in line for line in lines)
    assert res["dimension"] == 384 and res["model"].startswith("minilm") and res["encode_ms_per_claim"] > 0
    assert any(line.startswith("encode: ") and "ms per indexed claim (minilm" in line for line in lines)


def test_the_model_runs_before_the_batch_takes_the_bm25_statistics_rows(ctx, env, monkeypatch):
    # An erasure or a move in a workarea waits on its BM25 statistics rows, which a write to memories_fts holds
    # until commit: the batch embeds before its first index write, so the rows are free while the model runs.
    promote(ctx, env, "the lighthouse keeper logs every ship")
    indexer.catch_up(ctx, env.tenant)
    promote(ctx, env, "the lighthouse lamp is cleaned on fridays")
    real = indexer.embedder_for(ctx)
    free: list[bool] = []

    class Probe:
        def __getattr__(self, name):
            return getattr(real, name)

        def encode(self, texts):
            with owner(ctx) as c:
                c.execute(sa.text("SET LOCAL lock_timeout = '1s'"))
                try:
                    c.execute(sa.text("SELECT 1 FROM bm25_groups WHERE tenant_id = :t FOR UPDATE NOWAIT"), {"t": env.tenant})
                    free.append(True)
                except sa.exc.OperationalError:
                    free.append(False)
            return real.encode(texts)

    monkeypatch.setattr(indexer, "embedder_for", lambda _ctx: Probe())
    indexer.catch_up(ctx, env.tenant)
    assert free == [True]
    assert_index_exact(ctx, env.tenant)


@pytest.mark.parametrize("act", ["catch_up", "rebuild"])
def test_the_model_loads_before_the_cursor_row_is_locked(ctx, env, monkeypatch, act):
    # A first load takes seconds; every other catch-up of the tenant waits on the cursor row meanwhile.
    indexer.catch_up(ctx, env.tenant)  # the cursor row exists and is committed: a new one is invisible to the probe
    promote(ctx, env, f"the ferry timetable changes in winter ({act})")
    real = indexer.embedder_for(ctx)
    free: list[bool] = []

    def load(_ctx):
        if not free:
            with owner(ctx) as c:
                try:
                    row = c.execute(sa.text("SELECT 1 FROM consumer_cursors WHERE tenant_id = :t AND consumer = :c"
                                            " FOR UPDATE NOWAIT"), {"t": env.tenant, "c": indexer.CONSUMER}).first()
                    free.append(row is not None)
                except sa.exc.OperationalError:
                    free.append(False)
        return real

    monkeypatch.setattr(indexer, "embedder_for", load)
    getattr(indexer, act)(ctx, env.tenant)
    assert free == [True]
    assert_index_exact(ctx, env.tenant)
