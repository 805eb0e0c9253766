"""The checkout's reset (services/storage/db.py ``_reset``) on real PostgreSQL: while its round trip waits, the
process's other threads run (it waits through psycopg, which releases the GIL; libpq's blocking result calls do not),
and a read's transaction comes out of the pool having run no statement, even after a borrower planted one with SQL's
``PREPARE``."""
from __future__ import annotations

import threading
import time

import pytest
import sqlalchemy as sa

from oml.services.storage.db import Database

from support.owner import temporary_tables


def _ticks_during(fn) -> tuple[int, float]:
    """How often another thread wakes (every ~1 ms) while ``fn`` runs, and how long ``fn`` ran."""
    n, stop = [0], threading.Event()

    def spin() -> None:
        while not stop.is_set():
            n[0] += 1
            time.sleep(0.001)
    t = threading.Thread(target=spin)
    t.start()
    time.sleep(0.05)
    n[0] = 0
    t0 = time.monotonic()
    try:
        fn()
    finally:
        elapsed = time.monotonic() - t0
        stop.set()
        t.join()
    return n[0], elapsed


@pytest.mark.parametrize("role", ["oml_server", "oml_admission", "oml_indexer"])  # the last: the plain reset
def test_a_checkout_that_waits_lets_the_other_threads_run(ctx, db_url, role):
    """The reset's ``DISCARD TEMP`` waits ``lock_timeout`` for a lock the owner holds on the borrower's temporary table
    (the role allowed them here); another thread that wakes every millisecond keeps running meanwhile (a thread that
    held the GIL through the wait would let it wake a handful of times)."""
    with temporary_tables(ctx, role):
        db = Database(db_url, None, pool_size=1, lock_timeout_ms=1000)
        try:
            with db.engine(role).connect() as c:
                dc = c.connection.driver_connection
                dc.rollback()
                dc.autocommit = True
                dc.execute("CREATE TEMP TABLE held (x int)")
                schema = dc.execute("SELECT nspname FROM pg_namespace WHERE oid = pg_my_temp_schema()").fetchone()[0]
                dc.autocommit = False
            with ctx.db.engine(None).connect() as owner:
                owner.execute(sa.text(f"LOCK TABLE {schema}.held IN ACCESS SHARE MODE"))

                def checkout() -> None:
                    try:
                        with db.engine(role).connect():
                            pass
                    except sa.exc.SQLAlchemyError:
                        pass  # the reset failed past lock_timeout; the pool opened another connection or gave up
                ticks, elapsed = _ticks_during(checkout)
                owner.rollback()
            assert elapsed > 0.9  # the reset waited
            assert ticks > 100, f"another thread ran {ticks} times in {elapsed:.2f} s"
        finally:
            db.dispose()


def test_a_read_checked_out_after_a_plant_has_no_snapshot_before_its_locks(ctx, db_url):
    """docs/recall.md, "One snapshot": a read's transaction comes out of the pool having run no statement, so its
    snapshot is taken after its ``LOCK TABLE`` (:func:`lock_first`). After a borrower planted a statement with SQL's
    ``PREPARE``, the reset drops every prepared statement outside the transaction it hands out: no snapshot at
    checkout (``backend_xmin`` unset while idle in transaction)."""
    db = Database(db_url, None, pool_size=1)
    try:
        eng = db.engine("oml_server", isolation="REPEATABLE READ")
        with eng.connect() as c:
            dc = c.connection.driver_connection
            pid = dc.pgconn.backend_pid
            dc.rollback()
            dc.autocommit = True
            dc.execute("PREPARE planted AS SELECT 1")
            dc.autocommit = False
        with eng.connect() as c:
            assert c.connection.driver_connection.pgconn.backend_pid == pid
            with ctx.db.engine(None).connect() as owner:
                xmin = owner.execute(sa.text("SELECT backend_xmin FROM pg_stat_activity WHERE pid = :p"), {"p": pid}).scalar()
            assert xmin is None
    finally:
        db.dispose()
