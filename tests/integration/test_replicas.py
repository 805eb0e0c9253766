"""Reads from a real PostgreSQL hot standby (issue 16, item 1).

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

from oml.services.admission.service import Submission
from oml.services.auth import authenticate

from replica_kit import caught_up, in_recovery, replica_context, start_standby


@pytest.fixture(scope="module")
def standby(pg_server, tmp_path_factory):
    sb = start_standby(pg_server, tmp_path_factory.mktemp("standby"))
    yield sb
    sb.stop()


@pytest.fixture(scope="module")
def rctx(ctx, standby):
    c = replica_context(ctx, standby)
    yield c
    c.db.dispose()


@pytest.fixture(scope="module")
def tenants(ctx):
    out = {}
    for t in ("rep-a", "rep-b"):
        created = ctx.admission.create_tenant(t)
        out[t] = (created, authenticate(ctx.db, created.admin_key))
    return out


def _count_claims(conn, tenant):
    return conn.execute(sa.text("SELECT count(*) FROM claims WHERE tenant_id = :t"), {"t": tenant}).scalar()


def _submit(ctx, tenants, tenant, statement):
    created, admin = tenants[tenant]
    adm = ctx.admission
    ident = adm.create_identity(admin, "service", "w")["identity_id"]
    writer = authenticate(ctx.db, adm.create_principal(admin, ident, "writer", [created.root_workarea])["api_key"])
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


def test_a_promoted_standby_keeps_serving(ctx, pg_server, tmp_path_factory, tenants):
    # A second standby of its own: promoting it must not disturb the module's first one.
    from replica_kit import start_standby as start

    sb = start(pg_server, tmp_path_factory.mktemp("promoted"), port=5434)
    try:
        caught_up(ctx, sb)
        c = replica_context(ctx, sb)
        sb.promote()
        with c.db.read("oml_server", "rep-a") as rtx:
            assert rtx.source == "replica:0" and not in_recovery(rtx.conn)
            assert _count_claims(rtx.conn, "rep-a") == 1
        c.db.dispose()
    finally:
        sb.stop()
