"""Containment by construction: no plaintext at rest, keyless roles, RLS, pool reset.

- A canary string submitted in bodies and notes appears in no column of any
  table (every column cast to text, bytea searched with ``position()``);
  neither does any private key of the tenant. A display name, which is
  stored in clear by design, is the positive control that the scan sees.
- Admission cannot read wrapped DEKs or ciphertext back; the lake-writer,
  reconciler, indexer and relay cannot read wrapped DEKs at all.
- Every workload role sees no tenant row when no tenant is bound, apart
  from the narrow, named exceptions below.
- A pooled connection returns with no tenant setting; its reset keeps only prepared statements, and a
  dead one is replaced.
"""
from __future__ import annotations

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from oml.services.entrypoints.http.app import create_app
from oml.services.storage.db import WORKLOAD_ROLES, Database

from support.admission import bearer, make_kit, owner
from support.owner import temporary_tables

CANARY = "qx-canary-5d0e9b21"
DISPLAY = "qx-display-name-83c1"

# Policies that show rows with no tenant bound, by (table, role); each exposes ids only
# (services/storage/sql/90_rls.sql). A new entry here is a security review, not a fix.
EXCEPTIONS = {
    ("principal_directory", "oml_server"), ("principal_directory", "oml_admission"),
    ("tenants", "oml_server"), ("tenants", "oml_lake_writer"), ("tenants", "oml_reconciler"),
    ("tenants", "oml_indexer"), ("tenants", "oml_relay"), ("outbox", "oml_relay"),
    # The NOLOGIN owner of the SECURITY DEFINER full-text search function, which takes the
    # tenant from the bound setting and names it in its own WHERE (60_search.sql).
    ("memories_fts", "oml_search"),
    # Its twin over simulation partitions (65_simulations.sql): same construction, and it also restricts to
    # open simulations of the bound tenant among the ids the server passes (docs/simulations.md).
    ("sim_memories_fts", "oml_search"),
    # The bounded BM25 search's maintained statistics and postings (63_bm25_postings.sql): read only by
    # oml_bm25_topk, the same construction, the tenant taken from the binding and named in its own WHERE.
    ("bm25_groups", "oml_search"), ("bm25_df", "oml_search"), ("bm25_postings", "oml_search"),
}


@pytest.fixture(scope="module")
def kit(ctx):
    k = make_kit(ctx, "sec")
    c = TestClient(create_app(ctx))
    c.post("/v1/identities", json={"kind": "person", "display_name": DISPLAY}, headers=bearer(k.admin_key))
    body = {"statement": f"the secret word is {CANARY}", "subject": CANARY, "tags": [CANARY],
            "source": {"title": CANARY, "uri": f"https://example.org/{CANARY}", "locator": CANARY}}
    v = c.post("/v1/claims", json={"workarea_id": k.root, "body": body}, headers=bearer(k.writer_key) | {"Idempotency-Key": "canary"}).json()
    c.post("/v1/claims:batch", json={"claims": [{"workarea_id": k.root, "body": {"statement": CANARY * 3}}] * 2},
           headers=bearer(k.writer_key))
    # Refused writes must leave nothing either.
    c.post("/v1/claims", json={"workarea_id": k.root, "body": {"statement": f"{CANARY} mail ann@example.com"}}, headers=bearer(k.writer_key))
    c.post("/v1/claims", json={"workarea_id": k.root, "body": {"statement": CANARY, "x": 1.5}}, headers=bearer(k.writer_key))
    assert len(c.get("/v1/review-queue", headers=bearer(k.reviewer_key)).json()["items"]) == 3
    c.get("/v1/own-work", params={"decrypt": "true"}, headers=bearer(k.writer_key))
    r = c.post(f"/v1/versions/{v['version_id']}/review", json={"decision": "promote", "reason": "accurate", "note": f"note {CANARY}"},
               headers=bearer(k.reviewer_key))
    assert r.status_code == 200
    return k


def _scan(ctx, tenant: str, needles_text: list[str], needles_bytes: list[bytes]) -> list[str]:
    hits = []
    with owner(ctx, tenant) as c:
        cols = c.execute(sa.text(
            "SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod) AS type FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_attribute a ON a.attrelid = c.oid"
            " WHERE n.nspname = 'public' AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped ORDER BY 1, 2")).all()
        assert len({x.relname for x in cols}) > 20
        for rel, col, typ in cols:
            if typ == "bytea":
                for b in needles_bytes:
                    if c.execute(sa.text(f'SELECT count(*) FROM "{rel}" WHERE position(:b in "{col}") > 0'), {"b": b}).scalar():
                        hits.append(f"{rel}.{col}")
            else:
                for s in needles_text:
                    if c.execute(sa.text(f'SELECT count(*) FROM "{rel}" WHERE strpos(CAST("{col}" AS text), :s) > 0'), {"s": s}).scalar():
                        hits.append(f"{rel}.{col}")
    return hits


def test_canary_appears_in_no_column(ctx, kit):
    found = _scan(ctx, kit.tenant, [CANARY, DISPLAY], [CANARY.encode(), DISPLAY.encode()])
    # The display name is operator-supplied and stored in clear (docs/security-model.md): the scan sees it.
    assert found == ["identities.display_name"]


def test_no_private_key_in_any_column(ctx, kit):
    secrets = [ctx.keystore.get(kit.tenant, n) for n in ctx.keystore.names(kit.tenant)]
    secrets.append(bytes.fromhex(kit.recovery))
    assert len(secrets) >= 4  # signing, encryption, subject-hmac, query-hmac, recovery
    assert _scan(ctx, kit.tenant, [s.hex() for s in secrets], secrets) == []


def _refused(ctx, role: str, tenant: str, sql: str) -> bool:
    try:
        with ctx.db.tenant(role, tenant) as c:
            c.execute(sa.text(sql), {"t": tenant})
    except sa.exc.ProgrammingError as exc:
        return "permission denied" in str(exc.orig)
    return False


def test_keyless_roles_cannot_read_wrapped_deks(ctx, kit):
    t = kit.tenant
    assert _refused(ctx, "oml_admission", t, "SELECT wrapped FROM wrapped_deks WHERE tenant_id = :t")
    assert _refused(ctx, "oml_admission", t, "SELECT * FROM wrapped_deks WHERE tenant_id = :t")
    assert _refused(ctx, "oml_admission", t, "SELECT ciphertext FROM artifacts WHERE tenant_id = :t")
    for role in ("oml_lake_writer", "oml_reconciler", "oml_indexer", "oml_relay"):
        if role != "oml_reconciler":  # it sees which artifacts have a DEK (tenant_id, artifact_id), to report one destroyed
            assert _refused(ctx, role, t, "SELECT count(*) FROM wrapped_deks WHERE tenant_id = :t"), role
        assert _refused(ctx, role, t, "SELECT key_version FROM wrapped_deks WHERE tenant_id = :t"), role
        assert _refused(ctx, role, t, "SELECT wrapped FROM wrapped_deks WHERE tenant_id = :t"), role
        assert _refused(ctx, role, t, "SELECT * FROM wrapped_deks WHERE tenant_id = :t"), role
    with ctx.db.tenant("oml_server", t) as c:  # the one role that unwraps
        assert c.execute(sa.text("SELECT count(wrapped) FROM wrapped_deks WHERE tenant_id = :t"), {"t": t}).scalar() >= 4


def test_roles_see_nothing_without_a_tenant(ctx, kit):
    with owner(ctx) as c:
        tables = c.execute(sa.text(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'tenant_id' AND NOT a.attisdropped"
            " WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND NOT c.relispartition ORDER BY 1")).scalars().all()
        policies = {(r.tablename, role) for r in c.execute(sa.text(
            "SELECT tablename, roles FROM pg_policies WHERE schemaname = 'public' AND policyname <> 'tenant_isolation'"
            " AND permissive = 'PERMISSIVE'")).all()
            for role in r.roles}
    assert policies <= EXCEPTIONS, sorted(policies - EXCEPTIONS)
    checked = 0
    for role in WORKLOAD_ROLES:
        for t in tables:
            with ctx.db.system(role) as c:
                can = c.execute(sa.text("SELECT has_column_privilege(current_user, CAST(:t AS regclass), 'tenant_id', 'SELECT')"),
                                {"t": f"public.{t}"}).scalar()
                if not can or (t, role) in policies:
                    continue
                assert c.execute(sa.text("SELECT current_setting('oml.tenant_id', true)")).scalar() in (None, "")
                n = c.execute(sa.text(f'SELECT count(tenant_id) FROM "{t}"')).scalar()
                assert n == 0, (role, t)
                checked += 1
    assert checked > 40
    # And with the tenant bound the same role does see the rows (the check above is not vacuous).
    with ctx.db.tenant("oml_server", kit.tenant) as c:
        assert c.execute(sa.text("SELECT count(*) FROM claim_versions WHERE tenant_id = :t"), {"t": kit.tenant}).scalar() == 3


def test_pooled_connection_carries_no_tenant(db_url, kit):
    # Used one borrower at a time, the pool holds one physical connection: the next borrower gets it back.
    db = Database(db_url, None, pool_size=1)
    try:
        with db.tenant("oml_server", kit.tenant) as c:
            pid = c.execute(sa.text("SELECT pg_backend_pid()")).scalar()
            # Attempts to make something outlive the transaction.
            c.execute(sa.text("SELECT set_config('oml.tenant_id', :t, false)"), {"t": kit.tenant})
            c.execute(sa.text("SET application_name = 'leaky'"))
        with db.system("oml_server") as c:
            assert c.execute(sa.text("SELECT pg_backend_pid()")).scalar() == pid
            assert c.execute(sa.text("SELECT current_setting('oml.tenant_id', true)")).scalar() in (None, "")
            assert c.execute(sa.text("SHOW application_name")).scalar() != "leaky"
            assert c.execute(sa.text("SELECT count(*) FROM claims")).scalar() == 0
        with pytest.raises(RuntimeError):
            with db.tenant("oml_server", kit.tenant) as c:
                c.execute(sa.text("SELECT set_config('oml.tenant_id', :t, false)"), {"t": kit.tenant})
                raise RuntimeError("abort mid-transaction")
        with db.system("oml_server") as c:
            assert c.execute(sa.text("SELECT pg_backend_pid()")).scalar() == pid
            assert c.execute(sa.text("SELECT current_setting('oml.tenant_id', true)")).scalar() in (None, "")
    finally:
        db.dispose()


@pytest.fixture
def role_temporary_tables(ctx, role):
    """``role`` allowed temporary tables for one test, as where 98_public_privileges.sql could not run."""
    with temporary_tables(ctx, role):
        yield


@pytest.mark.parametrize("role", ["oml_server", "oml_admission"])  # admission's reset also opens its transaction
def test_pooled_connection_reset_keeps_only_prepared_statements(db_url, kit, role, role_temporary_tables):
    """The checkout reset is DISCARD ALL but for prepared statements (services/storage/db.py): a temporary
    table (the role allowed them here, as where 98_public_privileges.sql could not run), a held cursor, a listener, a
    session advisory lock and a session setting are gone for the next borrower; a statement prepared on purpose is
    still there, sees nothing with no tenant bound, and sees the tenant's rows only in a transaction bound to it."""
    db = Database(db_url, None, pool_size=1)
    watch = sa.create_engine(db_url)  # the owner, who sees every backend's locks and may end one
    try:
        with db.tenant(role, kit.tenant) as c:
            pid = c.execute(sa.text("SELECT pg_backend_pid()")).scalar()
            c.execute(sa.text("CREATE TEMP TABLE leak (x int)"))
            c.execute(sa.text("DECLARE held CURSOR WITH HOLD FOR SELECT 1"))
            c.execute(sa.text("LISTEN leak_channel"))
            c.execute(sa.text("SELECT pg_advisory_lock(4242)"))
            c.execute(sa.text("SET work_mem = '7MB'"))
            dc = c.connection.driver_connection
            dc.cursor().execute("SELECT count(*) FROM claims WHERE tenant_id = %(t)s", {"t": kit.tenant}, prepare=True)
        with db.system(role) as c:
            assert c.execute(sa.text("SELECT pg_backend_pid()")).scalar() == pid
            assert c.execute(sa.text("SELECT count(*) FROM pg_class WHERE relname = 'leak' AND relpersistence = 't'")).scalar() == 0
            assert c.execute(sa.text("SELECT count(*) FROM pg_cursors")).scalar() == 0
            assert c.execute(sa.text("SELECT count(*) FROM pg_listening_channels()")).scalar() == 0
            assert c.execute(sa.text("SHOW work_mem")).scalar() != "7MB"
            with watch.connect() as w:
                assert w.execute(sa.text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = :p"), {"p": pid}).scalar() == 0
            assert c.execute(sa.text("SELECT count(*) FROM pg_prepared_statements")).scalar() == 1
            # The kept statement names the tenant in its parameters and RLS reads the binding when it runs:
            # with no tenant bound it sees nothing.
            cur = c.connection.driver_connection.cursor()
            cur.execute("SELECT count(*) FROM claims WHERE tenant_id = %(t)s", {"t": kit.tenant}, prepare=True)
            assert cur.fetchone()[0] == 0
        with db.tenant(role, kit.tenant) as c:
            assert c.execute(sa.text("SELECT pg_backend_pid()")).scalar() == pid
            cur = c.connection.driver_connection.cursor()
            cur.execute("SELECT count(*) FROM claims WHERE tenant_id = %(t)s", {"t": kit.tenant}, prepare=True)
            assert cur.fetchone()[0] == c.execute(sa.text("SELECT count(*) FROM claims")).scalar() > 0
    finally:
        db.dispose()
        watch.dispose()


def test_a_statement_planted_under_psycopgs_name_does_not_reach_the_next_borrower(db_url, ctx, kit):
    """A borrower with SQL on admission's pooled connection swaps admission's prepared claims statement (psycopg's
    _pg3_N) for a no-op of the same parameter types. The next checkout sees a statement made with SQL's PREPARE and
    drops every prepared statement (psycopg forgets its own): the next submit writes its claim rows (before, it
    returned its items and wrote none)."""
    from oml.services.claims.admission import Submission
    from oml.services.runtime.auth import authenticate
    from oml.services.runtime.context import Context

    db = Database(db_url, None, pool_size=1)
    adm = Context(ctx.settings, db, ctx.keystore).admission
    try:
        w = authenticate(db, kit.writer_key)
        adm.submit(w, [Submission(kit.root, {"statement": f"plant {i}"}) for i in range(3)])
        with db.engine("oml_admission").connect() as conn:
            target = conn.execute(sa.text(
                "SELECT name, (SELECT string_agg(format_type(x, NULL), ',') FROM unnest(parameter_types) x) AS types"
                " FROM pg_prepared_statements WHERE statement LIKE '%INSERT INTO claims%'")).one()
            conn.commit()
            n = len(target.types.split(","))
            dc = conn.connection.driver_connection
            dc.autocommit = True
            dc.execute(f"SELECT 1; DEALLOCATE {target.name}; PREPARE {target.name} ({target.types}) AS SELECT "
                       + ", ".join(f"${i + 1}" for i in range(n)) + " WHERE false")
            dc.autocommit = False
        out = adm.submit(w, [Submission(kit.root, {"statement": f"after the plant {i}"}) for i in range(3)])["items"]
        with db.engine(None).connect() as c:
            got = c.execute(sa.text("SELECT count(*) FROM claims WHERE claim_id = ANY(CAST(:ids AS uuid[]))"),
                            {"ids": [i["claim_id"] for i in out]}).scalar()
        assert got == 3
    finally:
        db.dispose()


@pytest.mark.parametrize("role", ["oml_server", "oml_admission"])
def test_a_dead_pooled_connection_is_replaced_at_checkout(db_url, kit, role):
    """The reset is the liveness check: a backend terminated while its connection sat in the pool is replaced."""
    db = Database(db_url, None, pool_size=1)
    watch = sa.create_engine(db_url)  # the owner, who sees every backend's locks and may end one
    try:
        with db.tenant(role, kit.tenant) as c:
            pid = c.execute(sa.text("SELECT pg_backend_pid()")).scalar()
        with watch.begin() as w:
            assert w.execute(sa.text("SELECT pg_terminate_backend(:p)"), {"p": pid}).scalar()
        with db.tenant(role, kit.tenant) as c:
            assert c.execute(sa.text("SELECT pg_backend_pid()")).scalar() != pid
            assert c.execute(sa.text("SELECT current_setting('oml.tenant_id')")).scalar() == kit.tenant
    finally:
        db.dispose()
        watch.dispose()


@pytest.mark.parametrize(("role", "isolation"), [("oml_admission", None), ("oml_server", None),  # BEGIN_AT_CHECKOUT
                                                 ("oml_server", "REPEATABLE READ")])  # a read's, a snapshot's
def test_admission_checks_out_inside_a_transaction_at_its_engines_level(db_url, ctx, kit, role, isolation,
                                                                         role_temporary_tables):
    """Admission's and the server's connections leave the pool inside a transaction opened in the reset's own round
    trip, at the engine's level (READ COMMITTED, or REPEATABLE READ for a read's and a snapshot's engine), read-write,
    whatever defaults a borrower planted in the session, with the reset committed before it: a planted setting,
    session tenant binding, temporary table (the role allowed them here), held cursor and listener are gone in that
    transaction and stay gone after a rollback on the same checkout; a submit and a recall work after the planted
    defaults; other roles' connections leave the pool idle."""
    from psycopg import pq

    from oml.services.claims.admission import Submission
    from oml.services.reads.recall import Recaller, RecallRequest
    from oml.services.runtime.auth import authenticate
    from oml.services.runtime.context import Context

    from support.recall import constant_vector

    db = Database(db_url, None, pool_size=1)
    adm = Context(ctx.settings, db, ctx.keystore).admission
    state = sa.text("SELECT current_setting('transaction_isolation'), current_setting('transaction_read_only'),"
                    " current_setting('default_transaction_read_only'), current_setting('work_mem') <> '7MB',"
                    " current_setting('oml.tenant_id', true) IS DISTINCT FROM :t, to_regclass('pg_temp.leak') IS NULL,"
                    " (SELECT count(*) FROM pg_cursors WHERE is_holdable), (SELECT count(*) FROM pg_listening_channels())")
    clean = ((isolation or "read committed").lower(), "off", "off", True, True, True, 0, 0)
    try:
        with db.engine(role, isolation=isolation).connect() as conn:
            dc = conn.connection.driver_connection
            assert dc.pgconn.transaction_status == pq.TransactionStatus.INTRANS
            dc.rollback()
            dc.autocommit = True
            dc.execute("CREATE TEMP TABLE leak (x int); DECLARE held CURSOR WITH HOLD FOR SELECT 1; SET work_mem = '7MB';"
                       " LISTEN leak_channel; SET default_transaction_isolation = 'repeatable read';"
                       " SET default_transaction_read_only = on")
            dc.execute("SELECT set_config('oml.tenant_id', %s, false)", (kit.tenant,))
            dc.autocommit = False
        with db.engine(role, isolation=isolation).connect() as conn:
            assert conn.connection.driver_connection.pgconn.transaction_status == pq.TransactionStatus.INTRANS
            assert tuple(conn.execute(state, {"t": kit.tenant}).one()) == clean
            conn.rollback()  # and the same checkout again: the reset was committed on its own
            assert tuple(conn.execute(state, {"t": kit.tenant}).one()) == clean
            conn.rollback()
        out = adm.submit(authenticate(db, kit.writer_key), [Submission(kit.root, {"statement": "after the planted defaults"})])
        assert len(out["items"]) == 1
        got = Recaller(Context(ctx.settings, db, ctx.keystore), embed=constant_vector).recall(
            authenticate(db, kit.reviewer_key), RecallRequest(query="planted defaults", retriever="fts"))
        assert got["diagnostics"]["returned"]["steering"] == 0  # answered, and its read-log row committed
        for eng in (db.engine("oml_indexer"), db.engine("oml_indexer", isolation="REPEATABLE READ")):
            with eng.connect() as conn:
                assert conn.connection.driver_connection.pgconn.transaction_status == pq.TransactionStatus.IDLE
    finally:
        db.dispose()


def test_the_prepared_opening_lookups_read_only_the_bound_tenant(db_url, ctx, kit):
    """A submit's opening lookups (head lock, signing and encryption keys, workarea, phone regions) are prepared on
    the connection and kept across checkouts. On one pooled connection, after a submit
    into this tenant, another tenant's writer naming this tenant's root workarea is refused as not found: the kept
    workarea lookup runs under the other tenant's binding, which RLS applies when it runs; and that tenant's own
    submit lands in its own chain."""
    from oml.domain.errors import OMLError
    from oml.services.claims.admission import Submission
    from oml.services.runtime.auth import authenticate
    from oml.services.runtime.context import Context

    other = make_kit(ctx, "sec-prepared")
    db = Database(db_url, None, pool_size=1)
    adm = Context(ctx.settings, db, ctx.keystore).admission
    try:
        mine, theirs = authenticate(db, kit.writer_key), authenticate(db, other.writer_key)
        adm.submit(mine, [Submission(kit.root, {"statement": "prepared lookups"})])
        with db.engine("oml_admission").connect() as conn:
            kept = conn.execute(sa.text("SELECT statement FROM pg_prepared_statements")).scalars().all()
            conn.rollback()
        assert any("FROM chain_heads" in s and "FOR UPDATE" in s for s in kept)
        assert any("FROM workareas" in s for s in kept)
        with pytest.raises(OMLError) as err:
            adm.submit(theirs, [Submission(kit.root, {"statement": "into another tenant's workarea"})])
        assert err.value.code == "workarea.not_found"
        out = adm.submit(theirs, [Submission(other.root, {"statement": "into its own"})])["items"]
        with db.engine(None).connect() as c:
            owner_of = c.execute(sa.text("SELECT tenant_id FROM claims WHERE claim_id = CAST(:c AS uuid)"),
                                 {"c": out[0]["claim_id"]}).scalar()
        assert owner_of == other.tenant
    finally:
        db.dispose()
