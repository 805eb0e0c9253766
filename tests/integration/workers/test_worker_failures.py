"""Failure behaviour of the outbox workers: real Redis (its own port), SIGKILLed consumers, duplicates, poison."""
from __future__ import annotations

import dataclasses
import signal
import subprocess
import sys
import time

import pytest
import sqlalchemy as sa

from oml.workers.index import indexer
from oml.workers.lake import writer as lake_writer
from oml.workers.lake.schema import app_id
from oml.workers.runtime import lag
from oml.workers.runtime.actors import WorkerRuntime

from support.paths import script
from support.workers import RedisServer, assert_index_exact, assert_lake_exact, child_env, head, promote, setup_tenant, supersede

CRASH = script("oml_workers_crash.py")


def _redis_ctx(ctx, url):
    return dataclasses.replace(ctx, settings=ctx.settings.model_copy(update={"redis_url": url}))


@pytest.fixture()
def redis():
    server = RedisServer().start()
    yield server
    server.stop()


def test_redis_outage_then_every_consumer_catches_up(ctx, redis):
    e = setup_tenant(ctx, "fail-redis")
    rctx = _redis_ctx(ctx, redis.url)
    rt = WorkerRuntime(rctx, poll_seconds=0.5, sweep_seconds=2).start()
    try:
        for i in range(3):
            promote(ctx, e, f"before the outage {i}")
        assert rt.wait_idle(120, [e.tenant])
        redis.stop()
        # Admission does not depend on Redis: writes keep committing.
        first = promote(ctx, e, "during the outage 0")
        for i in range(1, 4):
            promote(ctx, e, f"during the outage {i}")
        supersede(ctx, e, first["claim_id"], first["version_id"], "during the outage, superseded")
        time.sleep(1.0)
        assert lag.undispatched(ctx) > 0  # nothing could be sent
        redis.start()
        assert rt.wait_idle(180, [e.tenant])
        # Consumers can catch up before the relay dispatches: a message in flight when Redis went away is
        # redelivered and reads up to the head, while the relay is still in its backoff (at most 30 s).
        deadline = time.monotonic() + 120
        while lag.undispatched(ctx) and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        rt.stop()
    assert_lake_exact(ctx, e.tenant)
    assert_index_exact(ctx, e.tenant)
    assert lag.undispatched(ctx) == 0


def test_duplicate_and_redelivered_messages_do_no_harm(ctx, redis):
    e = setup_tenant(ctx, "fail-dup")
    rctx = _redis_ctx(ctx, redis.url)
    rt = WorkerRuntime(rctx, relay=False).start()
    try:
        for i in range(3):
            promote(ctx, e, f"duplicated wake-ups {i}")
        h = head(ctx, e.tenant)
        for _ in range(5):  # the same message many times, and stale ones
            rt.send(e.tenant, h)
            rt.send(e.tenant, 1)
        for queue in ("oml-lake", "oml-index"):
            rt.broker.join(queue, timeout=120_000)
        assert rt.wait_idle(60, [e.tenant])
    finally:
        rt.stop()
    assert_lake_exact(ctx, e.tenant)
    assert_index_exact(ctx, e.tenant)


def _run_child(ctx, *args) -> int:
    proc = subprocess.run([sys.executable, str(CRASH), *map(str, args)], env=child_env(ctx), cwd=str(CRASH.parent),
                          capture_output=True, timeout=300)
    return proc.returncode


def test_lake_writer_killed_between_delta_commit_and_cursor(ctx):
    e = setup_tenant(ctx, "fail-lake")
    for i in range(4):
        promote(ctx, e, f"lake crash {i}")
    rc = _run_child(ctx, "lake", e.tenant, 5, 2)
    assert rc == -signal.SIGKILL
    # The child's two commits landed; its Postgres hint never moved.
    assert lake_writer.lake_for(ctx).recorded("journal", app_id(e.tenant)) == 10
    with ctx.db.tenant("oml_lake_writer", e.tenant) as c:
        hint = c.execute(sa.text("SELECT seq FROM consumer_cursors WHERE tenant_id = :t AND consumer = 'lake-writer'"),
                         {"t": e.tenant}).scalar()
    assert hint in (None, 0)
    lake_writer.catch_up(ctx, e.tenant, batch_rows=5)
    assert_lake_exact(ctx, e.tenant)
    assert lake_writer.recorded_versions(ctx, e.tenant)["journal"] == head(ctx, e.tenant)


def test_indexer_killed_mid_batch_converges_to_the_tips(ctx):
    e = setup_tenant(ctx, "fail-index")
    indexer.indexer_principal(ctx, e.tenant)  # enrol before the child runs
    claims = [promote(ctx, e, f"index crash {i}") for i in range(6)]
    for c in claims[:3]:
        supersede(ctx, e, c["claim_id"], c["version_id"], "a newer statement")
    ctx.admission.review(e.reviewer, claims[4]["version_id"], "demote", "outdated")
    rc = _run_child(ctx, "index", e.tenant, 8, 2)
    assert rc == -signal.SIGKILL
    with ctx.db.tenant("oml_indexer", e.tenant) as c:
        cursor = c.execute(sa.text("SELECT seq FROM consumer_cursors WHERE tenant_id = :t AND consumer = 'indexer'"),
                           {"t": e.tenant}).scalar()
    assert 0 < cursor < head(ctx, e.tenant)  # one batch committed, the killed one did not
    indexer.catch_up(ctx, e.tenant)
    assert_index_exact(ctx, e.tenant)
    from oml.workers.index import verify

    kinds = verify.verify(ctx, e.tenant).counts()
    assert not {k for k in kinds if k.startswith(("index.", "cursor."))}, kinds  # the BM25 statistics too
