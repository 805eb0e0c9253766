"""The folded read path under failure (docs/recall.md, "Latency"; docs/readlog.md): tenants the binding must quote
exactly, a connection lost or a read-log row refused on the simple queries sent around psycopg (``BEGIN`` with the
binding, the read-log row with ``COMMIT``). What is checked: the error is the class psycopg would raise for the same
failure (so SQLAlchemy's mapping and the 503 refusals keyed on SQLSTATE read it alike), no statement text or value
in it, nothing committed, and the pool's next borrower gets a clean, unbound connection."""
from __future__ import annotations

import os
import socket

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from oml.services.entrypoints.http.app import create_app
from oml.services.reads.bodies import log_read
from oml.services.reads.recall import RecallRequest
from oml.services.storage import timeouts

from support.owner import owner
from support.recall import leg_calls, read_events, reader_world


@pytest.fixture(scope="module")
def world(ctx):
    return reader_world(ctx, "readfail", ["The glacier survey measured less ice than planned."])


@pytest.fixture
def refusing_trigger(ctx):
    """Install a BEFORE INSERT trigger on ``read_events`` raising the given SQLSTATE with a message that quotes the
    row's principal (what a server message may do); dropped after the test."""
    def install(state: str) -> None:
        with owner(ctx) as o:
            o.execute(sa.text("CREATE OR REPLACE FUNCTION readfail_refuse() RETURNS trigger LANGUAGE plpgsql AS $$"
                              f" BEGIN RAISE EXCEPTION 'refused %', NEW.principal_id USING ERRCODE = '{state}'; END $$"))
            o.execute(sa.text("CREATE TRIGGER readfail_refuse BEFORE INSERT ON read_events FOR EACH ROW"
                              " EXECUTE FUNCTION readfail_refuse()"))
    yield install
    with owner(ctx) as o:
        o.execute(sa.text("DROP TRIGGER IF EXISTS readfail_refuse ON read_events"))


def _bound(ctx) -> str | None:
    with ctx.db.system("oml_server") as conn:
        return conn.execute(sa.text("SELECT current_setting('oml.tenant_id', true)")).scalar()


@pytest.mark.parametrize("tenant", ["a\\b", "a\\'b", "'", "\\", "ünï—cødé 🧊", "x" * 5000, "a;b", "$$x$$", "E'a'"])
def test_an_odd_tenant_binds_exactly_and_leaves_nothing_behind(ctx, tenant):
    with ctx.db.tenant("oml_server", tenant) as conn:
        assert conn.execute(sa.text("SELECT current_setting('oml.tenant_id')")).scalar() == tenant
    assert _bound(ctx) in (None, "")


def test_a_nul_in_a_tenant_is_refused_never_bound_as_its_prefix(ctx):
    with pytest.raises(sa.exc.DataError):
        with ctx.db.tenant("oml_server", "readfail\x00other"):
            pass
    assert _bound(ctx) in (None, "")


def _lose(ctx, conn, how: str) -> None:
    if how == "terminated":
        pid = conn.execute(sa.text("SELECT pg_backend_pid()")).scalar()
        with owner(ctx) as o:
            o.execute(sa.text("SELECT pg_terminate_backend(:p)"), {"p": pid})
    else:  # the socket breaks under libpq: no message from the server, so no SQLSTATE
        conn.execute(sa.text("SELECT 1"))
        s = socket.socket(fileno=os.dup(conn.connection.driver_connection.pgconn.socket))
        s.shutdown(socket.SHUT_RD)
        s.close()


@pytest.mark.parametrize("how", ["terminated", "broken_socket"])
def test_a_connection_lost_at_the_read_log_commit_is_an_operational_error(world, ctx, how):
    p = world.reader
    before = len(read_events(ctx, world.tenant))
    raised: list[BaseException] = []
    with pytest.raises(sa.exc.DBAPIError):
        with ctx.db.tenant("oml_server", world.tenant) as conn:
            _lose(ctx, conn, how)
            try:
                log_read(conn, world.tenant, principal_id=p.principal_id, identity_id=p.identity_id, role=p.role,
                         op="recall", claim_ids=[], commit=True)
            except BaseException as exc:  # the context's rollback raises its own error over this one
                raised.append(exc)
                raise
    # psycopg raises OperationalError for a lost connection; SQLAlchemy's OperationalError follows from it
    assert raised and isinstance(raised[0], sa.exc.OperationalError), raised
    assert "INSERT" not in str(raised[0]) and p.principal_id not in str(raised[0])
    # a terminated backend never ran the row; a socket broken under the reply may have committed it (a commit whose
    # answer never came): the read is withheld either way
    assert len(read_events(ctx, world.tenant)) in ((before,) if how == "terminated" else (before, before + 1))
    for _ in range(6):  # the pool replaced the dead connection; every borrower starts bound to its own tenant
        with ctx.db.tenant("oml_server", "readfail-next") as conn:
            assert conn.execute(sa.text("SELECT current_setting('oml.tenant_id')")).scalar() == "readfail-next"


@pytest.mark.parametrize("state,cls,reason", [
    ("40P01", sa.exc.OperationalError, "deadlock"), ("55P03", sa.exc.OperationalError, "lock_timeout"),
    ("57014", sa.exc.OperationalError, "statement_timeout"), ("42501", sa.exc.ProgrammingError, None),
    # a code psycopg has no class for: its class's base, as psycopg raises it (40: transaction rollback)
    ("40X99", sa.exc.OperationalError, None)])
def test_a_refused_read_log_row_withholds_the_recall(world, ctx, refusing_trigger, state, cls, reason):
    refusing_trigger(state)
    before = len(read_events(ctx, world.tenant))
    with pytest.raises(sa.exc.DBAPIError) as e:
        world.recaller.recall(world.reader, RecallRequest(query="glacier survey", retriever="hybrid", k=3))
    assert type(e.value) is cls and e.value.orig.sqlstate == state if state != "40X99" else type(e.value) is cls
    refusal = timeouts.refusal(e.value)
    assert (refusal.extra["reason"] if refusal else None) == reason
    text = str(e.value)
    assert "refused " + world.reader.principal_id not in text and "INSERT" not in text and "glacier" not in text
    assert len(read_events(ctx, world.tenant)) == before
    assert _bound(ctx) in (None, "")


def test_a_deadlock_at_the_read_log_row_is_a_503_over_http(world, ctx, refusing_trigger):
    refusing_trigger("40P01")
    key = world.keys[world.reader.principal_id]
    client = TestClient(create_app(ctx), raise_server_exceptions=False)
    r = client.post("/v1/recall", json={"query": "glacier survey", "k": 3}, headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 503, r.text
    got = r.json()
    assert got["code"] == "service.unavailable" and got["reason"] == "deadlock", got
    assert r.headers["retry-after"] and "glacier" not in r.text and "INSERT" not in r.text


def test_every_http_read_withholds_its_answer_when_its_read_log_row_is_refused(world, ctx, refusing_trigger):
    """Fetch by claim and by version, lineage, the journal page: the same 503 as recall, nothing logged."""
    claim = world.remember("main", "The moraine survey found older ice under the snout.")
    auditor = world.keys[world.key("auditor").principal_id]
    reader = world.keys[world.reader.principal_id]
    client = TestClient(create_app(ctx), raise_server_exceptions=False)
    paths = [(f"/v1/claims/{claim['claim_id']}", reader), (f"/v1/versions/{claim['version_id']}", reader),
             (f"/v1/claims/{claim['claim_id']}/lineage", reader), ("/v1/journal?limit=2", auditor)]
    for path, key in paths:  # served before the refusal
        assert client.get(path, headers={"Authorization": f"Bearer {key}"}).status_code == 200, path
    refusing_trigger("40P01")
    before = len(read_events(ctx, world.tenant))
    for path, key in paths:
        r = client.get(path, headers={"Authorization": f"Bearer {key}"})
        assert r.status_code == 503 and r.json()["reason"] == "deadlock", (path, r.text)
        assert "moraine" not in r.text
    assert len(read_events(ctx, world.tenant)) == before


def test_nothing_runs_on_a_connection_after_its_read_log_row_committed(world, ctx):
    """log_read(commit=True) ends the transaction on the server; a statement sent after it would otherwise open a
    new transaction with no tenant bound, which the caller's context would then commit."""
    p = world.reader
    with pytest.raises(sa.exc.InvalidRequestError):
        with ctx.db.tenant("oml_server", world.tenant) as conn:
            log_read(conn, world.tenant, principal_id=p.principal_id, identity_id=p.identity_id, role=p.role,
                     op="recall", claim_ids=[], commit=True)
            assert not conn.in_transaction()  # SQLAlchemy's idea of the transaction is the server's
            conn.execute(sa.text("SELECT current_setting('oml.tenant_id', true)"))
    assert _bound(ctx) in (None, "")


@pytest.mark.parametrize("leg", ["lexical", "vector"])
def test_a_leg_past_the_statement_limit_is_a_503_that_logs_nothing(world, ctx, monkeypatch, leg):
    """The legs' statements go to psycopg directly (services/storage/pipelined.py), not through SQLAlchemy's execute:
    a leg cancelled at ``statement_timeout`` is still the 503 any statement past its limit is, quoting neither the
    statement nor the query, with nothing logged and the pooled connection left unbound."""
    from oml.services.runtime.context import Context
    from oml.services.storage.db import Database

    leg_calls(monkeypatch, leg, "pg_sleep(5)")
    db = Database(ctx.db.owner_url.render_as_string(hide_password=False), None, 1, statement_timeout_ms=300)
    try:
        limited = Context(ctx.settings, db, ctx.keystore)
        before = len(read_events(ctx, world.tenant))
        client = TestClient(create_app(limited), raise_server_exceptions=False)
        r = client.post("/v1/recall", json={"query": "glacier survey", "k": 3},
                        headers={"Authorization": f"Bearer {world.keys[world.reader.principal_id]}"})
        assert r.status_code == 503, r.text
        assert r.json()["code"] == "service.unavailable" and r.json()["reason"] == "statement_timeout", r.text
        assert "glacier" not in r.text and "pg_sleep" not in r.text and "SELECT" not in r.text
        assert len(read_events(ctx, world.tenant)) == before
        with db.system("oml_server") as conn:
            assert conn.execute(sa.text("SELECT current_setting('oml.tenant_id', true)")).scalar() in (None, "")
    finally:
        db.dispose()
