"""Simulations end to end: acts, taint, overlay tips, per-simulation partitions, the read merge, refusals, closing.

Real components throughout: admission (signed journal, projector), the real
indexer with the real model (the simulation part writes the simulation
partitions), recall/fetch/lineage as ``oml_server``.
"""
from __future__ import annotations

import json
import uuid

import pytest
import sqlalchemy as sa

from oml.domain.errors import OMLError
from oml.services.claims.admission import Submission
from oml.services.journal import journal
from oml.services.journal.projections import verify_tenant
from oml.services.reads import fetch as F
from oml.services.reads.recall import Recaller, RecallRequest
from oml.services.simulations.acts import Simulations
from oml.services.storage.db import SNAPSHOT_ISOLATION

from support.recall import make_world, owner

TUESDAY = "The production deploy window is every Tuesday afternoon."
FRIDAY = "The production deploy window moves to Friday mornings during the migration rehearsal."
DATACENTER = "The hypothetical datacenter migration finishes in three weeks with zero downtime."


def _ids(out) -> list[str]:
    return [i["version_id"] for i in out["steering"] + out["hits"]]


def partitions(ctx, sim: str) -> list[str]:
    with owner(ctx) as c:
        return sorted(c.execute(sa.text("SELECT relname FROM pg_class WHERE relkind = 'r' AND relname LIKE :p"),
                                {"p": "sim_%_s" + sim.replace("-", "") + "%"}).scalars())


@pytest.fixture(scope="module")
def w(ctx):
    w = make_world(ctx, "sims-a")
    w.sims = Simulations(ctx)
    w.inside_writer = w.key("writer")
    w.inside_reviewer = w.key("reviewer")
    w.inside_reader = w.key("reader")
    w.outside_reader = w.key("reader")
    w.outside_reviewer = w.key("reviewer")
    w.author_reviewer = w.key("reviewer", identity=w.inside_writer.identity_id)  # in the audience, the author's identity
    w.real = w.remember("main.ops", TUESDAY)
    w.steer = w.remember("main.ops", "Always name the on-call engineer when describing deploys.", kind="steering")
    w.index()
    with owner(ctx, w.tenant) as c:
        w.tips_before = c.execute(sa.text("SELECT claim_id, version_id, from_seq, to_seq FROM tip_intervals"
                                          " WHERE tenant_id = :t ORDER BY from_seq"), {"t": w.tenant}).all()
    w.audience = [w.inside_writer.principal_id, w.inside_reviewer.principal_id, w.inside_reader.principal_id,
                  w.author_reviewer.principal_id]
    opened = w.sims.open(w.admin, "deploy rehearsal", w.audience)
    w.sim = opened["simulation_id"]
    # A real claim superseded inside the simulation, promoted by an audience reviewer: an overlay tip.
    w.overlay = w.sims.supersede(w.inside_writer, w.sim, w.real["claim_id"], {"statement": FRIDAY})
    w.overlay_review = w.sims.review(w.inside_reviewer, w.overlay["version_id"], "promote", "accurate")
    # A claim born in the simulation.
    w.born = w.sims.submit(w.inside_writer, w.sim, [Submission(w.area("main.ops"), {"statement": DATACENTER})])["items"][0]
    w.sims.review(w.inside_reviewer, w.born["version_id"], "promote", "accurate")
    w.index()
    w.recaller = Recaller(ctx)
    return w


def recall(w, who, query, **kw):
    return w.recaller.recall(who, RecallRequest(query=query, **kw))


def test_open_journals_ids_only_and_creates_partitions(w, ctx):
    with owner(ctx, w.tenant) as c:
        ev = json.loads(bytes(c.execute(sa.text("SELECT canonical FROM journal_events WHERE tenant_id = :t AND type = 'simulation.opened'"),
                                        {"t": w.tenant}).scalar()))
    assert set(ev["data"]) == {"simulation_id", "audience", "note"}
    assert "rehearsal" not in json.dumps(ev)  # the name lives in an encrypted note only
    assert ev["data"]["audience"] == sorted(w.audience)
    assert partitions(ctx, w.sim) == sorted(f"{t}_s{w.sim.replace('-', '')}" for t in ("sim_memories_fts", "sim_memory_embeddings"))
    rec = w.sims.get(w.inside_reader, w.sim)
    assert rec["name"] == "deploy rehearsal" and rec["status"] == "open" and rec["open_tips"] == 2
    with pytest.raises(OMLError) as e:
        w.sims.get(w.outside_reader, w.sim)
    assert e.value.code == "simulation.not_found"
    assert [i["simulation_id"] for i in w.sims.list(w.admin)["items"]] == [w.sim]
    assert w.sims.list(w.outside_reader)["items"] == []


def test_only_admin_or_operator_open_and_close(w):
    for who in (w.writer, w.reviewer, w.inside_reader):
        with pytest.raises(OMLError) as e:
            w.sims.open(who, "x", [w.inside_reader.principal_id])
        assert e.value.code == "access.denied"
        with pytest.raises(OMLError) as e:
            w.sims.close(who, w.sim)
        assert e.value.code == "access.denied"
    with pytest.raises(OMLError) as e:
        w.sims.open(w.admin, "x", ["0123456789abcdef"])
    assert e.value.code == "admission.invalid" and e.value.extra["field"] == "audience[0]"


def test_taint_and_version_numbers(w, ctx):
    with owner(ctx, w.tenant) as c:
        rows = {str(r.version_id): r for r in c.execute(sa.text(
            "SELECT version_id, version_no, tainted, simulation_id, provenance, status FROM claim_versions WHERE tenant_id = :t"),
            {"t": w.tenant})}
    ov = rows[w.overlay["version_id"]]
    assert ov.tainted and str(ov.simulation_id) == w.sim and ov.provenance == "simulation" and ov.version_no == 2
    # The real claim's counter is untouched: the next real version is number 2 as well.
    real2 = ctx.admission.submit(w.writer, [Submission(w.area("main.ops"), {"statement": "Deploys need two approvals."},
                                                       claim_id=w.real["claim_id"], supersedes=w.real["version_id"])])["items"][0]
    assert real2["version_no"] == 2
    ctx.admission.review(w.reviewer, real2["version_id"], "reject", "inaccurate")
    # Derived from a simulation claim without naming the simulation: tainted all the same.
    derived = ctx.admission.submit(w.inside_writer, [Submission(w.area("main.ops"), {"statement": "Plan the cutover."},
                                                                derived_from=[w.born["claim_id"]])])["items"][0]
    with owner(ctx, w.tenant) as c:
        r = c.execute(sa.text("SELECT v.tainted, v.simulation_id, c.simulation_id AS csim FROM claim_versions v JOIN claims c"
                              " ON c.tenant_id = v.tenant_id AND c.claim_id = v.claim_id WHERE v.tenant_id = :t AND v.version_id = :v"),
                      {"t": w.tenant, "v": derived["version_id"]}).one()
    assert r.tainted and str(r.simulation_id) == w.sim and str(r.csim) == w.sim


def test_outsiders_cannot_write_review_or_derive_inside(w, ctx):
    sub = Submission(w.area("main.ops"), {"statement": "x y z"})
    with pytest.raises(OMLError) as e:
        w.sims.submit(w.writer, w.sim, [sub])
    assert e.value.code == "simulation.not_found"
    with pytest.raises(OMLError) as e:
        ctx.admission.submit(w.writer, [Submission(w.area("main.ops"), {"statement": "x"}, derived_from=[w.born["claim_id"]])])
    assert e.value.code == "admission.invalid"  # the same answer as for an unknown claim id
    # Supersede inside: the audience is checked before the claim, so a claim born in the simulation, a real
    # claim and an unknown id get one answer (a lookup first would say which claims were born inside).
    answers = set()
    for claim in (w.born["claim_id"], w.real["claim_id"], str(uuid.uuid4())):
        with pytest.raises(OMLError) as e:
            w.sims.supersede(w.writer, w.sim, claim, {"statement": "x"})
        answers.add((e.value.code, e.value.detail, tuple(sorted(e.value.extra.items()))))
    assert answers == {("simulation.not_found", "simulation not found", ())}
    held = w.sims.submit(w.inside_writer, w.sim, [sub])["items"][0]
    with pytest.raises(OMLError) as e:
        ctx.admission.review(w.outside_reviewer, held["version_id"], "promote", "accurate")
    assert e.value.code == "claim.not_found"
    # The same non-author gate inside: an audience reviewer with the author's identity cannot promote.
    with pytest.raises(OMLError) as e:
        ctx.admission.review(w.author_reviewer, held["version_id"], "promote", "accurate")
    assert e.value.code == "access.separation_of_duties"
    ctx.admission.review(w.inside_reviewer, held["version_id"], "reject", "out_of_scope")


def test_audience_sees_overlay_outsiders_see_default(w, ctx):
    inside = recall(w, w.inside_reader, "when is the production deploy window", k=10)
    outside = recall(w, w.outside_reader, "when is the production deploy window", k=10)
    assert w.overlay["version_id"] in _ids(inside) and w.real["version_id"] not in _ids(inside)
    assert w.real["version_id"] in _ids(outside)
    assert w.overlay["version_id"] not in _ids(outside) and w.born["version_id"] not in _ids(outside)
    assert w.born["version_id"] in _ids(recall(w, w.inside_reader, "datacenter migration downtime", k=10))
    # Both retrievers find simulation rows for the audience (FTS through the simulation function, vector through the partitions).
    for retriever in ("fts", "vector"):
        assert w.overlay["version_id"] in _ids(recall(w, w.inside_reader, "deploy window Friday migration rehearsal",
                                                      retriever=retriever, k=10))
    assert inside["steering"] == [] or all(s["kind"] == "steering" for s in inside["steering"])
    f_in = F.fetch(ctx, w.inside_reader, claim_id=w.real["claim_id"])
    f_out = F.fetch(ctx, w.outside_reader, claim_id=w.real["claim_id"])
    assert f_in["version_id"] == w.overlay["version_id"] and f_in["body"]["statement"] == FRIDAY
    assert f_out["version_id"] == w.real["version_id"] and f_out["body"]["statement"] == TUESDAY
    for kw in ({"version_id": w.overlay["version_id"]}, {"claim_id": w.born["claim_id"]}, {"version_id": w.born["version_id"]}):
        with pytest.raises(OMLError) as e:
            F.fetch(ctx, w.outside_reader, **kw)
        assert e.value.code == "claim.not_found"
    with pytest.raises(OMLError) as e:
        F.lineage(ctx, w.outside_reader, w.born["claim_id"])
    assert e.value.code == "claim.not_found"
    lin_out = F.lineage(ctx, w.outside_reader, w.real["claim_id"])
    assert [v["version_id"] for v in lin_out["versions"]] == [w.real["version_id"]]
    lin_in = F.lineage(ctx, w.inside_reader, w.real["claim_id"])
    assert {v["version_id"] for v in lin_in["versions"]} == {w.real["version_id"], w.overlay["version_id"]}
    assert [n["tip_version_id"] for n in lin_in["nodes"] if n["claim_id"] == w.real["claim_id"]] == [w.overlay["version_id"]]


def test_an_edge_of_a_tainted_version_exists_only_inside_the_fence(w, ctx):
    x = w.remember("main.ops", "Rollbacks are rehearsed monthly.")
    y = w.remember("main.ops", "The incident review happens on Mondays.")
    ov = w.sims.supersede(w.inside_writer, w.sim, y["claim_id"], {"statement": "The incident review moves to Thursdays."},
                          derived_from=[x["claim_id"]])
    w.sims.review(w.inside_reviewer, ov["version_id"], "promote", "accurate")
    out = F.lineage(ctx, w.outside_reader, x["claim_id"])
    assert [n["claim_id"] for n in out["nodes"]] == [x["claim_id"]] and out["edges"] == []
    inside = F.lineage(ctx, w.inside_reader, x["claim_id"])
    assert y["claim_id"] in {n["claim_id"] for n in inside["nodes"]}
    assert {e["version_id"] for e in inside["edges"]} == {ov["version_id"]}
    # Erased, the real claim lists its real versions only to a key outside the audience.
    from oml.services.erasure.acts import Erasure

    op = w.key("operator")
    Erasure(ctx).erase_claim(op, y["claim_id"], "retention", rewrite=False)
    assert F.lineage(ctx, w.outside_reader, y["claim_id"])["versions"] == [{"version_id": y["version_id"], "erased": True}]
    with pytest.raises(OMLError) as e:
        F.fetch(ctx, w.outside_reader, version_id=ov["version_id"])
    assert e.value.code == "claim.not_found"  # not claim.erased: behind the fence it never existed
    with pytest.raises(OMLError) as e:
        F.fetch(ctx, w.inside_reader, version_id=ov["version_id"])
    assert e.value.code == "claim.erased"


def test_erasing_a_claim_born_inside_leaves_the_shared_indexes_alone(w, ctx):
    """A shared index rewrite re-analyses statistics the vector plan reads: only a real claim's erasure asks for one."""
    from oml.services.erasure.acts import Erasure

    def requested(seq):
        with owner(ctx, w.tenant) as c:
            return {(r.target, r.simulation_id is not None and str(r.simulation_id) != "00000000-0000-0000-0000-000000000000")
                    for r in c.execute(sa.text("SELECT target, simulation_id FROM erasure_rewrites WHERE tenant_id = :t"
                                               " AND requested_seq = :s"), {"t": w.tenant, "s": seq})}

    op = w.key("operator")
    born = w.sims.submit(w.inside_writer, w.sim, [Submission(w.area("main.ops"), {"statement": "A what-if to erase."})])["items"][0]
    w.sims.review(w.inside_reviewer, born["version_id"], "promote", "accurate")
    w.index()
    out = Erasure(ctx).erase_claim(op, born["claim_id"], "retention", rewrite=False)
    targets = requested(out["erasures"][0]["seq"])
    assert {"memories_fts", "memory_embeddings"}.isdisjoint(t for t, _ in targets)
    assert {("sim_memories_fts", True), ("sim_memory_embeddings", True), ("artifacts", False)} <= targets
    real = w.remember("main.ops", "A real fact to erase.")
    out = Erasure(ctx).erase_claim(op, real["claim_id"], "retention", rewrite=False)
    assert {("memories_fts", False), ("memory_embeddings", False)} <= requested(out["erasures"][0]["seq"])


def test_simulation_steering_leads_segment_one_for_the_audience(w, ctx):
    st = w.sims.submit(w.inside_writer, w.sim, [Submission(w.area("main.ops"), {"statement": "Inside the rehearsal, freeze all deploys."},
                                                           kind="steering")])["items"][0]
    w.sims.review(w.inside_reviewer, st["version_id"], "promote", "accurate")
    w.index()
    scope = w.area("main.ops")
    inside = recall(w, w.inside_reader, "deploy window", workarea_id=scope, k=10)
    outside = recall(w, w.outside_reader, "deploy window", workarea_id=scope, k=10)
    assert st["version_id"] in [s["version_id"] for s in inside["steering"]]
    assert st["version_id"] not in _ids(outside) and st["version_id"] not in [h["version_id"] for h in inside["hits"]]
    assert w.steer["version_id"] in [s["version_id"] for s in inside["steering"]]


def test_shared_indexes_never_hold_simulation_rows(w, ctx):
    with owner(ctx, w.tenant) as c:
        tainted = {str(v) for v in c.execute(sa.text("SELECT version_id FROM claim_versions WHERE tenant_id = :t AND tainted"),
                                             {"t": w.tenant}).scalars()}
        for table in ("memories_fts", "memory_embeddings"):
            shared = {str(v) for v in c.execute(sa.text(f"SELECT version_id FROM {table} WHERE tenant_id = :t"), {"t": w.tenant}).scalars()}
            assert not shared & tainted
        for table in ("sim_memories_fts", "sim_memory_embeddings"):
            got = {str(v) for v in c.execute(sa.text(f"SELECT version_id FROM {table} WHERE simulation_id = :s"), {"s": w.sim}).scalars()}
            assert {w.overlay["version_id"], w.born["version_id"]} <= got <= tainted
        # The default tip never recorded a tainted version.
        assert not c.execute(sa.text("SELECT count(*) FROM tip_intervals ti JOIN claim_versions v ON v.tenant_id = ti.tenant_id"
                                     " AND v.version_id = ti.version_id WHERE ti.tenant_id = :t AND v.tainted"), {"t": w.tenant}).scalar()


def test_forged_default_promotion_of_a_tainted_version_is_refused_by_the_projector(w, ctx):
    held = w.sims.submit(w.inside_writer, w.sim, [Submission(w.area("main.ops"), {"statement": "forged"})])["items"][0]
    adm = ctx.admission
    with pytest.raises(OMLError) as e:
        with ctx.db.tenant("oml_admission", w.tenant) as conn:
            head = journal.Head(conn, w.tenant)
            adm.acts.append(head, "claim.promoted", adm.acts.actor(w.inside_reviewer),
                        {"claim_id": held["claim_id"], "version_id": held["version_id"], "reason": "accurate", "self_signed": False})
    assert e.value.code == "simulation.tip_refused"
    ctx.admission.review(w.inside_reviewer, held["version_id"], "reject", "other")


class _Capture:
    """Every statement ``engine`` runs while active (text and parameters), those sent in a pipeline
    (services/storage/pipelined.py, which goes around SQLAlchemy) included."""

    def __init__(self, engine):
        self.engine, self.statements = engine, []

    def _hook(self, conn, cursor, statement, parameters, context, executemany):
        self.statements.append((statement, parameters))

    def __enter__(self):
        from oml.services.storage import pipelined

        self._fetch = pipelined.fetch

        def fetch(conn, queries):
            if conn.engine is self.engine:
                self.statements.extend((q.sql, q.params) for q in queries)
            return self._fetch(conn, queries)

        pipelined.fetch = fetch
        sa.event.listen(self.engine, "before_cursor_execute", self._hook)
        return self

    def __exit__(self, *exc):
        from oml.services.storage import pipelined

        pipelined.fetch = self._fetch
        sa.event.remove(self.engine, "before_cursor_execute", self._hook)


def plans(ctx, tenant: str, statements) -> list[str]:
    """EXPLAIN of each captured statement as ``oml_server``; a search function's call is explained by its
    ``*_plan`` twin, which runs the same query text with the same arguments."""
    import re

    out = []
    with ctx.db.tenant("oml_server", tenant) as c:
        raw = c.connection.driver_connection
        for sql, params in statements:
            if not sql.lstrip().upper().startswith(("SELECT", "WITH")) or "set_config" in sql:
                continue
            m = re.search(r"FROM (oml_(?:sim_)?fts_search)\(", sql)
            if m:
                q = "SELECT * FROM " + m.group(1) + "_plan(" + sql[m.end():]
            else:
                q = "EXPLAIN (COSTS OFF) " + sql
            out.append("\n".join(r[0] for r in raw.execute(q, params)))
    return out


def test_explain_as_a_key_outside_the_audience_shows_no_simulation_partition(w, ctx):
    engine = ctx.db.engine("oml_server", isolation=SNAPSHOT_ISOLATION)  # every read's (Database.read)
    for who, inside in ((w.outside_reader, False), (w.inside_reader, True)):
        with _Capture(engine) as cap:
            for retriever in ("fts", "vector", "hybrid"):
                recall(w, who, "when is the production deploy window", retriever=retriever, k=5)
            F.fetch(ctx, who, claim_id=w.real["claim_id"])
            F.lineage(ctx, who, w.real["claim_id"])
        text = "\n".join(s for s, _ in cap.statements)
        plan = "\n".join(plans(ctx, w.tenant, cap.statements))
        if inside:
            # The positive control: an audience member's plans do reach the simulation's partitions.
            hexid = w.sim.replace("-", "")
            assert f"sim_memories_fts_s{hexid}" in plan and f"sim_memory_embeddings_s{hexid}" in plan
        else:
            assert "sim_" not in text and "sim_" not in plan, plan
            assert "memories_fts_p" in plan and "memory_embeddings_p" in plan  # the shared partitions were planned


def test_projections_replay_to_the_live_tables(w, ctx):
    assert verify_tenant(ctx.db, w.tenant) == []


def test_close_demotes_overlays_drops_partitions_and_the_default_tip_never_moved(w, ctx):
    late = w.sims.submit(w.inside_writer, w.sim, [Submission(w.area("main.ops"), {"statement": "held at close"})])["items"][0]
    closed = w.sims.close(w.admin, w.sim)
    assert {d["version_id"] for d in closed["demoted"]} >= {w.overlay["version_id"], w.born["version_id"]}
    assert partitions(ctx, w.sim) == []
    assert w.sims.close(w.admin, w.sim)["already_closed"] is True
    # Promoting a tainted version of a closed simulation could only make it a default tip: refused.
    with pytest.raises(OMLError) as e:
        ctx.admission.review(w.inside_reviewer, late["version_id"], "promote", "accurate")
    assert e.value.code == "simulation.tip_refused"
    with pytest.raises(OMLError) as e:
        w.sims.submit(w.inside_writer, w.sim, [Submission(w.area("main.ops"), {"statement": "after close"})])
    assert e.value.code == "simulation.closed"
    w.index()
    inside = recall(w, w.inside_reader, "when is the production deploy window", k=10)
    outside = recall(w, w.outside_reader, "when is the production deploy window", k=10)
    assert _ids(inside) == _ids(outside) and w.real["version_id"] in _ids(inside)
    assert F.fetch(ctx, w.inside_reader, claim_id=w.real["claim_id"])["version_id"] == w.real["version_id"]
    with owner(ctx, w.tenant) as c:
        st = c.execute(sa.text("SELECT count(*) FILTER (WHERE to_seq IS NULL) FROM sim_tip_intervals WHERE tenant_id = :t"),
                       {"t": w.tenant}).scalar()
        statuses = {str(r.version_id): r.status for r in c.execute(sa.text(
            "SELECT version_id, status FROM claim_versions WHERE tenant_id = :t AND simulation_id = :s"), {"t": w.tenant, "s": w.sim})}
        tips_after = c.execute(sa.text("SELECT claim_id, version_id, from_seq, to_seq FROM tip_intervals"
                                       " WHERE tenant_id = :t AND claim_id = ANY(CAST(:cs AS uuid[])) ORDER BY from_seq"),
                               {"t": w.tenant, "cs": [r.claim_id for r in w.tips_before]}).all()
    assert st == 0
    assert statuses[w.overlay["version_id"]] == "demoted" and statuses[w.born["version_id"]] == "demoted"
    assert [tuple(r) for r in tips_after] == [tuple(r) for r in w.tips_before]
    assert verify_tenant(ctx.db, w.tenant) == []
