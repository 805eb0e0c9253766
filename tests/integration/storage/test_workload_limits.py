"""What one workload credential can cost other tenants (docs/security-model.md, "Locks and connections").

Each attack is made with the workload role's own credentials on a connection of its own: a lock held on a row or
table other acts need fails those acts within ``lock_timeout`` with ``503 service.unavailable`` (reason
``lock_timeout``) instead of stalling them, and another tenant's act is unaffected; no role can take a table lock
through a table-level UPDATE grant; each role's connections are capped (``pg_roles.rolconnlimit``); and the
server role can neither delete nor lower the integrity counters.
"""
from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from oml.services.entrypoints.http.app import create_app
from oml.services.runtime.context import Context
from oml.services.storage.db import WORKLOAD_ROLES, Database
from oml.services.storage.migrate import ROLE_CONNECTION_LIMIT, limit_connections

from support.admission import bearer, make_kit
from support.owner import owner

LOCK_MS = 300


@pytest.fixture(scope="module")
def fast(ctx):
    """The module's database, with workload connections that wait ``LOCK_MS`` for a lock."""
    db = Database(ctx.db.owner_url.render_as_string(hide_password=False), None, 2, lock_timeout_ms=LOCK_MS)
    c = Context(ctx.settings, db, ctx.keystore)
    yield c
    c.close()


@pytest.fixture(scope="module")
def kits(fast):
    return make_kit(fast, "limits-a"), make_kit(fast, "limits-b")


def _submit(client, kit, statement: str):
    return client.post("/v1/claims", json={"workarea_id": kit.root, "body": {"statement": statement}},
                       headers=bearer(kit.writer_key))


def test_a_chain_head_held_by_a_workload_fails_the_act_fast_and_spares_other_tenants(fast, kits):
    a, b = kits
    client = TestClient(create_app(fast), raise_server_exceptions=False)
    assert _submit(client, a, "Warm-up so the state is verified.").status_code == 200
    attacker = fast.db.engine("oml_admission").connect()
    pid = attacker.execute(sa.text("SELECT pg_backend_pid()")).scalar()
    attacker.commit()
    # Without a lock timeout the act would wait for as long as the attacker likes: end the attacker after a while,
    # so such a build fails this test (the act then succeeds late) instead of hanging it.
    def release() -> None:
        with owner(fast) as c:
            c.execute(sa.text("SELECT pg_terminate_backend(:p)"), {"p": pid})
    safety = threading.Timer(20, release)
    safety.start()
    try:
        tx = attacker.begin()
        attacker.execute(sa.text("SELECT set_config('oml.tenant_id', :t, true)"), {"t": a.tenant})
        attacker.execute(sa.text("SELECT seq FROM chain_heads WHERE tenant_id = :t FOR UPDATE"), {"t": a.tenant}).all()
        r = _submit(client, a, "Stalled behind a lock the attacker holds.")
        assert r.status_code == 503, r.text
        got = r.json()
        assert got["code"] == "service.unavailable" and got["reason"] == "lock_timeout", got
        assert r.headers["content-type"].startswith("application/problem+json") and r.headers["retry-after"]
        # Another tenant's act needs no row the attacker holds.
        assert _submit(client, b, "Another tenant writes on.").status_code == 200
        tx.rollback()
    finally:
        safety.cancel()
        attacker.close()
    assert _submit(client, a, "Written once the lock is gone.").status_code == 200


def test_the_lock_timeout_survives_the_checkout_reset(fast):
    eng = fast.db.engine("oml_server")
    with eng.connect() as c:
        assert c.execute(sa.text("SHOW lock_timeout")).scalar() == f"{LOCK_MS}ms"
        c.execute(sa.text("SET lock_timeout = 0"))  # a borrower's own setting
        c.commit()
    with eng.connect() as c:
        assert c.execute(sa.text("SHOW lock_timeout")).scalar() == f"{LOCK_MS}ms"


@pytest.mark.parametrize("role,table", [("oml_admission", "chain_heads"), ("oml_admission", "merkle_state"),
                                        ("oml_admission", "tenant_policies"), ("oml_lake_writer", "consumer_cursors"),
                                        ("oml_indexer", "consumer_cursors"), ("oml_server", "integrity_events")])
def test_no_workload_can_lock_a_shared_table_through_an_update_grant(fast, role, table):
    with pytest.raises(sa.exc.ProgrammingError, match="permission denied"):
        with fast.db.system(role) as c:
            c.execute(sa.text(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE"))


def test_each_workload_role_has_a_connection_limit(ctx):
    with owner(ctx) as c:
        limits = dict(c.execute(sa.text("SELECT rolname, rolconnlimit FROM pg_roles WHERE rolname = ANY(:r)"),
                                {"r": list(WORKLOAD_ROLES)}).all())
    assert limits == {r: ROLE_CONNECTION_LIMIT for r in WORKLOAD_ROLES}
    url = ctx.db.owner_url.render_as_string(hide_password=False)
    try:
        limit_connections(url, 7)
        with owner(ctx) as c:
            assert c.execute(sa.text("SELECT rolconnlimit FROM pg_roles WHERE rolname = 'oml_indexer'")).scalar() == 7
    finally:
        limit_connections(url, ROLE_CONNECTION_LIMIT)


def test_the_server_cannot_delete_or_lower_integrity_events(fast, kits):
    a, _ = kits
    with fast.db.tenant("oml_server", a.tenant) as c:
        c.execute(sa.text("INSERT INTO integrity_events (tenant_id, version_id, status_seq, reason, refusals)"
                          " VALUES (:t, gen_random_uuid(), 1, 'journal.hash', 3)"), {"t": a.tenant})
    for sql, err in [("DELETE FROM integrity_events WHERE tenant_id = :t", sa.exc.ProgrammingError),
                     ("TRUNCATE integrity_events", sa.exc.ProgrammingError),
                     ("UPDATE integrity_events SET reason = 'other' WHERE tenant_id = :t", sa.exc.ProgrammingError),
                     ("UPDATE integrity_events SET refusals = 0 WHERE tenant_id = :t", sa.exc.IntegrityError)]:
        with pytest.raises(err):
            with fast.db.tenant("oml_server", a.tenant) as c:
                c.execute(sa.text(sql), {"t": a.tenant})
    # The upsert the reads use still counts.
    with fast.db.tenant("oml_server", a.tenant) as c:
        c.execute(sa.text("UPDATE integrity_events SET refusals = refusals + 1, last_at = now() WHERE tenant_id = :t"),
                  {"t": a.tenant})
        assert c.execute(sa.text("SELECT sum(refusals) FROM integrity_events WHERE tenant_id = :t"), {"t": a.tenant}).scalar() == 4


def test_a_statement_past_its_limit_is_service_unavailable(ctx):
    from oml.services.storage import timeouts

    db = Database(ctx.db.owner_url.render_as_string(hide_password=False), None, 1, statement_timeout_ms=100)
    try:
        with pytest.raises(sa.exc.DBAPIError) as caught:
            with db.system("oml_server") as c:
                c.execute(sa.text("SELECT pg_sleep(5)"))
        refusal = timeouts.refusal(caught.value)
        assert refusal is not None and (refusal.code, refusal.status, refusal.extra) == (
            "service.unavailable", 503, {"reason": "statement_timeout"})
        assert timeouts.refusal(ValueError("not a database error")) is None
    finally:
        db.dispose()
