"""Reads from a real PostgreSQL hot standby.

The standby is built by the test from the test server with its own
``pg_basebackup`` and runs as a second postmaster. Covered here: reads go to
the standby and see exactly what RLS shows on the primary; a lagging standby
(replay paused) serves older state, and a read-your-writes read waits a
bounded time and then falls back to the primary; an unreachable standby is
skipped; a promoted standby keeps serving.
"""
from __future__ import annotations

import pytest
import sqlalchemy as sa

from oml.services.claims.admission import Submission
from oml.services.reads import scope
from oml.services.runtime.auth import authenticate

from support.replica import caught_up, in_recovery, replica_context, start_standby, stop_standby


@pytest.fixture(scope="module")
def standby(pg_server):
    sb = start_standby(pg_server)
    yield sb
    stop_standby(sb)


@pytest.fixture(scope="module")
def rctx(ctx, standby):
    c = replica_context(ctx, standby)
    yield c
    c.db.dispose()


@pytest.fixture(scope="module")
def tenants(ctx):
    out = {}
    for t in ("rep-a", "rep-b"):
        created = ctx.tenancy.create_tenant(t)
        out[t] = (created, authenticate(ctx.db, created.admin_key))
    return out


def _count_claims(conn, tenant):
    return conn.execute(sa.text("SELECT count(*) FROM claims WHERE tenant_id = :t"), {"t": tenant}).scalar()


def _submit(ctx, tenants, tenant, statement):
    created, admin = tenants[tenant]
    adm = ctx.admission
    ident = ctx.tenancy.create_identity(admin, "service", "w")["identity_id"]
    writer = authenticate(ctx.db, ctx.tenancy.create_principal(admin, ident, "writer", [created.root_workarea])["api_key"])
    return adm.submit(writer, [Submission(created.root_workarea, {"statement": statement})])["items"][0]


def test_reads_go_to_the_standby_under_the_same_rls(ctx, rctx, standby, tenants):
    _submit(ctx, tenants, "rep-a", "A fact only tenant rep-a holds.")
    caught_up(ctx, standby)
    with rctx.db.read("oml_server", "rep-a") as rtx:
        assert rtx.source == "replica:0" and in_recovery(rtx.conn)
        assert _count_claims(rtx.conn, "rep-a") == 1
        # RLS on the standby: rep-a's transaction sees nothing of rep-b, even when it names rep-b.
        assert _count_claims(rtx.conn, "rep-b") == 0
    with rctx.db.engine("oml_server", 0).connect() as conn:
        # No tenant bound: fails closed on the standby as on the primary.
        assert conn.execute(sa.text("SELECT count(*) FROM claims")).scalar() == 0


def test_a_read_on_the_standby_cannot_write(rctx):
    with pytest.raises(sa.exc.DBAPIError, match="read-only"):
        with rctx.db.read("oml_server", "rep-a") as rtx:
            rtx.conn.execute(sa.text("INSERT INTO read_events (tenant_id) VALUES ('rep-a')"))


def test_lag_serves_older_state_and_read_your_writes_falls_back(ctx, rctx, standby, tenants):
    caught_up(ctx, standby)
    standby.pause_replay()
    try:
        _submit(ctx, tenants, "rep-b", "Written while the standby's replay is paused.")
        position = ctx.db.write_position()
        with rctx.db.read("oml_server", "rep-b") as rtx:
            assert rtx.source == "replica:0"
            assert _count_claims(rtx.conn, "rep-b") == 0          # the standby's older state
        with rctx.db.read("oml_server", "rep-b", after_lsn=position) as rtx:
            assert rtx.source == "primary"                        # waited replica_wait_s, then the primary
            assert _count_claims(rtx.conn, "rep-b") == 1
        assert rctx.db.read_counts.get("replica:0:behind", 0) >= 1
    finally:
        standby.resume_replay()
    standby.wait_for(position)
    with rctx.db.read("oml_server", "rep-b", after_lsn=position) as rtx:
        assert rtx.source == "replica:0" and _count_claims(rtx.conn, "rep-b") == 1


def test_an_unreachable_standby_is_skipped(ctx, tmp_path):
    from oml.services.storage.db import Database

    url = ctx.db.owner_url.render_as_string(hide_password=False)
    gone = sa.make_url(url).set(query={"host": str(tmp_path), "port": "5999"}).render_as_string(hide_password=False)
    db = Database(url, None, 2, replica_urls=[gone])
    try:
        with db.read("oml_server", "rep-a") as rtx:
            assert rtx.source == "primary" and _count_claims(rtx.conn, "rep-a") == 1
        assert db.read_counts["replica:0:unreachable"] == 1
    finally:
        db.dispose()


def test_a_promoted_standby_keeps_serving(ctx, pg_server, tenants):
    # A second standby of its own: promoting it must not disturb the module's first one.
    sb = start_standby(pg_server, port=5434)
    try:
        caught_up(ctx, sb)
        c = replica_context(ctx, sb)
        sb.promote()
        with c.db.read("oml_server", "rep-a") as rtx:
            assert rtx.source == "replica:0" and not in_recovery(rtx.conn)
            assert _count_claims(rtx.conn, "rep-a") == 1
        c.db.dispose()
    finally:
        stop_standby(sb)


# ---------------------------------------------------------------- the read path over HTTP, served by the standby

@pytest.fixture(scope="module")
def world(ctx, rctx, standby):
    from fastapi.testclient import TestClient

    from oml.services.entrypoints.http.app import create_app

    from support.recall import make_world

    w = make_world(ctx, "rep-http")
    w.fact = w.remember("main", "The nightly export job writes its files to the archive bucket.")
    w.index()
    w.reader_key = w.keys[w.key("reader").principal_id]
    w.writer_key = w.keys[w.writer.principal_id]
    w.reviewer_key = w.keys[w.reviewer.principal_id]
    caught_up(ctx, standby)
    w.client = TestClient(create_app(rctx))
    return w


def _h(key, **extra):
    return {"Authorization": f"Bearer {key}", **extra}


def test_recall_and_fetch_are_served_by_the_standby_and_logged_on_the_primary(world, rctx):
    from support.recall import read_events

    before = dict(rctx.db.read_counts)
    r = world.client.post("/v1/recall", json={"query": "nightly export archive bucket", "k": 3}, headers=_h(world.reader_key))
    assert r.status_code == 200, r.text
    assert [h["claim_id"] for h in r.json()["hits"]] == [world.fact["claim_id"]]
    f = world.client.get(f"/v1/claims/{world.fact['claim_id']}", headers=_h(world.reader_key))
    assert f.status_code == 200 and f.json()["body"]["statement"].startswith("The nightly export")
    assert rctx.db.read_counts.get("replica:0", 0) - before.get("replica:0", 0) >= 2
    ops = [e.op for e in read_events(rctx, "rep-http")]
    assert "recall" in ops and "fetch" in ops           # the read log row went to the primary


def test_a_standby_read_whose_log_row_the_primary_refuses_is_not_served(world, ctx, rctx, standby):
    """The primary refuses the read-log row (a lock cycle, here raised by a trigger): recall and fetch served by the
    standby answer ``readlog.unavailable`` (503), and nothing is logged."""
    from support.owner import owner
    from support.recall import read_events

    with owner(ctx) as o:
        o.execute(sa.text("CREATE FUNCTION rep_refuse() RETURNS trigger LANGUAGE plpgsql AS $$"
                          " BEGIN RAISE EXCEPTION 'refused' USING ERRCODE = '40P01'; END $$"))
        o.execute(sa.text("CREATE TRIGGER rep_refuse BEFORE INSERT ON read_events FOR EACH ROW EXECUTE FUNCTION rep_refuse()"))
    try:
        caught_up(ctx, standby)
        before = len(read_events(rctx, "rep-http"))
        served = dict(rctx.db.read_counts)
        r = world.client.post("/v1/recall", json={"query": "nightly export archive bucket", "k": 3},
                              headers=_h(world.reader_key))
        f = world.client.get(f"/v1/claims/{world.fact['claim_id']}", headers=_h(world.reader_key))
        for got in (r, f):
            assert got.status_code == 503 and got.json()["code"] == "readlog.unavailable", got.text
            assert "nightly" not in got.text
        assert rctx.db.read_counts.get("replica:0", 0) - served.get("replica:0", 0) == 2
        assert len(read_events(rctx, "rep-http")) == before
    finally:
        with owner(ctx) as o:
            o.execute(sa.text("DROP TRIGGER rep_refuse ON read_events"))
            o.execute(sa.text("DROP FUNCTION rep_refuse()"))
        caught_up(ctx, standby)


def test_read_your_writes_through_the_header(world, ctx, standby):
    c = world.client
    standby.pause_replay()
    try:
        sub = c.post("/v1/claims", json={"workarea_id": world.root, "body": {"statement": "Written during the pause."}},
                     headers=_h(world.writer_key))
        assert sub.status_code == 200, sub.text
        rev = c.post(f"/v1/versions/{sub.json()['version_id']}/review", json={"decision": "promote", "reason": "accurate"},
                     headers=_h(world.reviewer_key))
        assert rev.status_code == 200, rev.text
        token = rev.headers["OML-Read-After"]
        assert "/" not in token.replace("_", "").replace("-", "")  # opaque: not a readable WAL position
        cid = sub.json()["claim_id"]
        stale = c.get(f"/v1/claims/{cid}", headers=_h(world.reader_key))
        assert stale.status_code == 404                          # the paused standby has not seen it
        fresh = c.get(f"/v1/claims/{cid}", headers=_h(world.reader_key, **{"OML-Read-After": token}))
        assert fresh.status_code == 200                           # waited, then read from the primary
    finally:
        standby.resume_replay()


def test_a_forged_or_foreign_position_is_refused(world, ctx):
    from oml.services.reads import positions

    other = positions.issue(ctx.keystore, "rep-a", "0/1000000")  # issued to another tenant
    for token in ("not-a-token", other):
        r = world.client.get(f"/v1/claims/{world.fact['claim_id']}", headers=_h(world.reader_key, **{"OML-Read-After": token}))
        assert r.status_code == 422 and r.json()["code"] == "read.invalid_position", r.text


def test_a_write_whose_position_cannot_be_taken_is_answered_as_committed_without_the_header(world, rctx, monkeypatch):
    # The position is taken after the write committed: a failure there must not answer 500 "nothing was committed".
    import sqlalchemy as sa

    def down():
        raise sa.exc.TimeoutError("pool exhausted")

    monkeypatch.setattr(rctx.db, "write_position", down)
    sub = world.client.post("/v1/claims", json={"workarea_id": world.root, "body": {"statement": "Stamped or not."}},
                            headers=_h(world.writer_key, **{"Idempotency-Key": "unstamped-1"}))
    assert sub.status_code == 200, sub.text
    assert "OML-Read-After" not in sub.headers
    monkeypatch.undo()
    again = world.client.post("/v1/claims", json={"workarea_id": world.root, "body": {"statement": "Stamped or not."}},
                              headers=_h(world.writer_key, **{"Idempotency-Key": "unstamped-1"}))
    assert again.status_code == 200 and again.json()["replayed"] is True
    assert again.json()["claim_id"] == sub.json()["claim_id"] and "OML-Read-After" in again.headers


def test_metrics_count_reads_by_source(world, monkeypatch):
    monkeypatch.setenv("OML_METRICS_TOKEN", "replica-metrics-token")
    world.client.get(f"/v1/claims/{world.fact['claim_id']}", headers=_h(world.reader_key))
    m = world.client.get("/metrics", headers={"Authorization": "Bearer replica-metrics-token"})
    assert m.status_code == 200
    assert 'oml_replica_reads_total{source="replica:0"}' in m.text


def test_read_your_writes_keeps_the_pooled_connections_prepared_lookups(ctx, rctx, standby, tenants, monkeypatch):
    """A rollback in psycopg drops every statement the connection prepared (``DEALLOCATE ALL``): the write position
    and the standby's replay check, each a read-only statement of its own, end without one, so the read path's
    prepared lookups (``pipelined.lookup``) stay planned on the primary's and the standby's pooled connections."""
    from psycopg import _preparing

    from oml.services.storage import pipelined

    dropped = []
    clear = _preparing.PrepareManager.clear
    monkeypatch.setattr(_preparing.PrepareManager, "clear", lambda self: dropped.append(clear(self)) or dropped[-1])
    stmt = sa.text("SELECT CAST(:t AS text) AS t")
    for _ in range(3):
        position = rctx.db.write_position()
        with rctx.db.read("oml_server", "rep-a", after_lsn=position) as rtx:
            assert rtx.source == "replica:0"
            assert pipelined.lookup(rtx.conn, stmt, {"t": "rep-a"})[0].t == "rep-a"
        with rctx.db.tenant("oml_server", "rep-a") as conn:
            assert pipelined.lookup(conn, stmt, {"t": "rep-a"})[0].t == "rep-a"
    assert not any(dropped)


# ---------------------------------------------------------------- read your writes after erasures and access changes

def _hits(resp) -> list[str]:
    assert resp.status_code == 200, resp.text
    return [h["claim_id"] for h in resp.json()["hits"]]


def test_an_erasures_token_keeps_a_lagging_standby_from_serving_the_erased_claim(world, ctx, rctx, standby):
    c = world.client
    fact = world.remember("main", "The quarterly ledger reconciliation runs on the tenth working day.")
    world.index()
    operator_key = world.keys[world.key("operator").principal_id]
    caught_up(ctx, standby)
    query = {"query": "quarterly ledger reconciliation tenth working day", "k": 5, "retriever": "fts"}
    standby.pause_replay()
    try:
        erased = c.post(f"/v1/erasures/claims/{fact['claim_id']}", json={"reason": "data_subject_request", "rewrite": False},
                        headers=_h(operator_key))
        assert erased.status_code == 200, erased.text
        token = erased.headers["OML-Read-After"]
        # Without the token the paused standby still serves the claim, body and all (docs/erasure.md).
        stale = c.get(f"/v1/claims/{fact['claim_id']}", headers=_h(world.reader_key))
        assert stale.status_code == 200 and stale.json()["body"]["statement"].startswith("The quarterly ledger")
        assert fact["claim_id"] in _hits(c.post("/v1/recall", json=query, headers=_h(world.reader_key)))
        # With it, the standby is behind: the read waits, then the primary answers, where the claim is erased.
        behind = rctx.db.read_counts.get("replica:0:behind", 0)
        fresh = c.get(f"/v1/claims/{fact['claim_id']}", headers=_h(world.reader_key, **{"OML-Read-After": token}))
        assert fresh.status_code == 410 and fresh.json()["code"] == "claim.erased", fresh.text
        assert "quarterly" not in fresh.text
        recalled = c.post("/v1/recall", json=query, headers=_h(world.reader_key, **{"OML-Read-After": token}))
        assert fact["claim_id"] not in _hits(recalled) and "quarterly" not in recalled.text
        assert rctx.db.read_counts.get("replica:0:behind", 0) - behind == 2
    finally:
        standby.resume_replay()
    caught_up(ctx, standby)
    served = rctx.db.read_counts.get("replica:0", 0)
    replayed = c.get(f"/v1/claims/{fact['claim_id']}", headers=_h(world.reader_key, **{"OML-Read-After": token}))
    assert replayed.status_code == 410 and rctx.db.read_counts.get("replica:0", 0) == served + 1


def test_a_reparents_token_keeps_a_lagging_standby_from_serving_the_old_scope(world, ctx, standby):
    """A standby resolves the key's roots to paths in its own snapshot and compares them with the workarea paths it
    holds: until it replays a move, a subtree moved out of a key's roots is still served to that key (a state the
    primary had: the key and the subtree inside its roots)."""
    c = world.client
    admin_key = world.keys[world.admin.principal_id]
    moved = world.area("main.ops.billing")
    fact = world.remember("main.ops.billing", "Invoices are cut on the first business day of the month.")
    ops_reader = world.keys[world.key("reader", "main.ops").principal_id]
    world.area("main.finance")
    caught_up(ctx, standby)
    standby.pause_replay()
    try:
        r = c.post(f"/v1/workareas/{moved}/reparent", json={"new_parent_id": world.workareas["main.finance"]},
                   headers=_h(admin_key))
        assert r.status_code == 200, r.text
        token = r.headers["OML-Read-After"]
        stale = c.get(f"/v1/claims/{fact['claim_id']}", headers=_h(ops_reader))
        assert stale.status_code == 200                      # the standby still holds main.ops.billing
        fresh = c.get(f"/v1/claims/{fact['claim_id']}", headers=_h(ops_reader, **{"OML-Read-After": token}))
        assert fresh.status_code == 404 and fresh.json()["code"] == "claim.not_found", fresh.text
    finally:
        standby.resume_replay()
    caught_up(ctx, standby)


def test_a_new_key_at_a_reused_path_is_not_served_the_old_subtree_a_lagging_standby_holds(world, ctx, rctx, standby):
    """With replay paused, ``main.vault`` (holding a claim) moves under ``main.attic``, a new ``main.vault`` is made and
    a new reader key is rooted there. The key's root path is ``main.vault`` on the primary; the standby still holds the
    old subtree at that path. The primary never had that key and that subtree at ``main.vault`` at the same time, so
    the standby must not serve it: the read resolves the key's roots in its own snapshot, where neither the key nor
    its root exists yet, and a standby that does not hold the key leaves the read to the primary
    (services/reads/scope.py). The newcomer has no token to wait with."""
    c = world.client
    admin_key = world.keys[world.admin.principal_id]
    vault = world.area("main.vault")
    attic = world.area("main.attic")
    secret = world.remember("main.vault", "The strongroom combination is kept in the sealed envelope.")
    world.index()
    query = {"query": "strongroom combination sealed envelope", "k": 5, "retriever": "fts"}
    caught_up(ctx, standby)
    assert secret["claim_id"] in _hits(c.post("/v1/recall", json=query, headers=_h(world.reader_key)))
    standby.pause_replay()
    try:
        moved = c.post(f"/v1/workareas/{vault}/reparent", json={"new_parent_id": attic}, headers=_h(admin_key))
        assert moved.status_code == 200, moved.text
        made = c.post("/v1/workareas", json={"label": "vault", "parent_id": world.root}, headers=_h(admin_key))
        assert made.status_code == 200, made.text
        new_vault = made.json()["node_id"]
        ident = ctx.tenancy.create_identity(world.admin, "person", "newcomer")["identity_id"]
        newcomer = ctx.tenancy.create_principal(world.admin, ident, "reader", [new_vault])["api_key"]
        assert authenticate(ctx.db, newcomer).root_paths == ("main.vault",)   # the primary's path for its root

        before = dict(rctx.db.read_counts)
        f = c.get(f"/v1/claims/{secret['claim_id']}", headers=_h(newcomer))
        assert f.status_code == 404 and f.json()["code"] == "claim.not_found", f.text
        assert "strongroom" not in f.text
        r = c.post("/v1/recall", json=query, headers=_h(newcomer))
        assert _hits(r) == [] and r.json()["diagnostics"]["scope"] == ["main.vault"] and "strongroom" not in r.text
        scoped = c.get(f"/v1/claims/{secret['claim_id']}", params={"workarea_id": new_vault}, headers=_h(newcomer))
        assert scoped.status_code == 404 and "strongroom" not in scoped.text
        counts = {k: v - before.get(k, 0) for k, v in rctx.db.read_counts.items()}
        # The standby does not hold the key yet: skipped for each read, which the primary answered from its state.
        assert counts.get("replica:0:behind") == 3 and counts.get("primary") == 3 and not counts.get("replica:0")
        # The standby's own snapshot resolves none of the newcomer's roots.
        newcomer_p = authenticate(ctx.db, newcomer)
        with rctx.db.read("oml_server", world.tenant, queries=[scope.root_paths_query(newcomer_p)]) as rtx:
            assert rtx.source == "replica:0" and rtx.rows[0] == []
        # The key that held the subtree before the move still reads it there: a state the primary had.
        stale = c.get(f"/v1/claims/{secret['claim_id']}", headers=_h(world.reader_key))
        assert stale.status_code == 200
    finally:
        standby.resume_replay()
    caught_up(ctx, standby)
    served = rctx.db.read_counts.get("replica:0", 0)
    f = c.get(f"/v1/claims/{secret['claim_id']}", headers=_h(newcomer))
    assert f.status_code == 404 and "strongroom" not in f.text
    r = c.post("/v1/recall", json=query, headers=_h(newcomer))
    assert _hits(r) == [] and r.json()["diagnostics"]["scope"] == ["main.vault"]    # its new, empty workarea only
    assert rctx.db.read_counts.get("replica:0", 0) - served == 2
    moved_back = c.get(f"/v1/claims/{secret['claim_id']}", headers=_h(world.reader_key))
    assert moved_back.status_code == 200 and moved_back.json()["workarea"]["path"] == "main.attic.vault"


def test_a_new_key_is_not_served_what_left_its_root_before_it_was_made(world, ctx, rctx, standby):
    """The root's node is the same on both sides here: ``main.depot.keys`` moves out to ``main.attic`` while replay is
    paused, then a reader key is made at ``main.depot``. The standby still holds ``main.depot.keys`` under that root,
    but the key never had it; the standby does not hold the key, so the primary answers."""
    c = world.client
    admin_key = world.keys[world.admin.principal_id]
    world.area("main.depot")
    attic = world.area("main.attic")
    child = world.area("main.depot.keys")
    secret = world.remember("main.depot.keys", "The depot padlock opens with the brass key on the blue ring.")
    world.index()
    caught_up(ctx, standby)
    standby.pause_replay()
    try:
        moved = c.post(f"/v1/workareas/{child}/reparent", json={"new_parent_id": attic}, headers=_h(admin_key))
        assert moved.status_code == 200, moved.text
        ident = ctx.tenancy.create_identity(world.admin, "person", "depot-newcomer")["identity_id"]
        newcomer = ctx.tenancy.create_principal(world.admin, ident, "reader", [world.workareas["main.depot"]])["api_key"]
        before = dict(rctx.db.read_counts)
        f = c.get(f"/v1/claims/{secret['claim_id']}", headers=_h(newcomer))
        assert f.status_code == 404 and "padlock" not in f.text, f.text
        r = c.post("/v1/recall", json={"query": "depot padlock brass key blue ring", "k": 5, "retriever": "fts"},
                   headers=_h(newcomer))
        assert _hits(r) == [] and "padlock" not in r.text
        assert rctx.db.read_counts.get("replica:0:behind", 0) - before.get("replica:0:behind", 0) == 2
    finally:
        standby.resume_replay()
    caught_up(ctx, standby)


def test_the_writes_a_standby_read_can_observe_answer_with_the_token(world, ctx, standby):
    """The stamped writes of docs/operations.md, "Read your writes", beyond claims and reviews; the access and
    policy acts no recall or fetch observes on a standby answer without it."""
    c = world.client
    admin_key = world.keys[world.admin.principal_id]
    operator_key = world.keys[world.key("operator").principal_id]
    reader = world.key("reader")

    def token_of(resp) -> str | None:
        assert resp.status_code == 200, resp.text
        return resp.headers.get("OML-Read-After")

    area = c.post("/v1/workareas", json={"label": "stamped", "parent_id": world.root}, headers=_h(admin_key))
    assert token_of(area)
    node = area.json()["node_id"]
    target = world.area("main.target")
    assert token_of(c.post(f"/v1/workareas/{node}/reparent", json={"new_parent_id": target}, headers=_h(admin_key)))
    assert token_of(c.post("/v1/erasures/subject", json={"kind": "customer_id", "value": "nobody-declared-this",
                                                         "reason": "data_subject_request"}, headers=_h(operator_key)))
    sim = c.post("/v1/simulations", json={"name": "stamped", "audience": [reader.principal_id]}, headers=_h(admin_key))
    assert token_of(sim) is None
    assert token_of(c.post(f"/v1/simulations/{sim.json()['simulation_id']}/close", headers=_h(admin_key)))

    fact = world.remember("main", "Held and released, never erased.")
    revoked = world.key("reader")
    for path, body, key in (
            (f"/v1/workareas/{node}/policy", {"pii_policy": "declare"}, admin_key),
            ("/v1/tenant/policy", {"phone_regions": ["DE"]}, admin_key),
            (f"/v1/principals/{revoked.principal_id}/revoke", None, admin_key),
            (f"/v1/claims/{fact['claim_id']}/hold", {"reason": "legal_request"}, operator_key),
            (f"/v1/claims/{fact['claim_id']}/hold/release", {"reason": "legal_request"}, operator_key)):
        assert token_of(c.post(path, json=body, headers=_h(key))) is None, path
    caught_up(ctx, standby)
