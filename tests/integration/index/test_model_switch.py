"""Switching the embedding model (workers/index/model_switch.py, ``oml index rebuild --model``) on real PostgreSQL
+ pgvector and the real models: every tenant re-embedded, the model recorded on the column, the indexer refusing
another model's vectors, recall standing aside while the rows are re-embedded or the query model differs.

This module has its own database (tests/integration/conftest.py: one per module), so its DDL touches no other test.
The switch to all-mpnet-base-v2 (768 dimensions) runs where its parts are installed (make mpnet)."""
from __future__ import annotations

import dataclasses
import importlib.metadata as md
import shutil

import pytest
import sqlalchemy as sa

from oml.services.reads.recall import Recaller, RecallRequest
from oml.workers.index import embedding, indexer, model_switch
from oml.workers.index.packaged_model import MODELS

from support.model_switch import index_model, two_indexed_tenants
from support.owner import owner
from support.workers import assert_index_exact, promote


def _mpnet_installed() -> bool:
    try:
        return all(md.distribution(p.distribution) for p in MODELS["mpnet"].parts)
    except md.PackageNotFoundError:
        return False


@pytest.fixture(scope="module")
def envs(ctx):
    return two_indexed_tenants(ctx, "sw")


def _typmods(ctx) -> dict[str, int]:
    with owner(ctx) as c:
        return dict(c.execute(sa.text(
            "SELECT attrelid::regclass::text, atttypmod FROM pg_attribute WHERE attname = 'embedding'"
            " AND attrelid IN ('memory_embeddings'::regclass, 'sim_memory_embeddings'::regclass)")).all())


def _rows(ctx, tenant: str) -> list[tuple[str, int]]:
    with ctx.db.tenant("oml_indexer", tenant) as c:
        return sorted((str(v), int(d)) for v, d in c.execute(sa.text(
            "SELECT version_id, vector_dims(embedding) FROM memory_embeddings WHERE tenant_id = :t"), {"t": tenant}))


def _comment(ctx, model: embedding.IndexModel | None) -> None:
    with owner(ctx) as c:
        for t in model_switch.TABLES:
            if model is None:
                c.execute(sa.text(f"COMMENT ON COLUMN {t}.embedding IS NULL"))
            else:
                c.execute(sa.text(f"COMMENT ON COLUMN {t}.embedding IS $x${model.comment()}$x$"))


def _recall(ctx, env, query: str, settings_ctx=None) -> dict:
    return Recaller(settings_ctx or ctx).recall(env.reviewer, RecallRequest(query=query, retriever="hybrid"))


def test_without_a_recorded_model_the_schema_dimension_decides(ctx, envs):
    rec = index_model(ctx)
    assert (rec.dimension, rec.name, rec.state) == (384, None, "ready")
    assert embedding.check_dimension(embedding.get_embedder(ctx.settings), ctx.db) == 384


def test_switching_to_a_model_directory_reembeds_every_tenant_and_records_it(ctx, envs, tmp_path):
    a, b = envs
    before = {e.tenant: _rows(ctx, e.tenant) for e in envs}
    copy = tmp_path / "my-minilm"
    shutil.copytree(embedding.model_path(None), copy)
    seen: list[tuple[str, int, int]] = []
    rep = model_switch.switch(ctx, str(copy), progress=lambda t, done, head, i, n: seen.append((t, i, n)))
    assert rep.model.name == str(copy.resolve()) and rep.model.dimension == 384 and rep.model.state == "ready"
    assert rep.previous.name is None and not rep.altered
    assert set(rep.tenants) >= {a.tenant, b.tenant} and all(n > 0 for n in rep.tenants.values())
    assert {t for t, _, _ in seen} >= {a.tenant, b.tenant}
    assert index_model(ctx) == rep.model
    for e in envs:
        assert _rows(ctx, e.tenant) == before[e.tenant]
        assert_index_exact(ctx, e.tenant)
    # Same weights as MiniLM: the default model may write and query this index (the identity is the weights').
    embedding.check_dimension(embedding.get_embedder(ctx.settings), ctx.db)
    out = _recall(ctx, a, "when do deploys happen")
    assert out["hits"] and not out["diagnostics"]["degraded"]
    rep = model_switch.switch(ctx, "minilm")
    assert index_model(ctx).name == "minilm" and rep.tenants


def test_the_indexer_refuses_to_write_another_models_vectors(ctx, envs):
    a, _ = envs
    recorded = index_model(ctx)
    _comment(ctx, dataclasses.replace(recorded, name="another-model", source_sha256="0" * 64))
    try:
        promote(ctx, a, "the harbour master raises the storm flag")
        with pytest.raises(embedding.DimensionMismatch) as err:
            indexer.catch_up(ctx, a.tenant)
        assert err.value.code == "index.model_mismatch" and "oml index rebuild --model minilm" in err.value.detail
        assert "another-model" in err.value.detail
        with ctx.db.tenant("oml_indexer", a.tenant) as c:
            assert c.execute(sa.text("SELECT count(*) FROM poison_messages WHERE tenant_id = :t"), {"t": a.tenant}).scalar() == 0
    finally:
        _comment(ctx, recorded)
    assert indexer.catch_up(ctx, a.tenant) > 0
    assert_index_exact(ctx, a.tenant)


def test_recall_answers_from_the_lexical_leg_while_rebuilding_or_on_another_model(ctx, envs):
    a, _ = envs
    recorded = index_model(ctx)
    try:
        _comment(ctx, dataclasses.replace(recorded, state="rebuilding"))
        out = _recall(ctx, a, "lighthouse keeper ships")
        assert out["hits"] and "vector" not in out["diagnostics"]["candidates"]
        assert [d["reason"] for d in out["diagnostics"]["degraded"]] == ["vector.rebuilding"]
        _comment(ctx, dataclasses.replace(recorded, name="another-model", source_sha256="0" * 64))
        out = _recall(ctx, a, "lighthouse keeper ships")
        assert out["hits"] and [d["reason"] for d in out["diagnostics"]["degraded"]] == ["vector.model_mismatch"]
        assert "FTS only" in out["diagnostics"]["degraded"][0]["detail"]
    finally:
        _comment(ctx, recorded)
    out = _recall(ctx, a, "lighthouse keeper ships")
    assert not out["diagnostics"]["degraded"] and out["diagnostics"]["candidates"]["vector"] > 0


@pytest.mark.skipif(not _mpnet_installed(), reason="the all-mpnet-base-v2 parts are not installed (make mpnet)")
def test_switching_to_mpnet_and_back(ctx, envs, tmp_path):
    a, b = envs
    ids = {e.tenant: [v for v, _ in _rows(ctx, e.tenant)] for e in envs}
    mctx = dataclasses.replace(ctx, settings=ctx.settings.model_copy(update={"embedding_model": "mpnet"}))
    try:
        rep = model_switch.switch(ctx, "mpnet")
        assert rep.altered and rep.model.name == "mpnet" and rep.model.dimension == 768
        assert _typmods(ctx) == {"memory_embeddings": 768, "sim_memory_embeddings": 768}
        for e in envs:
            assert _rows(ctx, e.tenant) == [(v, 768) for v in ids[e.tenant]]
        with owner(ctx) as c:  # each tenant partition keeps its HNSW index, now over vector(768)
            hnsw = c.execute(sa.text("SELECT count(*) FROM pg_indexes WHERE tablename LIKE 'memory_embeddings_p%'"
                                     " AND indexdef LIKE '%hnsw%'")).scalar()
        assert hnsw >= 2
        # The indexer on mpnet writes; a MiniLM process is refused; recall on MiniLM stands aside.
        promote(ctx, b, "the storm flag means small craft stay in the harbour")
        with pytest.raises(embedding.DimensionMismatch, match="produces 384 dimensions; the index holds vector\\(768\\)"):
            indexer.catch_up(ctx, b.tenant)
        assert indexer.catch_up(mctx, b.tenant) > 0
        assert_index_exact(ctx, b.tenant)
        out = _recall(ctx, a, "when do deploys happen", settings_ctx=mctx)
        assert out["hits"] and out["diagnostics"]["candidates"]["vector"] > 0 and not out["diagnostics"]["degraded"]
        assert [d["reason"] for d in _recall(ctx, a, "when do deploys happen")["diagnostics"]["degraded"]] == [
            "vector.model_mismatch"]
    finally:
        rep = model_switch.switch(ctx, "minilm")
    assert rep.altered and _typmods(ctx) == {"memory_embeddings": 384, "sim_memory_embeddings": 384}
    for e in envs:
        assert all(d == 384 for _, d in _rows(ctx, e.tenant))
        assert_index_exact(ctx, e.tenant)
    assert _recall(ctx, a, "when do deploys happen")["diagnostics"]["candidates"]["vector"] > 0


def test_a_switch_reembeds_the_rows_of_an_open_simulation(ctx, tmp_path):
    from oml.services.claims.admission import Submission
    from oml.services.simulations.acts import Simulations

    from support.recall import make_world

    w = make_world(ctx, "swsim")
    real = w.remember("main.ops", "production deploys happen on tuesday mornings")
    w.index()
    sims = Simulations(ctx)
    writer, reviewer, reader = w.key("writer"), w.key("reviewer"), w.key("reader")
    sim = sims.open(w.admin, "deploy rehearsal", [writer.principal_id, reviewer.principal_id, reader.principal_id])
    sim_id = sim["simulation_id"]
    overlay = sims.supersede(writer, sim_id, real["claim_id"], {"statement": "production deploys move to friday"})
    sims.review(reviewer, overlay["version_id"], "promote", "accurate")
    born = sims.submit(writer, sim_id, [Submission(w.area("main.ops"), {"statement": "the datacenter migration has downtime"})])
    sims.review(reviewer, born["items"][0]["version_id"], "promote", "accurate")
    w.index()

    def sim_rows() -> list[str]:
        with owner(ctx) as c:
            return sorted(str(v) for v in c.execute(sa.text(
                "SELECT version_id FROM sim_memory_embeddings WHERE simulation_id = :s"), {"s": sim_id}).scalars())

    before = sim_rows()
    assert overlay["version_id"] in before and len(before) == 2
    copy = tmp_path / "sim-minilm"
    shutil.copytree(embedding.model_path(None), copy)
    model_switch.switch(ctx, str(copy))
    try:
        assert sim_rows() == before
        got = Recaller(ctx).recall(reader, RecallRequest(query="when do production deploys happen", retriever="vector"))
        assert overlay["version_id"] in [h["version_id"] for h in got["hits"]]
    finally:
        model_switch.switch(ctx, "minilm")
    assert sim_rows() == before
