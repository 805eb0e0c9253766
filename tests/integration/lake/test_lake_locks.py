"""The lake-writer's per-tenant lock when its holder is lost or stalled.

Real PostgreSQL, real Delta tables on disk, a real worker process stopped
with SIGSTOP. What must hold: a writer whose session died between planning
and committing never commits rows a second writer copied meanwhile (0
duplicates, read back from the Delta table); a writer waiting on a stalled
holder gives up after ``lake_lock_timeout_s`` with a log line and an
``oml status`` entry, and the tenant catches up once the holder's lease
(``lake_lease_s``) has ended its session.
"""
from __future__ import annotations

import collections
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from oml.workers.lake import writer as lake_writer
from oml.workers.runtime import lag

from support.paths import script
from support.workers import assert_lake_exact, child_env, head, lake_rows, setup_tenant, submit

CRASH = script("oml_workers_crash.py")


def _duplicates(ctx, table: str, tenant: str, key: str) -> list:
    counts = collections.Counter(r[key] for r in lake_rows(ctx, table, tenant))
    return [k for k, n in counts.items() if n > 1]


def _terminate_idle_writer(ctx) -> int:
    """pg_terminate_backend of the one lake-writer session idle in a transaction (the planning writer)."""
    with ctx.db.engine(None).begin() as c:
        pids = list(c.execute(sa.text(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND usename = 'oml_lake_writer'"
            " AND state = 'idle in transaction'")).scalars())
        assert len(pids) == 1, pids
        assert c.execute(sa.text("SELECT pg_terminate_backend(:p, 5000)"), {"p": pids[0]}).scalar()
    return pids[0]


def test_writer_that_lost_its_lock_does_not_commit_again(ctx, monkeypatch):
    e = setup_tenant(ctx, "lost-lock")
    submit(ctx, e, [f"copied once {i}" for i in range(4)])
    seen: dict = {}

    def kill_then_overtake(table, tenant, version):
        if table != "journal" or seen:
            return
        seen["planned"] = version
        # The first writer has read the recorded version and its rows; its session dies now,
        seen["killed"] = _terminate_idle_writer(ctx)
        # and a second writer takes the freed lock and copies everything before the first commits.
        seen["second"] = lake_writer.catch_up(ctx, tenant)

    monkeypatch.setattr(lake_writer, "before_commit_hook", kill_then_overtake)
    with pytest.raises(sa.exc.DBAPIError):  # the first writer's session is gone once it touches it again
        lake_writer.catch_up(ctx, e.tenant)
    monkeypatch.undo()
    assert seen["planned"] == head(ctx, e.tenant) and seen["second"] > 0
    assert _duplicates(ctx, "journal", e.tenant, "seq") == []
    assert _duplicates(ctx, "bodies", e.tenant, "artifact_id") == []
    assert_lake_exact(ctx, e.tenant)
    assert lake_writer.catch_up(ctx, e.tenant) == 0


def _status(ctx, *args: str):
    from oml.services.entrypoints.cli.main import app

    res = CliRunner().invoke(app, ["status", *args], env=child_env(ctx, OML_AUTO_MIGRATE="false"))
    assert res.exit_code == 0, res.output
    return res


def _status_json(ctx) -> dict:
    return json.loads(_status(ctx, "--json").output)


def test_waiter_gives_up_on_a_held_lock_logs_it_shows_it_and_catches_up_after(ctx, monkeypatch, caplog):
    e = setup_tenant(ctx, "held-lock")
    submit(ctx, e, ["waits for the lock"])
    monkeypatch.setattr(ctx.settings, "lake_lock_timeout_s", 0.5)
    with ctx.db.tenant("oml_lake_writer", e.tenant) as holder:
        lake_writer.lock_tenant(holder, e.tenant, ctx.settings)
        with caplog.at_level(logging.WARNING, logger=lake_writer.log.name), pytest.raises(lake_writer.LakeLockBusy):
            lake_writer.catch_up(ctx, e.tenant)
        assert any(e.tenant in r.getMessage() and "lake lock" in r.getMessage() for r in caplog.records)
        waits = {w.tenant: w for w in lag.lock_waits(ctx)}
        assert waits[e.tenant].count == 1
        shown = _status_json(ctx)["lake_lock_waits"]
        assert [w["tenant"] for w in shown] == [e.tenant] and shown[0]["count"] == 1
        assert f"lake lock busy: tenant {e.tenant}" in _status(ctx).output
        # Other tenants are not held up by this one.
        other = setup_tenant(ctx, "free-lock")
        submit(ctx, other, ["not held"])
        assert lake_writer.catch_up(ctx, other.tenant) > 0
    assert lake_writer.catch_up(ctx, e.tenant) > 0
    assert_lake_exact(ctx, e.tenant)
    assert e.tenant not in {w.tenant for w in lag.lock_waits(ctx)}
    assert _status_json(ctx)["lake_lock_waits"] == []


def _stopped(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"
    except FileNotFoundError:
        return False


def test_sigstopped_writer_loses_its_lease_and_cannot_double_commit(ctx, monkeypatch):
    e = setup_tenant(ctx, "stalled")
    submit(ctx, e, [f"stalled batch {i}" for i in range(6)])
    # The stopped child plans its first batch (2 rows), then SIGSTOPs itself holding the lock.
    proc = subprocess.Popen([sys.executable, str(CRASH), "stall", e.tenant, "2", "1"], cwd=str(CRASH.parent),
                            env=child_env(ctx, OML_LAKE_LEASE_S="3", OML_AUTO_MIGRATE="false"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not _stopped(proc.pid):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() is not None else "never stopped"
            time.sleep(0.05)
        monkeypatch.setattr(ctx.settings, "lake_lock_timeout_s", 0.5)
        busy = 0
        while True:  # until PostgreSQL ends the stopped holder's session (its lease)
            try:
                copied = lake_writer.catch_up(ctx, e.tenant)
                break
            except lake_writer.LakeLockBusy:
                busy += 1
                assert time.monotonic() < deadline, "the stalled writer's lock was never released"
        assert copied > 0  # `busy` (give-ups while the lease ran) depends on timing: not asserted
        assert_lake_exact(ctx, e.tenant)
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        out, err = proc.communicate(timeout=60)
    # Resumed, the child commits against its planning snapshot: refused, and its dead session ends it.
    assert proc.returncode == 0, err[-2000:]
    assert _duplicates(ctx, "journal", e.tenant, "seq") == []
    assert_lake_exact(ctx, e.tenant)
