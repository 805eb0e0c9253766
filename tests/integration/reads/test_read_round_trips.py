"""The read path's round trips folded together, the answers unchanged (docs/recall.md, "Latency"): BEGIN in the
checkout's reset, the tenant binding with the recall's opening statements, the candidates' rows with the valid-time
count, the read-log row with COMMIT. No timing is asserted: what is checked is what each fold must keep (binding,
transaction, quoting, atomicity, the read log)."""
from __future__ import annotations

import os
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
import sqlalchemy as sa
from psycopg import pq
from sqlalchemy import event

from oml.domain.errors import OMLError
from oml.services.reads.bodies import log_read
from oml.services.reads.fetch import fetch
from oml.services.reads.recall import Recaller, RecallRequest
from oml.services.storage import pipelined
from oml.services.storage.db import SNAPSHOT_ISOLATION

from support.recall import constant_vector, read_events, reader_world


@pytest.fixture(scope="module")
def world(ctx):
    return reader_world(ctx, "rtrips", [f"The glacier survey number {i} measured 50% less ice than planned." for i in range(4)])


def _status(conn: sa.Connection) -> pq.TransactionStatus:
    return conn.connection.driver_connection.pgconn.transaction_status


def test_a_tenant_transaction_opens_bound_to_its_tenant_quoted_exactly(ctx):
    odd = "o'hara'); SELECT set_config('oml.tenant_id', 'other', false); --"
    with ctx.db.tenant("oml_server", odd) as conn:
        assert _status(conn) == pq.TransactionStatus.INTRANS
        assert conn.execute(sa.text("SELECT current_setting('oml.tenant_id')")).scalar() == odd
    # transaction-local: the next borrower of the pool starts unbound
    with ctx.db.system("oml_server") as conn:
        assert conn.execute(sa.text("SELECT current_setting('oml.tenant_id', true)")).scalar() in (None, "")


def test_bound_queries_still_run_after_the_binding(ctx):
    with ctx.db.bound("oml_server", "t-bound", [pipelined.Query("SELECT current_setting('oml.tenant_id') AS t", {})]) as (
            conn, rows):
        assert rows[0][0].t == "t-bound"


def test_a_read_runs_its_queries_with_the_binding_in_the_checkout_transaction(ctx):
    """A read's connection leaves the pool inside a REPEATABLE READ read-write transaction (one snapshot for the whole
    read; the read log is written in it), and the queries a read passes run behind the binding, seeing it."""
    state = pipelined.Query("SELECT current_setting('oml.tenant_id') AS t, current_setting('transaction_isolation') AS iso,"
                            " current_setting('transaction_read_only') AS ro", {})
    with ctx.db.read("oml_server", "t-read", queries=[state, state]) as rtx:
        assert _status(rtx.conn) == pq.TransactionStatus.INTRANS and rtx.on_primary
        assert [tuple(r[0]) for r in rtx.rows] == [("t-read", "repeatable read", "off")] * 2


def test_a_snapshot_is_one_repeatable_read_transaction_bound_to_its_tenant(ctx):
    with ctx.db.snapshot("oml_server", "t-snap") as (conn, _):
        got = conn.execute(sa.text("SELECT current_setting('oml.tenant_id'), current_setting('transaction_isolation')")).one()
        assert tuple(got) == ("t-snap", "repeatable read")
    with ctx.db.tenant("oml_server", "t-after") as conn:  # the server's other transactions keep their own level
        assert conn.execute(sa.text("SELECT current_setting('transaction_isolation')")).scalar() == "read committed"


def test_a_statement_with_a_literal_percent_joins_a_pipeline(ctx):
    stmt = sa.text("SELECT 'a%b' AS lit, CAST(:v AS text) AS v")
    with ctx.db.tenant("oml_server", "t-pct") as conn:
        got = pipelined.fetch(conn, [pipelined.of(stmt, {"v": "50%"}), pipelined.of(stmt, {"v": "x"})])
    assert [(r[0].lit, r[0].v) for r in got] == [("a%b", "50%"), ("a%b", "x")]


def test_the_read_log_row_and_commit_go_together(world, ctx):
    before = len(read_events(ctx, world.tenant))
    p = world.reader
    with ctx.db.tenant("oml_server", world.tenant) as conn:
        log_read(conn, world.tenant, principal_id=p.principal_id, identity_id=p.identity_id, role=p.role, op="recall",
                 claim_ids=[], workarea_ids=[], query_digest=b"\x00'\xff", commit=True)
        # committed when log_read returns: the transaction is closed and the row is visible to others
        assert _status(conn) == pq.TransactionStatus.IDLE
        assert len(read_events(ctx, world.tenant)) == before + 1
    row = read_events(ctx, world.tenant)[-1]
    assert bytes(row.query_digest) == b"\x00'\xff" and row.op == "recall" and row.principal_id == p.principal_id


def test_a_refused_read_log_row_commits_nothing(world, ctx):
    before = len(read_events(ctx, world.tenant))
    p = world.reader
    with pytest.raises(sa.exc.DBAPIError):
        with ctx.db.tenant("oml_server", world.tenant) as conn:
            conn.execute(sa.text("SELECT 1"))
            log_read(conn, world.tenant, principal_id=p.principal_id, identity_id="not-a-uuid", role=p.role,
                     op="recall", claim_ids=[], commit=True)
    assert len(read_events(ctx, world.tenant)) == before


def test_a_recall_is_logged_once_and_answers_as_before(world, ctx):
    before = len(read_events(ctx, world.tenant))
    out = world.recaller.recall(world.reader, RecallRequest(query="glacier survey 50% ice", retriever="hybrid", k=3))
    assert out["hits"] and out["diagnostics"]["legs"]["fts"]["lexemes"] > 0
    assert out["diagnostics"]["valid_time"]["excluded_hits"] == {"expired": 0, "not_yet_valid": 0, "truncated": False}
    logged = read_events(ctx, world.tenant)
    assert len(logged) == before + 1
    assert {str(c) for c in logged[-1].claim_ids} == {h["claim_id"] for h in out["hits"]}


def test_the_opening_pipeline_still_refuses_an_unknown_workarea(world):
    for bad in ("00000000-0000-4000-8000-000000000000", "not-a-uuid"):
        with pytest.raises(OMLError) as e:
            world.recaller.recall(world.reader, RecallRequest(query="glacier", workarea_id=bad))
        assert e.value.code == "workarea.not_found"


def test_a_recall_fills_its_phases(world):
    from oml.services.runtime.phases import Phases

    ph = Phases()
    world.recaller.recall(world.reader, RecallRequest(query="glacier survey", retriever="hybrid", k=3), phases=ph)
    got = ph.ms()
    for name in ("parse", "begin", "scope", "steering", "lexical", "embed_wait", "vector", "load_candidates",
                 "fusion", "bodies", "serve", "readlog", "commit", "embed", "total", "gc"):
        assert name in got, name
    marked = sum(v for k, v in got.items() if k not in ("embed", "total", "gc", "gc_collections"))
    assert marked == pytest.approx(got["total"], rel=1e-6)


def test_prepared_lookups_answer_only_the_bound_tenant_under_a_generic_plan(world, ctx):
    """The read path's fixed lookups are prepared (``pipelined.lookup``): a generic plan made for one tenant's
    binding and parameters serves another's on the same connection, and RLS and the statement's own tenant filter
    still decide every row."""
    from oml.services.reads import bodies, rows

    other = reader_world(ctx, "rtrips-other", ["A second tenant's glacier note."])
    with ctx.db.system(None) as owner:
        ids = {t: [str(v) for v in owner.execute(sa.text("SELECT version_id FROM claim_versions WHERE tenant_id = :t"),
                                                 {"t": t}).scalars()] for t in (world.tenant, other.tenant)}
    every = ids[world.tenant] + ids[other.tenant]
    with ctx.db.engine("oml_server").connect() as conn:
        conn.exec_driver_sql("SET plan_cache_mode = force_generic_plan")
        conn.commit()
        for _ in range(2):
            for bound in (world.tenant, other.tenant):
                for asked in (world.tenant, other.tenant):
                    with conn.begin():
                        conn.execute(sa.text("SELECT set_config('oml.tenant_id', :t, true)"), {"t": bound})
                        expect = set(ids[asked]) if bound == asked else set()
                        assert set(rows.load_rows(conn, asked, every)) == expect
                        opened = bodies.decrypt_versions(conn, ctx.keystore, asked, every)
                        assert {v for v, b in opened.items() if isinstance(b, dict)} == expect
                        assert bool(rows.steering_version_ids(conn, asked, ["main"], None)) is False
        generic = conn.exec_driver_sql("SELECT count(*) FROM pg_prepared_statements WHERE generic_plans > 0").scalar()
    assert generic >= 3  # the rows, the bodies and the steering lookups


@contextmanager
def round_trips(ctx, role: str = "oml_server"):
    """Counts the round trips of the connections of ``role``'s read engine (``Database.read``'s) checked out inside,
    the checkout's reset included: libpq's trace of each, where every frontend ``Sync`` (extended protocol, one per
    pipeline) or simple ``Query`` ends one. Yields a list that holds the count once the block ends."""
    eng = ctx.db.engine(role, isolation=SNAPSHOT_ISOLATION)
    fd, path = tempfile.mkstemp()
    traced, counted = [], []

    def start(dbapi_connection, *_):  # before the reset, which is a checkout listener too
        dbapi_connection.pgconn.trace(fd)
        dbapi_connection.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS)
        traced.append(dbapi_connection)

    event.listen(eng, "checkout", start, insert=True)
    try:
        yield counted
    finally:
        event.remove(eng, "checkout", start)
        for c in traced:
            c.pgconn.untrace()
        os.close(fd)
        lines = Path(path).read_text(errors="replace").splitlines()
        os.unlink(path)
        counted.append(sum(1 for line in lines if line.startswith("F\t") and line.split("\t")[2] in ("Sync", "Query")))


def _slow(text: str):
    time.sleep(0.5)  # far beyond the lexical leg on a small tenant
    return constant_vector(text)


def test_a_recall_and_a_fetch_send_the_round_trips_docs_recall_md_counts(ctx):
    """docs/recall.md, "Latency": eight round trips for a recall whose query vector is ready when the lexical leg
    answers; nine for one that reads its lexical candidates while it waits and then finds others by vector; seven for
    a fetch by claim id. Each read runs once untimed first, so the statements it prepares on the connection are
    already there."""
    w = reader_world(ctx, "rtrips-count", ["The glacier survey measured less ice than planned.",
                                           "A quiet afternoon by the lake.", "Minutes of the budget meeting."])
    ask = RecallRequest(query="glacier survey", retriever="hybrid", k=3)
    ready, waiting = Recaller(ctx, embed=constant_vector, read_while_waiting=False), Recaller(ctx, embed=_slow)
    out = ready.recall(w.reader, ask)
    assert out["diagnostics"]["candidates"] == {"fts": 1, "vector": 3}  # the vector leg finds two more
    waiting.recall(w.reader, ask)
    claim = out["hits"][0]["claim_id"]
    fetch(ctx, w.reader, claim_id=claim)
    with round_trips(ctx) as got:
        ready.recall(w.reader, ask)
    with round_trips(ctx) as waited:
        waiting.recall(w.reader, ask)
    with round_trips(ctx) as fetched:
        fetch(ctx, w.reader, claim_id=claim)
    assert (got, waited, fetched) == ([8], [9], [7])


def test_every_read_that_answers_a_client_is_one_repeatable_read_transaction(ctx, world, monkeypatch):
    """docs/recall.md, "One snapshot": a recall, a fetch, lineage, a journal page, the review queue and a caller's own
    work each write their read-log row in a REPEATABLE READ transaction, the one that read what they serve."""
    from oml.services.entrypoints.http import routes_claims
    from oml.services.reads import readlog
    from oml.services.reads.fetch import journal_page, lineage

    levels: dict[str, str] = {}

    def at_level(real):
        def logged(conn, tenant, **kw):
            levels[kw["op"]] = conn.exec_driver_sql("SELECT current_setting('transaction_isolation')").scalar()
            return real(conn, tenant, **kw)
        return logged

    monkeypatch.setattr(readlog, "log_read", at_level(readlog.log_read))
    monkeypatch.setattr(routes_claims, "log_read", at_level(routes_claims.log_read))
    held = world.remember("main", "A held glacier note.", promote=False)
    out = world.recaller.recall(world.reader, RecallRequest(query="glacier survey", retriever="hybrid", k=3))
    fetch(ctx, world.reader, claim_id=out["hits"][0]["claim_id"])
    lineage(ctx, world.reader, out["hits"][0]["claim_id"])
    journal_page(ctx, world.key("auditor"), limit=5)
    assert routes_claims.review_queue(ctx, world.reviewer)["items"][0]["version_id"] == held["version_id"]
    routes_claims.own_work(ctx, world.writer, decrypt=True)
    assert levels == dict.fromkeys(("recall", "fetch", "lineage", "journal", "review_queue", "own_work"), "repeatable read")
