"""lake-writer: journal rows, checkpoints and body ciphertext, verbatim, into Delta Lake (docs/design.md §Outbox and workers).

Credentials: the ``oml_lake_writer`` database role (SELECT on the journal,
checkpoints, chain heads and artifacts; its own cursor and poison rows) and
write access to the lake URI. It must never hold a KeyStore, a signing key,
an encryption key or a role that can read ``wrapped_deks``: everything it
copies is ciphertext, hashes, signatures and signed notes, so a lake leak
discloses no body.

Exactly once in the lake. Each commit to a table carries a Delta application
transaction ``(app_id, version)``: ``oml-lake-writer:<tenant>`` with version
= the last journal ``seq`` in the commit (journal and bodies tables) and
``oml-lake-writer:<tenant>:checkpoints`` with version = the last tree size
(checkpoints table). Delta does not refuse a repeated or lower version
(delta-rs #2580), so before every commit the writer reads
``DeltaTable.transaction_version(app_id)`` and copies only rows above it;
after any error it reads it again, because a commit can report failure and
still have landed (delta-rs #2279). The lake's own record is the cursor; the
``consumer_cursors`` row (consumer ``lake-writer``) is a lag hint written
after the Delta commit, so a crash between the two costs nothing. Per tenant,
one writer at a time: the writer holds the tenant's cursor row
``FOR UPDATE`` for the whole catch-up.

A lost lock cannot double a row. The row lock ends with the writer's
PostgreSQL session (idle-in-transaction timeout, failover, an admin's
``pg_terminate_backend``), and the Delta commit does not go through that
session, so a second writer can take the lock and copy the same rows while
the first is between planning and committing. Each commit is therefore made
against the ``DeltaTable`` snapshot the recorded version was read from:
delta-rs' conflict check sees the other writer's commit carrying the same
application-transaction id and refuses ours (``CommitFailedError``,
"Concurrent transaction"), and the writer re-reads the record instead of
committing again (measured: 0 duplicates; committing by URI re-read the
newest version and copied 4 rows twice; docs/lake.md).

A stalled writer cannot stall its tenant. The lock is a lease: the holder
sets ``idle_in_transaction_session_timeout`` to ``lake_lease_s``
(``OML_LAKE_LEASE_S``) so PostgreSQL ends a stopped worker's session and
frees the row; a waiter sets ``lock_timeout`` to ``lake_lock_timeout_s``
(``OML_LAKE_LOCK_TIMEOUT_S``), gives up with :class:`LakeLockBusy`, logs a
warning and records the wait in ``consumer_cursors`` (consumer
``lake-writer:lock-wait``, ``updated_at`` = when, ``seq`` = consecutive
waits), which ``oml status`` shows until a catch-up of the tenant succeeds.

Why reading ``seq > recorded`` never skips a row: appends to one tenant's
chain are serialised by the row lock on its chain head, so a transaction
holding seq N+1 cannot commit before the one holding N; and the writer copies
only up to the chain head it read, whose transaction committed with every
row below it (docs/workers.md, Ordering).

Public API::

    catch_up(ctx, tenant) -> int        rows appended (all three tables) until the tenant is current
    catch_up_all(ctx) -> int
    recorded_versions(ctx, tenant) -> {"journal": n, "bodies": n, "checkpoints": n}
    compact(ctx, tenant=None) -> dict   optimize.compact + create_checkpoint per table
    lake_for(ctx) -> Lake
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import psycopg.errors
import pyarrow as pa
import sqlalchemy as sa
from deltalake import ColumnProperties, CommitProperties, DeltaTable, Transaction, WriterProperties, write_deltalake
from deltalake.exceptions import CommitFailedError

from oml.services.storage import pipelined
from oml.workers.lake.schema import BODIES, CHECKPOINTS, JOURNAL, PARTITION_BY, STATS_COLUMNS, TABLES, app_id

if TYPE_CHECKING:  # pragma: no cover
    from oml.services.runtime.context import Context

log = logging.getLogger(__name__)

ROLE = "oml_lake_writer"
CONSUMER = "lake-writer"
# consumer_cursors row holding the last checkpoint tree size copied (a hint, like the journal one).
CHECKPOINTS_CONSUMER = "lake-writer:checkpoints"
# consumer_cursors row recording that writers gave up waiting for the tenant's lock (``oml status``).
LOCK_WAIT_CONSUMER = "lake-writer:lock-wait"
BATCH_ROWS = 5000
# delta-rs' post-commit hook writes a checkpoint every this many commits (many tiny
# commits make table opens slow: delta-rs #2518).
CHECKPOINT_INTERVAL = 50
COMMIT_ATTEMPTS = 3

# Content-bearing binary columns: no Parquet page/chunk statistics either.
_NO_STATS = {
    "journal": ("canonical", "hash", "prev_hash", "signature"),
    "checkpoints": ("root", "note"),
    "bodies": ("sha256", "ciphertext"),
}


def checkpoints_app_id(tenant: str) -> str:
    """Application-transaction id recording the last checkpoint tree size copied for a tenant."""
    return f"{app_id(tenant)}:checkpoints"


def before_commit_hook(table: str, tenant: str, version: int) -> None:
    """Called after a batch is planned (recorded version and rows read) and before its Delta commit; a seam for tests."""


def after_commit_hook(table: str, tenant: str, version: int) -> None:
    """Called after each Delta commit and before the Postgres lag hint; a seam for crash tests."""


class LakeConflict(RuntimeError):
    """The recorded version moved under the writer (another writer without the cursor lock); re-plan."""


class LakeLockBusy(RuntimeError):
    """Another session held the tenant's lake lock past ``lake_lock_timeout_s``; nothing was copied.

    Carries the tenant id only. The wait is logged and recorded for ``oml status``.
    """

    def __init__(self, tenant: str, waited_s: float) -> None:
        super().__init__(f"lake lock of tenant {tenant} busy for {waited_s:g} s")
        self.tenant = tenant
        self.waited_s = waited_s


def table_uri(lake: str, name: str) -> str:
    return f"{lake.rstrip('/')}/{name}"


def writer_properties(name: str) -> WriterProperties:
    return WriterProperties(column_properties={c: ColumnProperties(statistics_enabled="NONE") for c in _NO_STATS[name]})


def table_configuration(name: str) -> dict[str, str]:
    return {
        # Only non-content columns get min/max in _delta_log (docs/lake.md).
        "delta.dataSkippingStatsColumns": STATS_COLUMNS[name],
        "delta.checkpointInterval": str(CHECKPOINT_INTERVAL),
    }


class Lake:
    """The three Delta tables under one lake URI (local path or ``s3://…``)."""

    def __init__(self, uri: str, storage_options: dict[str, str] | None = None) -> None:
        self.uri = uri
        self.storage_options = dict(storage_options) if storage_options else None
        self._ready = False
        self._lock = threading.Lock()

    def uri_of(self, name: str) -> str:
        return table_uri(self.uri, name)

    def ensure(self) -> None:
        """Create any missing table with its explicit schema, partitioning and configuration."""
        if self._ready:
            return
        with self._lock:
            if self._ready:
                return
            if "://" not in self.uri:
                import os

                os.makedirs(self.uri, exist_ok=True)
            for name, schema in TABLES.items():
                uri = self.uri_of(name)
                if DeltaTable.is_deltatable(uri, storage_options=self.storage_options):
                    continue
                try:
                    DeltaTable.create(uri, schema, mode="ignore", partition_by=PARTITION_BY,
                                      configuration=table_configuration(name), storage_options=self.storage_options,
                                      name=f"oml_{name}")
                except Exception:
                    # Another process created it first: fine if it exists now.
                    if not DeltaTable.is_deltatable(uri, storage_options=self.storage_options):
                        raise
            self._ready = True

    def table(self, name: str) -> DeltaTable:
        return DeltaTable(self.uri_of(name), storage_options=self.storage_options)

    def recorded(self, name: str, app: str) -> int:
        """The version last recorded for ``app`` in table ``name`` (0 when none), read fresh from the log."""
        return self.table(name).transaction_version(app) or 0

    def append(self, name: str, data: pa.Table, *, app: str, version: int, expected_before: int, tenant: str,
               snapshot: DeltaTable) -> None:
        """Append ``data`` with the application transaction ``(app, version)``; exactly once.

        ``snapshot`` is the ``DeltaTable`` that ``expected_before`` was read
        from: the commit is checked against every commit since, so another
        writer's commit of the same ``app`` fails ours (``CommitFailedError``)
        instead of both landing. After a failure the recorded version is read
        again: at or above ``version`` means these rows are in the lake (ours
        landed, or the other writer's did) and nothing is written; still
        ``expected_before`` means nothing landed and the write is retried;
        anything else raises :class:`LakeConflict` so the caller re-plans
        from the lake's record.
        """
        for attempt in range(1, COMMIT_ATTEMPTS + 1):
            try:
                write_deltalake(
                    snapshot, data, mode="append", partition_by=PARTITION_BY,
                    storage_options=self.storage_options, writer_properties=writer_properties(name),
                    commit_properties=CommitProperties(app_transactions=[Transaction(app_id=app, version=version)]),
                )
            except Exception as exc:
                recorded = self.recorded(name, app)
                if recorded >= version:
                    if isinstance(exc, CommitFailedError):
                        log.warning("lake %s: another writer committed through %d first; not committing again", name, recorded)
                    else:
                        log.warning("lake %s: commit reported %s but landed (recorded %d)", name, type(exc).__name__, recorded)
                    break
                if recorded != expected_before:
                    raise LakeConflict(f"{name}: recorded version moved from {expected_before} to {recorded}") from exc
                if attempt == COMMIT_ATTEMPTS:
                    raise
                log.warning("lake %s: commit failed (%s); retrying", name, type(exc).__name__)
                time.sleep(0.2 * 2 ** attempt)
            else:
                break
        after_commit_hook(name, tenant, version)


_lakes: dict[tuple[str, str], Lake] = {}
_lakes_lock = threading.Lock()


def lake_for(ctx: Context) -> Lake:
    """The process-wide :class:`Lake` for ``ctx.settings.lake`` and ``OML_LAKE_STORAGE_OPTIONS``."""
    uri = ctx.settings.lake
    opts = ctx.settings.lake_storage_options or None
    key = (uri, repr(sorted((opts or {}).items())))
    with _lakes_lock:
        lake = _lakes.get(key)
        if lake is None:
            lake = _lakes[key] = Lake(uri, opts)
    lake.ensure()
    return lake


# ---------------------------------------------------------------------------------------------- copying

class Batch(NamedTuple):
    """Rows read for one commit, as the table's Arrow data, and the application-transaction version they record."""

    table: pa.Table
    version: int


def _arrow(schema: pa.Schema, rows: list[tuple]) -> pa.Table:
    """``rows`` (tuples in ``schema``'s column order) as an Arrow table: one array per column, built from the
    transposed rows (a Python dict per row cost more than the Delta commit)."""
    return pa.Table.from_arrays([pa.array(col, type=f.type) for col, f in zip(zip(*rows), schema)], schema=schema)


def lock_tenant(conn: sa.Connection, tenant: str, settings: Any, *, lease: bool = True) -> int:
    """Take the tenant's lake lock (its ``lake-writer`` cursor row) in ``conn``'s transaction; returns the hint seq.

    Waits at most ``settings.lake_lock_timeout_s`` seconds, then raises
    :class:`LakeLockBusy`. With ``lease`` the holding session is ended by
    PostgreSQL once idle in this transaction for ``settings.lake_lease_s``
    seconds (a stopped worker frees the lock). Shared by the purge, which
    must not copy or delete while a writer runs.
    """
    timeout = float(settings.lake_lock_timeout_s)
    conn.execute(sa.text("SELECT set_config('lock_timeout', :v, true)"), {"v": f"{int(timeout * 1000)}ms"})
    if lease:
        conn.execute(sa.text("SELECT set_config('idle_in_transaction_session_timeout', :v, true)"),
                     {"v": f"{int(float(settings.lake_lease_s) * 1000)}ms"})
    try:
        conn.execute(sa.text("INSERT INTO consumer_cursors (tenant_id, consumer, seq) VALUES (:t, :c, 0) ON CONFLICT DO NOTHING"),
                     {"t": tenant, "c": CONSUMER})
        return conn.execute(sa.text("SELECT seq FROM consumer_cursors WHERE tenant_id = :t AND consumer = :c FOR UPDATE"),
                            {"t": tenant, "c": CONSUMER}).scalar_one()
    except sa.exc.OperationalError as exc:
        if isinstance(exc.orig, psycopg.errors.LockNotAvailable):
            raise LakeLockBusy(tenant, timeout) from None
        raise


def record_lock_wait(ctx: Context, tenant: str) -> None:
    """Log and record (for ``oml status``) that a writer gave up waiting for ``tenant``'s lake lock."""
    log.warning("lake-writer: tenant %s: lake lock held by another session for more than %g s; gave up "
                "(the holder's lease ends after %g s idle)", tenant, ctx.settings.lake_lock_timeout_s, ctx.settings.lake_lease_s)
    with ctx.db.tenant(ROLE, tenant) as conn:
        conn.execute(sa.text(
            "INSERT INTO consumer_cursors (tenant_id, consumer, seq) VALUES (:t, :c, 1)"
            " ON CONFLICT (tenant_id, consumer) DO UPDATE SET seq = consumer_cursors.seq + 1, updated_at = now()"),
            {"t": tenant, "c": LOCK_WAIT_CONSUMER})


def _fetch(conn: sa.Connection, sql: str, params: dict[str, Any]) -> list[tuple]:
    """``sql``'s rows as plain tuples, read in ``conn``'s transaction on its driver connection with binary results:
    bytea arrives as its bytes (not hex text) and no SQLAlchemy row is built per row."""
    with pipelined.wrapped(sql), conn.connection.driver_connection.cursor(binary=True) as cur:
        cur.execute(sql, params)
        return cur.fetchall()


def _journal_rows(conn, tenant: str, after: int, upto: int, limit: int) -> Batch | None:
    rows = _fetch(conn,
        "SELECT tenant_id, seq, event_id::text, type, kid, at, canonical, hash, prev_hash, signature FROM journal_events"
        " WHERE tenant_id = %(t)s AND seq > %(a)s AND seq <= %(u)s ORDER BY seq LIMIT %(n)s",
        {"t": tenant, "a": after, "u": upto, "n": limit})
    return Batch(_arrow(JOURNAL, rows), rows[-1][1]) if rows else None


def _body_rows(conn, tenant: str, after: int, upto: int, limit: int) -> Batch | None:
    while True:
        # Batches end on a seq boundary so a recorded version never splits one seq's artifacts.
        last = conn.execute(sa.text(
            "SELECT max(created_seq) FROM (SELECT created_seq FROM artifacts WHERE tenant_id = :t AND created_seq > :a"
            " AND created_seq <= :u ORDER BY created_seq LIMIT :n) s"),
            {"t": tenant, "a": after, "u": upto, "n": limit}).scalar()
        if last is None:
            return None
        # A purged artifact (ciphertext NULL) was erased before it was copied: it never enters the lake.
        rows = _fetch(conn,
            "SELECT tenant_id, artifact_id::text, kind, claim_id::text, version_id::text, created_seq, sha256, ciphertext"
            " FROM artifacts WHERE tenant_id = %(t)s AND created_seq > %(a)s AND created_seq <= %(l)s AND ciphertext IS NOT NULL"
            " ORDER BY created_seq, artifact_id", {"t": tenant, "a": after, "l": last})
        if rows:
            return Batch(_arrow(BODIES, rows), last)
        # Only purged artifacts in this range: Delta cannot record a range without a row,
        # so look further; a later commit's version covers this range too.
        after = last


def _checkpoint_rows(conn, tenant: str, after: int, limit: int) -> Batch | None:
    rows = _fetch(conn,
        "SELECT tenant_id, tree_size, root, note, kid, issued_at FROM checkpoints"
        " WHERE tenant_id = %(t)s AND tree_size > %(a)s ORDER BY tree_size LIMIT %(n)s",
        {"t": tenant, "a": after, "n": limit})
    return Batch(_arrow(CHECKPOINTS, rows), rows[-1][1]) if rows else None


def _copy(lake: Lake, name: str, app: str, tenant: str, fetch: Callable[[int], Batch | None]) -> tuple[int, int]:
    """Copy batches of table ``name`` until ``fetch`` finds nothing above the lake's record; returns the rows
    appended and the version the lake then records for ``app``."""
    written = 0
    conflicts = 0
    snapshot = lake.table(name)
    while True:
        # One snapshot for the plan and its commit (see "A lost lock" above).
        before = snapshot.transaction_version(app) or 0
        batch = fetch(before)
        if batch is None:
            return written, before
        before_commit_hook(name, tenant, batch.version)
        try:
            lake.append(name, batch.table, app=app, version=batch.version, expected_before=before, tenant=tenant,
                        snapshot=snapshot)
        except LakeConflict:
            conflicts += 1
            if conflicts > COMMIT_ATTEMPTS:
                raise
            snapshot = lake.table(name)
            continue
        written += batch.table.num_rows
        # The commit moved the snapshot to the version it made; this reads any commit after it, as a fresh open would.
        snapshot.update_incremental()


def catch_up(ctx: Context, tenant: str, *, batch_rows: int = BATCH_ROWS) -> int:
    """Copy everything of ``tenant`` not yet in the lake; returns the number of rows appended.

    Safe to call any number of times, concurrently and after a crash: it
    takes the tenant's cursor row lock, reads each table's recorded
    application-transaction version and copies only rows above it.
    Raises the underlying storage error after ``COMMIT_ATTEMPTS`` failed commits,
    and :class:`LakeLockBusy` (logged, recorded for ``oml status``) when another
    session holds the tenant's lock past ``lake_lock_timeout_s``.
    """
    lake = lake_for(ctx)
    try:
        with ctx.db.tenant(ROLE, tenant) as conn:
            lock_tenant(conn, tenant, ctx.settings)
            written = _catch_up_locked(lake, conn, tenant, batch_rows)
    except LakeLockBusy:
        record_lock_wait(ctx, tenant)
        raise
    if written:
        log.info("lake-writer: tenant %s: %d rows appended", tenant, written)
    return written


def _catch_up_locked(lake: Lake, conn: sa.Connection, tenant: str, batch_rows: int) -> int:
    head = conn.execute(sa.text("SELECT seq FROM chain_heads WHERE tenant_id = :t"), {"t": tenant}).scalar()
    if head is None:
        return 0
    app = app_id(tenant)
    journal_rows, journal_recorded = _copy(lake, "journal", app, tenant,
                                           lambda after: _journal_rows(conn, tenant, after, head, batch_rows))
    body_rows, _ = _copy(lake, "bodies", app, tenant, lambda after: _body_rows(conn, tenant, after, head, batch_rows))
    checkpoint_rows, checkpoints_recorded = _copy(lake, "checkpoints", checkpoints_app_id(tenant), tenant,
                                                  lambda after: _checkpoint_rows(conn, tenant, after, batch_rows))
    # The lag hints: what the lake records (read from its log after this run's last commit), whatever this run
    # wrote. Checkpoints get their own row because issuing one appends no journal event (so no outbox
    # wake-up): the sweep compares it with the newest checkpoint to re-wake the writer.
    conn.execute(sa.text("UPDATE consumer_cursors SET seq = :s, updated_at = now() WHERE tenant_id = :t AND consumer = :c"),
                 {"s": journal_recorded, "t": tenant, "c": CONSUMER})
    conn.execute(sa.text(
        "INSERT INTO consumer_cursors (tenant_id, consumer, seq) VALUES (:t, :c, :s)"
        " ON CONFLICT (tenant_id, consumer) DO UPDATE SET seq = EXCLUDED.seq, updated_at = now()"),
        {"s": checkpoints_recorded, "t": tenant, "c": CHECKPOINTS_CONSUMER})
    # Caught up while holding the lock: any earlier wait for it is over.
    conn.execute(sa.text("UPDATE consumer_cursors SET seq = 0, updated_at = now()"
                         " WHERE tenant_id = :t AND consumer = :c AND seq <> 0"), {"t": tenant, "c": LOCK_WAIT_CONSUMER})
    return journal_rows + body_rows + checkpoint_rows


def tenants(ctx: Context, role: str = ROLE) -> list[str]:
    with ctx.db.system(role) as conn:
        return list(conn.execute(sa.text("SELECT tenant_id FROM tenants ORDER BY tenant_id")).scalars())


def catch_up_all(ctx: Context) -> int:
    """:func:`catch_up` for every tenant; returns the total rows appended.

    A tenant whose lock is busy (:class:`LakeLockBusy`, already logged and
    recorded) is skipped: one stalled tenant does not hold up the others.
    """
    total = 0
    for t in tenants(ctx):
        try:
            total += catch_up(ctx, t)
        except LakeLockBusy:
            continue
    return total


def recorded_versions(ctx: Context, tenant: str) -> dict[str, int]:
    """What the lake records for ``tenant``: last journal seq, last body seq, last checkpoint tree size."""
    lake = lake_for(ctx)
    return {"journal": lake.recorded("journal", app_id(tenant)), "bodies": lake.recorded("bodies", app_id(tenant)),
            "checkpoints": lake.recorded("checkpoints", checkpoints_app_id(tenant))}


def compact(ctx: Context, tenant: str | None = None) -> dict[str, dict[str, Any]]:
    """Compact small files (``optimize.compact``) and write a Delta checkpoint, per table.

    ``tenant`` limits compaction to that partition. Returns delta-rs' metrics
    per table (files added/removed …). Compaction rewrites files; the
    replaced ones stay on storage until a vacuum (an operator job).
    """
    lake = lake_for(ctx)
    out: dict[str, dict[str, Any]] = {}
    for name in TABLES:
        dt = lake.table(name)
        filters = [("tenant_id", "=", tenant)] if tenant else None
        out[name] = dt.optimize.compact(partition_filters=filters, writer_properties=writer_properties(name))
        dt.update_incremental()
        dt.create_checkpoint()
    return out
