"""The simulation SQL (65_simulations.sql, 96_simulations_grants.sql): partition functions and the simulation
search are tenant-bound, role-bound and simulation-bound; partitions are reachable through their parents only."""
from __future__ import annotations

import pytest
import sqlalchemy as sa

from oml.services.claims.admission import Submission
from oml.services.simulations.acts import Simulations

from support.recall import make_world

ROLES = ("oml_admission", "oml_server", "oml_lake_writer", "oml_reconciler", "oml_indexer", "oml_relay")


@pytest.fixture(scope="module")
def two(ctx):
    a, b = make_world(ctx, "simsql-a"), make_world(ctx, "simsql-b")
    for w in (a, b):
        w.sims = Simulations(ctx)
        w.member = w.key("reader")
        w.sim = w.sims.open(w.admin, "s", [w.member.principal_id, w.writer.principal_id, w.reviewer.principal_id])["simulation_id"]
        item = w.sims.submit(w.writer, w.sim, [Submission(w.area("main"), {"statement": "zyzzyva quokka inside the fence"})])["items"][0]
        w.sims.review(w.reviewer, item["version_id"], "promote", "accurate")
        w.item = item
        w.index()
    return a, b


def _search(c, sims):
    return c.execute(sa.text("SELECT version_id FROM oml_sim_fts_search(CAST(:s AS uuid[]), CAST('''zyzzyva''' AS tsquery),"
                             " ARRAY['main'], NULL, NULL, NULL, NULL, NULL, 10)"), {"s": sims}).scalars().all()


def test_simulation_search_is_tenant_and_simulation_bound(ctx, two):
    a, b = two
    with ctx.db.tenant("oml_server", a.tenant) as c:
        assert [str(v) for v in _search(c, [a.sim])] == [a.item["version_id"]]
        assert _search(c, [b.sim]) == []            # another tenant's simulation: nothing
    with ctx.db.system("oml_server") as c:
        with pytest.raises(sa.exc.DBAPIError) as e:
            _search(c, [a.sim])
        assert "no tenant bound" in str(e.value)
    for role in ROLES:
        if role == "oml_server":
            continue
        with ctx.db.tenant(role, a.tenant) as c:
            with pytest.raises(sa.exc.ProgrammingError):
                _search(c, [a.sim])


def test_partition_functions_are_admission_only_and_tenant_bound(ctx, two):
    a, b = two
    for role in ROLES:
        if role == "oml_admission":
            continue
        for fn in ("oml_sim_create_partitions", "oml_sim_drop_partitions"):
            with ctx.db.tenant(role, a.tenant) as c:
                with pytest.raises(sa.exc.ProgrammingError):
                    c.execute(sa.text(f"SELECT {fn}(CAST(:s AS uuid))"), {"s": a.sim})
    for fn, sim, why in (("oml_sim_create_partitions", b.sim, "no open simulation"),   # another tenant's
                         ("oml_sim_create_partitions", a.sim, "already exists"),        # never a shared partition
                         ("oml_sim_drop_partitions", a.sim, "no closed simulation"),    # still open
                         ("oml_sim_drop_partitions", b.sim, "no closed simulation")):
        with pytest.raises(sa.exc.DBAPIError) as e:
            with ctx.db.tenant("oml_admission", a.tenant) as c:
                c.execute(sa.text(f"SELECT {fn}(CAST(:s AS uuid))"), {"s": sim})
        assert why in str(e.value)
    with pytest.raises(sa.exc.DBAPIError) as e:
        with ctx.db.system("oml_admission") as c:
            c.execute(sa.text("SELECT oml_sim_create_partitions(CAST(:s AS uuid))"), {"s": a.sim})
    assert "no tenant bound" in str(e.value)


def test_partitions_are_reachable_through_their_parents_only(ctx, two):
    a, _ = two
    part = "sim_memory_embeddings_s" + a.sim.replace("-", "")
    for role in ROLES:
        with ctx.db.tenant(role, a.tenant) as c:
            with pytest.raises(sa.exc.ProgrammingError):
                c.execute(sa.text(f'SELECT count(*) FROM "{part}"'))
    with ctx.db.tenant("oml_server", a.tenant) as c:
        assert c.execute(sa.text("SELECT count(*) FROM sim_memory_embeddings WHERE tenant_id = :t AND simulation_id = :s"),
                         {"t": a.tenant, "s": a.sim}).scalar() == 1
    with ctx.db.tenant("oml_server", "simsql-b") as c:
        assert c.execute(sa.text("SELECT count(*) FROM sim_memory_embeddings WHERE simulation_id = :s"), {"s": a.sim}).scalar() == 0


def test_simulation_search_uses_the_partitions_gin_index(ctx, two):
    """With enough rows for an index to pay, the simulation search's plan is its own partition's GIN index
    (the SECURITY DEFINER construction lifts the RLS barrier on `@@`), pruned to the named simulation."""
    a, b = two
    with ctx.db.engine(None).begin() as c:   # filler rows, as the owner: plan shape only
        c.execute(sa.text(
            "INSERT INTO sim_memories_fts (tenant_id, simulation_id, version_id, claim_id, workarea_id, path, kind, provenance,"
            " self_signed, tip_from_seq, tip_from_at, tsv) SELECT :t, CAST(:s AS uuid), gen_random_uuid(), gen_random_uuid(),"
            " gen_random_uuid(), 'main', 'fact', 'simulation', false, i, now(), to_tsvector('english', 'filler row ' || i)"
            " FROM generate_series(1, 3000) i"), {"t": a.tenant, "s": a.sim})
        c.execute(sa.text("ANALYZE sim_memories_fts"))
    q = "'zyzzyva'"
    with ctx.db.tenant("oml_server", a.tenant) as c:
        plan = "\n".join(c.execute(sa.text(
            "SELECT * FROM oml_sim_fts_search_plan(CAST(:s AS uuid[]), CAST(:q AS tsquery), ARRAY['main'],"
            " NULL, NULL, NULL, NULL, NULL, 10)"), {"s": [a.sim], "q": q}).scalars())
    hexid = a.sim.replace("-", "")
    assert f"Bitmap Index Scan on sim_memories_fts_s{hexid}_tsv" in plan, plan
    assert "sim_memories_fts_s" + b.sim.replace("-", "") not in plan


def test_a_partition_gone_mid_batch_skips_that_simulation_only(ctx, two):
    """A close racing an indexer batch: the simulation's partitions vanish under it. The batch still commits,
    the shared rows it carries are written, and nothing is written for that simulation."""
    a, _ = two
    sim2 = a.sims.open(a.admin, "race", [a.writer.principal_id, a.reviewer.principal_id])["simulation_id"]
    it = a.sims.submit(a.writer, sim2, [Submission(a.area("main"), {"statement": "a raced row inside"})])["items"][0]
    a.sims.review(a.reviewer, it["version_id"], "promote", "accurate")
    real = a.remember("main", "a real row indexed in the same batch")
    hexid = sim2.replace("-", "")
    with ctx.db.engine(None).begin() as c:   # what the close's DROP does, without the close
        for t in ("sim_memories_fts", "sim_memory_embeddings"):
            c.execute(sa.text(f'DROP TABLE "{t}_s{hexid}"'))
    a.index()
    with ctx.db.tenant("oml_server", a.tenant) as c:
        assert c.execute(sa.text("SELECT count(*) FROM memories_fts WHERE tenant_id = :t AND version_id = :v"),
                         {"t": a.tenant, "v": real["version_id"]}).scalar() == 1
        assert c.execute(sa.text("SELECT count(*) FROM sim_memories_fts WHERE tenant_id = :t AND simulation_id = :s"),
                         {"t": a.tenant, "s": sim2}).scalar() == 0
