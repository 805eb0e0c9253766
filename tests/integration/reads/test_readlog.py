"""The read log: rows per read, sealed batches anchored in the journal, late commits, tampering named, retention."""
from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys

import pytest
import sqlalchemy as sa

from oml.domain.errors import OMLError
from oml.services.reads import readlog
from oml.services.reads.recall import RecallRequest

from support.recall import owner, read_events, reader_world, world_with_reads


@pytest.fixture(scope="module")
def world(ctx):
    w = reader_world(ctx, "rlog", [f"Fact number {i} about the read log and its batches." for i in range(5)])
    w.operator = w.key("operator")
    return w


def reads(w, n):
    for i in range(n):
        w.recaller.recall(w.reader, RecallRequest(query=f"read log batches {i}", retriever="fts"))


def anchored_events(ctx, tenant):
    with owner(ctx, tenant) as c:
        return [json.loads(bytes(r.canonical)) for r in c.execute(sa.text(
            "SELECT canonical FROM journal_events WHERE tenant_id = :t AND type = 'readlog.anchored' ORDER BY seq"), {"t": tenant})]


def test_seal_anchors_batches_and_verify_passes(world, ctx):
    reads(world, 3)
    anchors = readlog.seal(ctx, world.tenant)
    assert len(anchors) == 1 and anchors[0]["count"] >= 3
    ev = anchored_events(ctx, world.tenant)[-1]
    assert ev["data"]["root"] == anchors[0]["root"] and ev["data"]["batch_no"] == anchors[0]["batch_no"]
    assert set(ev["data"]) == {"batch_no", "count", "first_read_id", "last_read_id", "root", "members_sha256", "first_at", "last_at"}
    assert all(r.batch_no is not None for r in read_events(ctx, world.tenant))
    assert readlog.seal(ctx, world.tenant) == []  # idle: nothing journalled
    v = readlog.verify(ctx, world.tenant)
    assert v["ok"], v
    assert v["batches_checked"] == 1 and v["unsealed"] == 0


def test_read_committing_after_its_seal_lands_in_the_next_batch(world, ctx):
    """T1 takes a read_id, the seal runs and commits, T1 commits: T1's read is sealed by the next batch."""
    reads(world, 1)
    with ctx.db.tenant("oml_server", world.tenant) as c1:
        readlog.record(c1, world.reader, "fetch", claim_ids=["00000000-0000-0000-0000-000000000001"])
        late_id = c1.execute(sa.text("SELECT max(read_id) FROM read_events WHERE tenant_id = :t"), {"t": world.tenant}).scalar()
        first = readlog.seal(ctx, world.tenant)           # cannot see T1's row
        assert len(first) == 1
        reads(world, 1)                                  # a read with a higher id, committed before T1
    rows = {r.read_id: r for r in read_events(ctx, world.tenant)}
    assert rows[late_id].batch_no is None
    assert late_id < max(rows)
    second = readlog.seal(ctx, world.tenant)
    assert len(second) == 1 and second[0]["first_read_id"] <= late_id <= second[0]["last_read_id"]
    rows = {r.read_id: r for r in read_events(ctx, world.tenant)}
    assert rows[late_id].batch_no == second[0]["batch_no"]
    assert readlog.verify(ctx, world.tenant)["ok"]


def test_tampering_is_named_by_verify(world, ctx):
    reads(world, 4)
    readlog.seal(ctx, world.tenant)
    rows = [r for r in read_events(ctx, world.tenant) if r.batch_no is not None]
    edited, deleted = rows[-1], rows[-2]
    with owner(ctx, world.tenant) as c:
        c.execute(sa.text("UPDATE read_events SET claim_ids = '{}' WHERE tenant_id = :t AND read_id = :r"),
                  {"t": world.tenant, "r": edited.read_id})
        c.execute(sa.text("DELETE FROM read_events WHERE tenant_id = :t AND read_id = :r"), {"t": world.tenant, "r": deleted.read_id})
        inserted = c.execute(sa.text(
            "INSERT INTO read_events (tenant_id, role, op, batch_no) VALUES (:t, 'reader', 'recall', :b) RETURNING read_id"),
            {"t": world.tenant, "b": edited.batch_no}).scalar()
        late = c.execute(sa.text(
            "INSERT INTO read_events (tenant_id, role, op, at) VALUES (:t, 'reader', 'fetch', now() - interval '2 days') RETURNING read_id"),
            {"t": world.tenant}).scalar()
    v = readlog.verify(ctx, world.tenant)
    assert not v["ok"]
    found = {(f["kind"], f["read_id"]) for f in v["findings"]}
    assert ("edited", edited.read_id) in found
    assert ("deleted", deleted.read_id) in found
    assert ("inserted", inserted) in found
    assert ("late_unsealed", late) in found
    # The CLI says the same and exits 1.
    env = dict(os.environ, OML_DATABASE_URL=ctx.settings.database_url, OML_HOME=str(ctx.settings.home),
               OML_MASTER_KEY=ctx.settings.master_key)
    p = subprocess.run([sys.executable, "-m", "oml.services.entrypoints.cli.main", "readlog", "verify", "--tenant", world.tenant, "--json"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 1, p.stderr
    out = json.loads(p.stdout)
    assert {(f["kind"], f["read_id"]) for f in out["findings"]} == found
    # Repair for the following tests: put the rows back as they were sealed is impossible; remove the extras
    # and re-insert nothing, so later tests start from a fresh tenant instead.


def test_retention_is_journalled_and_retires_whole_batches(ctx):
    w, reader, operator, rec = world_with_reads(ctx, "rlog-ret", "A fact to read for retention.")
    readlog.seal(ctx, w.tenant)
    rec.recall(reader, RecallRequest(query="one more", retriever="fts"))
    with pytest.raises(OMLError) as e:
        readlog.set_policy(ctx, reader, 30)
    assert e.value.code == "access.denied"
    with pytest.raises(OMLError) as e:
        readlog.apply_retention(ctx, w.tenant, principal=operator)
    assert e.value.code == "retention.no_policy"
    pol = readlog.set_policy(ctx, operator, 30)
    with owner(ctx, w.tenant) as c:
        assert c.execute(sa.text("SELECT readlog_days FROM retention_policies WHERE tenant_id = :t"), {"t": w.tenant}).scalar() == 30
    nothing = readlog.apply_retention(ctx, w.tenant, principal=operator)
    assert nothing["batches"] == [] and nothing["reads_removed"] == 0 and nothing["seq"] > pol["seq"]
    logged = len(read_events(ctx, w.tenant))  # 4 recalls and the indexer's feed read
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=31)
    done = readlog.apply_retention(ctx, w.tenant, principal=operator, at=later)
    assert done["batches"] == [[1, 2]] and done["reads_removed"] == done["reads_expected"] == logged
    assert read_events(ctx, w.tenant) == []
    with owner(ctx, w.tenant) as c:
        types = [r[0] for r in c.execute(sa.text("SELECT type FROM journal_events WHERE tenant_id = :t AND type LIKE 'retention.%' ORDER BY seq"),
                                          {"t": w.tenant})]
    assert types == ["retention.policy_set", "retention.applied", "retention.applied"]
    v = readlog.verify(ctx, w.tenant)
    assert v["ok"] and v["batches_checked"] == 0
    # A read put back into a retired batch is an insertion.
    with owner(ctx, w.tenant) as c:
        rid = c.execute(sa.text("INSERT INTO read_events (tenant_id, role, op, batch_no) VALUES (:t, 'reader', 'recall', 1)"
                                " RETURNING read_id"), {"t": w.tenant}).scalar()
    v = readlog.verify(ctx, w.tenant)
    assert {(f["kind"], f["read_id"]) for f in v["findings"]} == {("inserted", rid)}


def test_workload_roles_cannot_rewrite_the_log(world, ctx):
    with ctx.db.tenant("oml_server", world.tenant) as c:
        with pytest.raises(sa.exc.ProgrammingError):
            c.execute(sa.text("UPDATE read_events SET claim_ids = '{}' WHERE tenant_id = :t"), {"t": world.tenant})
    with ctx.db.tenant("oml_server", world.tenant) as c:
        with pytest.raises(sa.exc.ProgrammingError):
            c.execute(sa.text("DELETE FROM read_events WHERE tenant_id = :t"), {"t": world.tenant})


def test_oml_worker_schedule_seals_every_tenant(world, ctx, tmp_path):
    """``oml worker --seal-every`` sends ``oml_seal_readlog``; one run seals every tenant's pending reads."""
    import time

    import dramatiq
    from dramatiq.brokers.stub import StubBroker

    from oml.workers.reconcile import reconciler

    reads(world, 3)
    before = len(anchored_events(ctx, world.tenant))
    broker = StubBroker()
    actors = reconciler.declare(broker, ctx, out_dir=tmp_path)
    schedule = reconciler.Schedule(actors, reconcile_seconds=0, checkpoint_seconds=0, seal_seconds=0.2)
    worker = dramatiq.Worker(broker, worker_threads=1)
    worker.start()
    schedule.start()
    try:
        deadline = time.monotonic() + 60
        while len(anchored_events(ctx, world.tenant)) == before and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        schedule.stop()
        broker.join("oml-admission")
        worker.join()
        worker.stop()
    assert len(anchored_events(ctx, world.tenant)) > before
    with owner(ctx, world.tenant) as c:
        assert c.execute(sa.text("SELECT count(*) FROM read_events WHERE tenant_id = :t AND batch_no IS NULL"),
                         {"t": world.tenant}).scalar() == 0
