"""Concurrent appends and a killed writer (no fork, no gap; all or none).

32 threads, each on its own connection, append to one tenant; then four
tenants take 8 threads each at once. Afterwards every tenant's journal is
contiguous from seq 1, the chain head names the last row, and
``journal verify`` (anchored) and ``projections rebuild --verify`` pass. A
writer *process* killed with SIGKILL between inserting a batch's journal rows
and committing leaves none of the batch behind.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from oml.services.claims.admission import Admission, Submission
from oml.services.journal.projections import verify_tenant
from oml.services.journal.verify import verify_journal
from oml.services.runtime.auth import authenticate
from oml.services.storage.db import Database

from support.admission import journal_len, make_kit, owner
from support.paths import script


def _hammer(db_url: str, ctx, kits, threads_per_tenant: int, rounds: int) -> dict[str, int]:
    """Run ``threads_per_tenant`` writer threads per kit at once; returns claims admitted per tenant."""
    db = Database(db_url, None, pool_size=threads_per_tenant * len(kits) + 2)
    adm = Admission(db, ctx.keystore)
    principals = {k.tenant: authenticate(db, k.writer_key) for k in kits}
    errors: list[BaseException] = []
    counts = {k.tenant: 0 for k in kits}
    lock = threading.Lock()
    start = threading.Barrier(threads_per_tenant * len(kits))

    def work(kit, n):
        try:
            p = principals[kit.tenant]
            start.wait()
            done = 0
            for r in range(rounds):
                batch = 1 if (n + r) % 2 else 3  # singles and small group commits interleave
                out = adm.submit(p, [Submission(kit.root, {"statement": f"t{n} r{r} i{i}"}) for i in range(batch)])
                done += len(out["items"])
            with lock:
                counts[kit.tenant] += done
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    ts = [threading.Thread(target=work, args=(k, n)) for k in kits for n in range(threads_per_tenant)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    db.dispose()
    assert not errors, errors[:3]
    return counts


def _check_tenant(ctx, kit, expected_claims: int) -> None:
    with owner(ctx, kit.tenant) as c:
        seqs = c.execute(sa.text("SELECT seq FROM journal_events WHERE tenant_id = :t ORDER BY seq"), {"t": kit.tenant}).scalars().all()
        head = c.execute(sa.text("SELECT seq FROM chain_heads WHERE tenant_id = :t"), {"t": kit.tenant}).scalar()
        claims = c.execute(sa.text("SELECT count(*) FROM claim_versions WHERE tenant_id = :t"), {"t": kit.tenant}).scalar()
        outbox = c.execute(sa.text("SELECT count(*) FROM outbox WHERE tenant_id = :t"), {"t": kit.tenant}).scalar()
    assert seqs == list(range(1, len(seqs) + 1)), "gap or duplicate in seq"
    assert head == len(seqs)
    assert claims == expected_claims
    assert outbox == len(seqs)  # one outbox row per event, same transaction
    rep = verify_journal(ctx.db, kit.tenant, kit.fingerprint)
    assert rep.ok and rep.result.anchored, rep.lines()
    assert verify_tenant(ctx.db, kit.tenant) == []


def test_32_writers_on_one_tenant(ctx, db_url):
    kit = make_kit(ctx, "conc-one")
    counts = _hammer(db_url, ctx, [kit], threads_per_tenant=32, rounds=4)
    assert counts[kit.tenant] == 32 * 2 * (1 + 3)
    _check_tenant(ctx, kit, counts[kit.tenant])


def test_four_tenants_in_parallel(ctx, db_url):
    kits = [make_kit(ctx, f"conc-{i}") for i in range(4)]
    counts = _hammer(db_url, ctx, kits, threads_per_tenant=8, rounds=3)
    for k in kits:
        _check_tenant(ctx, k, counts[k.tenant])


def _writer(ctx, db_url, kit, marker: Path, batch: int, pause: bool) -> subprocess.Popen:
    env = dict(os.environ, OML_DATABASE_URL=db_url, OML_KEY_DIR=str(ctx.settings.keys), OML_MASTER_KEY=ctx.settings.master_key,
               KILL_API_KEY=kit.writer_key, KILL_WORKAREA=kit.root, KILL_TENANT=kit.tenant, KILL_BATCH=str(batch),
               KILL_MARKER=str(marker), KILL_PAUSE="1" if pause else "0")
    return subprocess.Popen([sys.executable, str(script("kill_writer.py"))], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 60.0) -> str:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if path.exists() and path.read_text():
            return path.read_text()
        if proc.poll() is not None:
            raise AssertionError(f"writer exited early: {proc.stderr.read().decode()[-2000:]}")
        time.sleep(0.05)
    raise AssertionError("writer never reached the pause point")


def test_sigkill_mid_batch_leaves_all_or_none(ctx, db_url, tmp_path):
    kit = make_kit(ctx, "killed")
    before = journal_len(ctx, kit.tenant)
    marker = tmp_path / "paused"
    proc = _writer(ctx, db_url, kit, marker, batch=200, pause=True)
    try:
        inserted = int(_wait_for(marker, proc))
        assert inserted == 200  # every journal row of the batch exists inside the open transaction
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    # None of it: journal, head, projections, artifacts, DEKs, outbox and the idempotency record.
    deadline = time.monotonic() + 30
    while True:  # the server notices the closed socket and rolls back; wait until the chain lock is free
        try:
            with owner(ctx, kit.tenant) as c:
                c.execute(sa.text("SET LOCAL lock_timeout = '2s'"))
                head = c.execute(sa.text("SELECT seq FROM chain_heads WHERE tenant_id = :t FOR UPDATE"), {"t": kit.tenant}).scalar()
                rows = {t: c.execute(sa.text(f"SELECT count(*) FROM {t} WHERE tenant_id = :t"), {"t": kit.tenant}).scalar()
                        for t in ("claim_versions", "artifacts", "wrapped_deks", "outbox", "idempotency_keys")}
            break
        except sa.exc.OperationalError:
            assert time.monotonic() < deadline
    assert journal_len(ctx, kit.tenant) == before and head == before
    assert rows == {"claim_versions": 0, "artifacts": 0, "wrapped_deks": 0, "outbox": before, "idempotency_keys": 0}
    assert verify_journal(ctx.db, kit.tenant, kit.fingerprint).ok
    # All of it: the same batch from a writer that is not killed.
    marker2 = tmp_path / "done"
    proc = _writer(ctx, db_url, kit, marker2, batch=200, pause=False)
    assert proc.wait(timeout=120) == 0, proc.stderr.read().decode()[-2000:]
    assert marker2.read_text() == "committed 200"
    assert journal_len(ctx, kit.tenant) == before + 200
    _check_tenant(ctx, kit, 200)


def test_fork_is_impossible_to_commit(ctx):
    """Even bypassing the head lock, UNIQUE (tenant_id, prev_hash) refuses a second child of the same row."""
    kit = make_kit(ctx, "nofork")
    with owner(ctx, kit.tenant) as c:
        last = c.execute(sa.text("SELECT seq, hash FROM journal_events WHERE tenant_id = :t ORDER BY seq DESC LIMIT 1"), {"t": kit.tenant}).one()
        prev = c.execute(sa.text("SELECT prev_hash FROM journal_events WHERE tenant_id = :t AND seq = :s"), {"t": kit.tenant, "s": last.seq}).scalar()
    with pytest.raises(sa.exc.IntegrityError):
        with owner(ctx, kit.tenant) as c:
            c.execute(sa.text("INSERT INTO journal_events (tenant_id, seq, event_id, type, kid, at, canonical, hash, prev_hash, signature)"
                              " VALUES (:t, :s, gen_random_uuid(), 'identity.created', 'x', now(), '\\x00', '\\x00', :p, '\\x00')"),
                      {"t": kit.tenant, "s": last.seq + 1, "p": prev})
