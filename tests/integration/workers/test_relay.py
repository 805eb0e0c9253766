"""The outbox relay and the consumers' ordering guarantees, against real PostgreSQL."""
from __future__ import annotations

import threading
import time

import pytest
import sqlalchemy as sa

from oml.domain.events import SYSTEM
from oml.services.journal import journal, projector
from oml.workers.index import indexer
from oml.workers.lake import writer as lake_writer
from oml.workers.runtime.actors import WorkerRuntime
from oml.workers.runtime.relay import Relay

from support.workers import assert_index_exact, assert_lake_exact, head, promote, setup_tenant


class Recorder:
    def __init__(self):
        self.sent: list[tuple[str, int]] = []
        self.lock = threading.Lock()

    def __call__(self, tenant, seq):
        with self.lock:
            self.sent.append((tenant, seq))


@pytest.fixture(scope="module")
def tenants(ctx):
    return setup_tenant(ctx, "rel-a"), setup_tenant(ctx, "rel-b")


def _drain(ctx):
    Relay(ctx, lambda t, s: None).drain()


def test_dispatch_sends_ids_and_seqs_once(ctx, tenants):
    a, b = tenants
    _drain(ctx)
    promote(ctx, a, "relay one")
    promote(ctx, b, "relay two")
    rec = Recorder()
    relay = Relay(ctx, rec)
    assert relay.dispatch_once() == 4
    assert sorted(rec.sent) == [(a.tenant, head(ctx, a.tenant)), (b.tenant, head(ctx, b.tenant))]
    assert relay.dispatch_once() == 0
    with ctx.db.system("oml_relay") as c:
        payloads = c.execute(sa.text("SELECT payload FROM outbox")).scalars().all()
    assert payloads and all(set(p) <= {"seq", "type"} for p in payloads)


def test_failed_send_leaves_rows_for_the_next_pass(ctx, tenants):
    a, _ = tenants
    _drain(ctx)
    promote(ctx, a, "relay while the broker is down")

    def down(tenant, seq):
        raise ConnectionError("broker unreachable")

    with pytest.raises(ConnectionError):
        Relay(ctx, down).dispatch_once()
    rec = Recorder()
    assert Relay(ctx, rec).dispatch_once() == 2
    assert rec.sent == [(a.tenant, head(ctx, a.tenant))]


def _open_append(ctx, tenant, started: threading.Event, release: threading.Event, out: dict):
    """Append one event in a transaction that stays open until ``release``."""
    with ctx.db.tenant("oml_admission", tenant) as conn:
        h = journal.Head(conn, tenant)
        ev = journal.append(h, ctx.admission.signer, "readlog.anchored", SYSTEM, {"batch_no": 1, "count": 0})
        projector.apply(conn, tenant, ev.seq, ev.at, ev.event["actor"], "readlog.anchored", {})
        out["seq"] = ev.seq
        started.set()
        release.wait(30)
    out["committed"] = True


def test_reader_never_skips_a_row_that_commits_after_a_later_one(ctx, tenants):
    """T1 takes a position, T2 commits, the reader advances, T1 commits: nothing is skipped.

    Across tenants T2 (tenant B) commits an outbox row with a higher id while
    T1's (tenant A) lower id is uncommitted; the relay claims by
    ``dispatched_at IS NULL``, so T1's row is dispatched later, not skipped.
    Within tenant A, a second writer T3 cannot even take seq N+1 before T1
    commits: it waits on the chain-head lock, so ``seq > cursor`` is safe.
    """
    a, b = tenants
    lake_writer.catch_up(ctx, a.tenant)
    indexer.catch_up(ctx, a.tenant)  # may enrol the indexer principal: more events
    _drain(ctx)
    before = head(ctx, a.tenant)

    started, release, t1 = threading.Event(), threading.Event(), {}
    th1 = threading.Thread(target=_open_append, args=(ctx, a.tenant, started, release, t1))
    th1.start()
    assert started.wait(30)
    assert t1["seq"] == before + 1

    # T2: another tenant commits while T1 is open.
    promote(ctx, b, "committed while tenant a is mid-append")
    rec = Recorder()
    relay = Relay(ctx, rec)
    relay.drain()
    assert {t for t, _ in rec.sent} == {b.tenant}

    # T3: the same tenant cannot take the next position until T1 commits.
    t3 = {}
    th3 = threading.Thread(target=lambda: t3.update(promote(ctx, a, "second writer on tenant a")))
    th3.start()
    th3.join(1.0)
    assert th3.is_alive(), "a second append on the tenant must wait for the chain-head lock"

    # The readers advance now: they see only what committed, and record it.
    lake_writer.catch_up(ctx, a.tenant)
    indexer.catch_up(ctx, a.tenant)
    assert lake_writer.recorded_versions(ctx, a.tenant)["journal"] == before
    with ctx.db.tenant("oml_indexer", a.tenant) as c:
        assert c.execute(sa.text("SELECT seq FROM consumer_cursors WHERE tenant_id = :t AND consumer = 'indexer'"),
                         {"t": a.tenant}).scalar() == before

    release.set()
    th1.join(30)
    th3.join(30)
    with ctx.db.tenant("oml_server", a.tenant) as c:
        t3_seq = c.execute(sa.text("SELECT submitted_seq FROM claim_versions WHERE tenant_id = :t AND version_id = CAST(:v AS uuid)"),
                           {"t": a.tenant, "v": t3["version_id"]}).scalar()
    assert t1.get("committed") and t3_seq > t1["seq"]

    rec2 = Recorder()
    Relay(ctx, rec2).drain()
    assert rec2.sent == [(a.tenant, head(ctx, a.tenant))]
    lake_writer.catch_up(ctx, a.tenant)
    indexer.catch_up(ctx, a.tenant)
    assert_lake_exact(ctx, a.tenant)
    assert_index_exact(ctx, a.tenant)


def test_listen_notify_wakes_the_relay(ctx, tenants):
    a, _ = tenants
    _drain(ctx)
    rec = Recorder()
    stop = threading.Event()
    relay = Relay(ctx, rec, poll_seconds=120, sweep=None)
    th = threading.Thread(target=relay.run, args=(stop,))
    th.start()
    try:
        time.sleep(0.5)  # let the relay reach its LISTEN wait
        promote(ctx, a, "a notification wakes the relay")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (a.tenant, head(ctx, a.tenant)) not in rec.sent:
            time.sleep(0.05)
        assert (a.tenant, head(ctx, a.tenant)) in rec.sent
    finally:
        stop.set()
        # the relay is blocked on LISTEN for up to poll_seconds; a NOTIFY ends the wait
        promote(ctx, a, "wake the relay so it sees the stop")
        th.join(30)
    assert not th.is_alive()


def test_purge_deletes_dispatched_rows_past_retention(ctx, tenants):
    a, _ = tenants
    promote(ctx, a, "old news")
    _drain(ctx)
    with ctx.db.engine(None).begin() as c:
        c.execute(sa.text("UPDATE outbox SET dispatched_at = now() - interval '48 hours' WHERE dispatched_at IS NOT NULL"))
    promote(ctx, a, "fresh news")
    relay = Relay(ctx, lambda t, s: None, retention_hours=24)
    assert relay.purge() > 0
    with ctx.db.system("oml_relay") as c:
        left = c.execute(sa.text("SELECT count(*) FILTER (WHERE dispatched_at IS NULL), count(*) FROM outbox")).one()
    assert left[0] == 2 and left[1] == 2


def test_in_process_runtime_end_to_end(ctx, tenants):
    a, b = tenants
    assert ctx.settings.redis_url is None
    rt = WorkerRuntime(ctx, poll_seconds=0.5, sweep_seconds=5).start()
    try:
        for i in range(3):
            promote(ctx, a, f"in-process pipeline {i}")
            promote(ctx, b, f"in-process pipeline b {i}")
        assert rt.wait_idle(120, [a.tenant, b.tenant])
        # A checkpoint appends no journal event: the sweep, not the outbox, wakes the lake-writer.
        from oml.services.journal.checkpoints import issue_checkpoint

        cp = issue_checkpoint(ctx, a.tenant)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and lake_writer.recorded_versions(ctx, a.tenant)["checkpoints"] < cp.tree_size:
            time.sleep(0.2)
        assert lake_writer.recorded_versions(ctx, a.tenant)["checkpoints"] == cp.tree_size
    finally:
        rt.stop()
    for e in (a, b):
        assert_lake_exact(ctx, e.tenant)
        assert_index_exact(ctx, e.tenant)
