"""Engines per workload role and per-transaction tenant binding.

Each workload connects as its own non-owner login role (``oml_admission``,
``oml_server``, ``oml_lake_writer``, ``oml_reconciler``, ``oml_indexer``,
``oml_relay``); the owner URL is used only for migrations and for the
``SECURITY DEFINER`` maintenance functions' owner. The tenant is bound per
transaction with ``set_config('oml.tenant_id', T, true)`` — psycopg binds
parameters server-side and ``SET LOCAL`` cannot take them (``SET LOCAL
oml.tenant_id = $1`` is a syntax error). Every pooled connection is reset
when checked out (:data:`RESET`:
what ``DISCARD ALL`` does but for dropping prepared statements and cached
plans), so no setting, role, temporary table, cursor, listener or advisory
lock left by one borrower reaches the next (SQLAlchemy's own reset on return
is a ROLLBACK only); the same round trip is the liveness check (a connection
that fails it is replaced), so there is no separate pre-ping (one
round trip per transaction fewer); for admission and the server it also opens the
transaction (:data:`BEGIN_AT_CHECKOUT`, one more fewer; at ``REPEATABLE READ`` for a read,
:meth:`Database.read`, and a snapshot, :meth:`Database.snapshot`, which have an engine of their own), and every other tenant transaction sends its ``BEGIN`` and the
tenant binding together (:meth:`Database.bound`, one more fewer). The prepared statements that survive are
prepared on purpose: admission's set statements (``prepare=True`` in
``services/journal/sets.py``) and opening lookups (``pipelined.Query``'s
``prepare``; the tenant binding is not one), and the read path's lookups by full key
(:func:`oml.services.storage.pipelined.lookup`); nothing is prepared automatically: OML's SQL
text with no data in it, whose parameters are bound at each execution and
whose row-level security reads the transaction's tenant binding when it runs
(docs/adr/0001-admission-write-path.md).

Reads may go to hot standbys (``replica_urls``): :meth:`Database.read`
opens a ``REPEATABLE READ``, tenant-bound transaction, read-only on a standby, or read-write (its read-log row) on
the primary when none is configured, none answers, or the standby has not yet replayed
the position the caller asked to read after (docs/operations.md, "Recall
from hot standbys").

A process that does not migrate (``OML_AUTO_MIGRATE=false``: ``check_revision``) reads the database's revision as
each workload role before that role's first use (:meth:`Database.engine`, one ``SELECT`` of ``alembic_version`` on
the primary) and refuses the use while it is not its release's head: ``db.migrations_pending`` (503) when the
database is behind, ``db.unknown_revision`` (503) when a newer release migrated it (docs/operator-guide.md,
"Upgrading"). Once a role reads the head, the process never reads it again as that role; while it does not, each
use reads it again, so a migration run while the process runs is seen without a restart.
"""
from __future__ import annotations

import functools
import itertools
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import psycopg
import sqlalchemy as sa
from psycopg import generators, pq
from psycopg import sql as pgsql
from sqlalchemy import event

from oml.services.storage import pipelined, timeouts

log = logging.getLogger(__name__)

# DISCARD ALL's steps (PostgreSQL docs, DISCARD) without DEALLOCATE ALL and DISCARD PLANS, then a count of the
# prepared statements made with SQL's PREPARE; one simple query. psycopg prepares through the protocol (from_sql
# false), so a statement from SQL is one a borrower planted, perhaps under psycopg's own name to be run by the
# next borrower in its place: then every prepared statement goes (DEALLOCATE ALL, which psycopg sees and
# forgets its own; docs/adr/0001-admission-write-path.md).
RESET = ("CLOSE ALL; SET SESSION AUTHORIZATION DEFAULT; RESET ALL; UNLISTEN *; SELECT pg_advisory_unlock_all();"
         " DISCARD TEMP; DISCARD SEQUENCES; SELECT count(*) FROM pg_prepared_statements WHERE from_sql")
_BIND = "SELECT set_config('oml.tenant_id', %(t)s, true)"
# The same binding as one simple query behind psycopg's own BEGIN, the tenant as a quoted literal (_begin_bound).
_BEGIN_BIND = pgsql.SQL("BEGIN; SELECT set_config('oml.tenant_id', {}, true)")

WORKLOAD_ROLES = ("oml_admission", "oml_server", "oml_lake_writer", "oml_reconciler", "oml_indexer", "oml_relay")


# Admission's and the server's connections come out of the pool inside a transaction, opened in the reset's round
# trip: psycopg sends its own BEGIN, and waits for it, even in pipeline mode, so this is one round trip fewer in every
# act (docs/adr/0001-admission-write-path.md) and every read on the primary (docs/recall.md, "Latency"). The reset's
# steps and its count of planted statements run and commit in a transaction of their own, as the plain reset's do
# (UNLISTEN takes effect at that COMMIT; a later rollback cannot bring back what they removed), then the act's
# transaction opens and runs nothing: a REPEATABLE READ transaction's snapshot is taken by the caller's first statement,
# which may be a LOCK (Database.read's ``locks``). Both BEGINs state their level, so a default a borrower planted
# (default_transaction_isolation, default_transaction_read_only, default_transaction_deferrable) starts neither.
# Primary only: a standby refuses READ WRITE. psycopg refuses per-connection transaction settings (execution_options
# isolation_level, autocommit) on such a connection while it is in that transaction: a loud error, never a silently
# different level: a REPEATABLE READ transaction comes from an engine of its own (Database.read, Database.snapshot),
# whose connections carry the level, and its reset opens the transaction at that level.
BEGIN_AT_CHECKOUT = frozenset({"oml_admission", "oml_server"})
_BEGIN = {level: f"BEGIN ISOLATION LEVEL {level.name.replace('_', ' ')}, READ WRITE, NOT DEFERRABLE"
          for level in psycopg.IsolationLevel}
_RESET_THEN_BEGIN = {level: f"{_BEGIN[psycopg.IsolationLevel.READ_COMMITTED]}; {RESET}; COMMIT; {begin}".encode()
                     for level, begin in _BEGIN.items()}
#: The level of a read and of a snapshot (:meth:`Database.read`, :meth:`Database.snapshot`): every statement of the
#: transaction sees one snapshot. Both come from the one engine of this level per role.
SNAPSHOT_ISOLATION = "REPEATABLE READ"


def _reset(dbapi_connection, connection_record, connection_proxy, *, begin: bool = False) -> None:
    """Reset a connection as it is checked out; a dead one raises ``DisconnectionError``, on which the
    pool discards it and checks out another (SQLAlchemy, "Disconnect Handling - Pessimistic").

    ``begin``: then leave it inside a read-write transaction opened in the same round trip (:data:`BEGIN_AT_CHECKOUT`)
    at the connection's isolation level (psycopg's ``isolation_level``: the engine's; READ COMMITTED when it has
    none), which has run no statement, unless it carries ``read_only`` or ``deferrable`` of its own, which psycopg's
    own BEGIN states."""
    dc = dbapi_connection
    try:
        dc.rollback()
        if begin and (dc.read_only, dc.deferrable) == (None, None):
            level = dc.isolation_level or psycopg.IsolationLevel.READ_COMMITTED
            # libpq directly, or psycopg would put its own BEGIN in front; psycopg's own wait for the results, which
            # lets the process's other threads run meanwhile (libpq's blocking calls in psycopg hold the GIL).
            dc.pgconn.send_query(_RESET_THEN_BEGIN[level])
            if _planted(dc.wait(generators.execute(dc.pgconn)), dc.pgconn):
                # DEALLOCATE ALL outside the transaction handed out: that one must run nothing before the borrower's
                # first statement (a read's LOCK comes before its snapshot: lock_first).
                dc.rollback()
                dc.autocommit = True
                try:
                    dc.execute("DEALLOCATE ALL")  # not transactional; psycopg sees it
                finally:
                    dc.autocommit = False
                res = dc.pgconn.exec_(_BEGIN[level].encode())
                if res.status != pq.ExecStatus.COMMAND_OK or dc.pgconn.transaction_status != pq.TransactionStatus.INTRANS:
                    raise psycopg.OperationalError("the transaction did not open")
            return
        dc.autocommit = True
        try:
            cur = dc.execute(RESET)
            while cur.nextset():  # to the last statement's result: the count
                pass
            if cur.fetchone()[0]:
                dc.execute("DEALLOCATE ALL")
        finally:
            dc.autocommit = False
    except Exception as exc:
        raise sa.exc.DisconnectionError(f"pooled connection failed its reset: {type(exc).__name__}") from None


def _planted(results: Sequence[pq.abc.PGresult], pgconn: pq.abc.PGconn) -> int:
    """The count of planted statements among the results of :data:`_RESET_THEN_BEGIN` (it is not the last); raises
    ``OperationalError`` unless every statement succeeded and the connection is left inside the new transaction."""
    counts = [r for r in results if r.status == pq.ExecStatus.TUPLES_OK]
    if (any(r.status not in (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK) for r in results) or not counts
            or pgconn.transaction_status != pq.TransactionStatus.INTRANS):
        raise psycopg.OperationalError("the reset failed")
    return int(counts[-1].get_value(0, 0))


def _begin_bound(conn: sa.Connection, tenant: str) -> bool:
    """Open ``conn``'s transaction and bind ``tenant`` in one round trip; False (nothing sent) when psycopg would
    not send a plain ``BEGIN`` itself: the connection is already in a transaction (admission's), in autocommit, or
    carries transaction characteristics of its own (isolation level, read only, deferrable), which psycopg's BEGIN
    states. ``BEGIN`` is psycopg's own statement, so the transaction is the one psycopg would have opened; psycopg
    and SQLAlchemy read the transaction status from the connection, so both carry on inside it (commit, rollback).

    The tenant goes in as a literal quoted by psycopg (``psycopg.sql.Literal``): a simple query takes no
    parameters. Raises the SQLAlchemy error psycopg's would map to (``OperationalError`` for a lost connection)."""
    dc = conn.connection.driver_connection
    if (dc.autocommit or dc.pgconn.transaction_status != pq.TransactionStatus.IDLE
            or (dc.isolation_level, dc.read_only, dc.deferrable) != (None, None, None)):
        return False
    with pipelined.wrapped("-- BEGIN and the tenant binding"):
        res = dc.pgconn.exec_(_BEGIN_BIND.format(pgsql.Literal(tenant)).as_bytes(dc))
        if res.status == pq.ExecStatus.FATAL_ERROR:
            raise pipelined.error_for(dc.pgconn, res, "the transaction did not open bound to its tenant")
        if res.status != pq.ExecStatus.TUPLES_OK or dc.pgconn.transaction_status != pq.TransactionStatus.INTRANS:
            raise psycopg.OperationalError("the transaction did not open bound to its tenant")
    return True


# A group commit's chunk (services/journal/batch.py) sends 93-97 KB of parameters in pipeline mode (LoCoMo
# turns, a scratch count); the default send buffer of a Unix-domain socket (net.core.wmem_default, 208 KB of
# kernel accounting, which counts more than the payload) fills, and admission then blocks until PostgreSQL is
# scheduled to read it (a reading while developing: write_artifacts ~25 -> ~7 µs a claim). TCP sockets keep the kernel's auto-tuning, which setting the
# option would turn off. The kernel caps the value at net.core.wmem_max.
SEND_BUFFER = 1 << 20


def _widen_send_buffer(dbapi_connection, connection_record) -> None:
    sock = socket.socket(fileno=dbapi_connection.pgconn.socket)
    try:
        if sock.family == socket.AF_UNIX:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
    except OSError:  # a platform without the option: the default buffer works, more slowly
        pass
    finally:
        sock.detach()  # the descriptor stays libpq's


def lock_first(tables: Sequence[str]) -> pipelined.Query:
    """``LOCK TABLE ONLY`` ``tables`` ``IN ACCESS SHARE MODE``, in their order: a transaction's first statement. A
    ``REPEATABLE READ`` transaction's snapshot is taken by its first statement that needs one, before the locks that
    statement then waits for; ``LOCK`` takes none (PostgreSQL documentation, "LOCK"). A read that waited for a
    rewrite of a table it reads (``TRUNCATE``, ``ALTER … TYPE``: not MVCC-safe) would otherwise see the rewritten
    table empty and the catalog as it was; locked first, it sees both as they are after the rewrite, or keeps the
    rewrite out until it ends. ``ONLY``: a partitioned table's parent, which a rewrite and a new partition lock first.
    Raises ``ValueError`` for a name that is not a plain identifier (the names are OML's, never a caller's)."""
    if not tables or not all(t.isidentifier() and t.isascii() for t in tables):
        raise ValueError("lock_first takes plain table names")
    return pipelined.Query(f"LOCK TABLE ONLY {', '.join(tables)} IN ACCESS SHARE MODE", {})


@dataclass
class ReadTx:
    """A read transaction: ``conn`` bound to the tenant; ``source`` is ``"primary"`` or ``"replica:<n>"``."""

    conn: sa.Connection
    source: str
    #: The rows of each query :meth:`Database.read` was asked to run with the binding, in order.
    rows: list[list] = field(default_factory=list)

    @property
    def on_primary(self) -> bool:
        return self.source == "primary"


class Database:
    """Owns one pooled engine per role. Thread-safe; create one per process.

    Args:
        owner_url: SQLAlchemy URL of the schema owner (``postgresql+psycopg://…``).
        role_password: password for the workload roles, if the server needs one.
        role_passwords: per-role passwords, overriding ``role_password`` for the roles they name.
        replica_urls: owner-shaped URLs of hot standbys of the same cluster (user and password are
            replaced per role, as for the primary); reads go there through :meth:`read`.
        replica_wait_s: how long :meth:`read` waits for a standby to replay a requested position
            before it reads from the primary instead (seconds).
        lock_timeout_ms, statement_timeout_ms: each workload connection's ``lock_timeout`` and
            ``statement_timeout`` (milliseconds, 0: none; :mod:`oml.services.storage.timeouts`). The owner's
            connections (migrations) have neither.
    """

    def __init__(self, owner_url: str, role_password: str | None = None, pool_size: int = 5,
                 role_passwords: dict[str, str] | None = None, replica_urls: list[str] | None = None,
                 replica_wait_s: float = 0.5, lock_timeout_ms: int = timeouts.LOCK_TIMEOUT_MS,
                 statement_timeout_ms: int = timeouts.STATEMENT_TIMEOUT_MS, check_revision: bool = False) -> None:
        url = _psycopg(owner_url)
        self.owner_url = url
        self.replica_urls = [_psycopg(u) for u in replica_urls or []]
        self.replica_wait_s = replica_wait_s
        self._next_replica = itertools.count()
        #: Reads served per source and fallbacks taken, for /metrics (plain ints: no lock needed for a gauge).
        self.read_counts: dict[str, int] = {}
        self.role_password = role_password
        self.role_passwords = dict(role_passwords or {})
        self.pool_size = pool_size
        self.lock_timeout_ms = lock_timeout_ms
        self.statement_timeout_ms = statement_timeout_ms
        self._engines: dict[str, sa.Engine] = {}
        self._lock = threading.Lock()
        self.check_revision = check_revision
        #: Workload roles that read the release's head (never read again); one lock per role, so one statement reads.
        self._at_head: set[str] = set()
        self._revision_locks = {r: threading.Lock() for r in WORKLOAD_ROLES}
        self._refused: dict[str, str | None] = {}  # role -> the revision last refused, logged once per change
        self._head: str | None = None

    def url_for(self, role: str | None) -> sa.URL:
        if role is None:
            return self.owner_url
        if role not in WORKLOAD_ROLES:
            raise ValueError(f"unknown workload role {role!r}")
        return self.owner_url.set(username=role, password=self.role_passwords.get(role, self.role_password))

    def engine(self, role: str | None, replica: int | None = None, *, isolation: str | None = None) -> sa.Engine:
        """The pooled engine of ``role`` (``None``: the owner) on the primary, or on standby number ``replica``;
        ``isolation`` (``"REPEATABLE READ"``, …): an engine of its own whose connections open every transaction at that
        level (:meth:`read`, :meth:`snapshot`; at checkout for :data:`BEGIN_AT_CHECKOUT` on the primary).

        With ``check_revision``, a workload role's engine (primary or standby) is handed out only once the role has
        read its release's head revision on the primary (:meth:`_require_head`); until then each call reads it again
        and raises the refusal."""
        eng = self._engine(role, replica, isolation)
        if role is not None and self.check_revision and role not in self._at_head:
            self._require_head(role)
        return eng

    def _require_head(self, role: str) -> None:
        """Read ``alembic_version`` as ``role`` on the primary; return at the release's head (and remember it), else
        raise ``db.migrations_pending`` or ``db.unknown_revision`` (:func:`oml.services.storage.migrate.refusal`).
        A role refused the read (42501) is on a database older than the grant (0028); one with no table (42P01), on a
        database never migrated. A connection error is raised as it is (``db.unavailable`` on the CLI)."""
        from oml.services.storage import migrate

        with self._revision_locks[role]:
            if role in self._at_head:
                return
            if self._head is None:
                self._head = migrate.head()
            revision, readable = None, True
            with self._engine(role, None).connect() as conn:
                try:
                    revision = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()
                except sa.exc.ProgrammingError as exc:
                    state = getattr(exc.orig, "sqlstate", None)
                    if state == "42501":
                        readable = False
                    elif state != "42P01":
                        raise
            refused = migrate.refusal(revision, self._head, readable=readable)
            if refused is None:
                if role in self._refused:
                    log.info("OML: the database is at this release's head revision %s; %s serves", self._head, role)
                self._at_head.add(role)
                return
            said = revision if readable else "unreadable"
            if self._refused.get(role, "") != said:  # once per role and revision: not at every refused use
                self._refused[role] = said
                log.warning("OML: %s refused for %s: %s", refused.code, role, refused.detail)
            raise refused

    def _engine(self, role: str | None, replica: int | None, isolation: str | None = None) -> sa.Engine:
        key = f"{role or '__owner__'}@{'primary' if replica is None else replica}/{isolation or 'default'}"
        with self._lock:
            eng = self._engines.get(key)
            if eng is None:
                url = self.url_for(role)
                if replica is not None:
                    r = self.replica_urls[replica]
                    url = url.set(host=r.host, port=r.port, database=r.database or url.database, query=r.query)
                eng = sa.create_engine(
                    url,
                    pool_size=self.pool_size,
                    max_overflow=self.pool_size * 2,
                    pool_reset_on_return="rollback",
                    # Nothing is prepared automatically (a generic plan could ignore an index a
                    # recall needs, such as a tenant partition's HNSW); a statement executed with prepare=True is:
                    # lookups by full key whose plan cannot depend on their parameters.
                    # A workload's statement waits at most lock_timeout for a lock a compromised credential may
                    # hold; startup options, so RESET ALL at checkout restores them (services/storage/timeouts.py).
                    connect_args={"prepare_threshold": 2**31 - 1} | ({} if role is None else {
                        "options": " ".join(filter(None, (str(url.query.get("options") or ""),
                                                          timeouts.options(self.lock_timeout_ms, self.statement_timeout_ms))))}),
                    # Parameters carry plaintext (the indexer's text, a subject under erasure): never
                    # in SQLAlchemy's INFO log nor in a StatementError's message (docs/erasure.md, Logs).
                    hide_parameters=True,
                    **({} if isolation is None else {"isolation_level": isolation}),
                )
                event.listen(eng, "connect", _widen_send_buffer)
                event.listen(eng, "checkout", functools.partial(_reset, begin=role in BEGIN_AT_CHECKOUT and replica is None))
                self._engines[key] = eng
            return eng

    @contextmanager
    def tenant(self, role: str | None, tenant: str, *, isolation: str | None = None) -> Iterator[sa.Connection]:
        """One transaction as ``role`` with ``oml.tenant_id`` bound to ``tenant``; commits on success. ``isolation``:
        its level (:meth:`engine`; :data:`SNAPSHOT_ISOLATION` for a read that answers a client from one snapshot)."""
        with self.bound(role, tenant, (), isolation=isolation) as (conn, _):
            yield conn

    @contextmanager
    def bound(self, role: str | None, tenant: str, queries: Sequence[pipelined.Query], *, isolation: str | None = None,
              locks: Sequence[str] = ()) -> Iterator[tuple[sa.Connection, list[list]]]:
        """:meth:`tenant`, with ``queries`` run right after the binding (:func:`oml.services.storage.pipelined.fetch`);
        yields the connection and each query's rows. ``isolation``: the transaction's level (:meth:`engine`);
        ``locks``: tables locked ``IN ACCESS SHARE MODE`` before the binding (:func:`lock_first`).

        Round trips: a connection that comes out of the pool inside a transaction (:data:`BEGIN_AT_CHECKOUT`) sends
        the locks, the binding and the queries in one; any other sends ``BEGIN`` and the binding in one
        (:func:`_begin_bound`: psycopg would send its ``BEGIN`` alone and wait for it), then the queries, if any, in
        one more (with ``locks``: psycopg's ``BEGIN``, then the rest in one)."""
        with self.engine(role, isolation=isolation).begin() as conn:
            if not locks and _begin_bound(conn, tenant):
                rows = pipelined.fetch(conn, list(queries)) if queries else []
                yield conn, rows
            else:
                first = [lock_first(locks)] if locks else []
                rows = pipelined.fetch(conn, [*first, pipelined.Query(_BIND, {"t": tenant}), *queries])
                yield conn, rows[1 + len(first):]

    @contextmanager
    def snapshot(self, role: str | None, tenant: str) -> Iterator[tuple[sa.Connection, sa.RootTransaction]]:
        """One ``REPEATABLE READ`` transaction as ``role`` (``None``: the owner) with ``tenant`` bound: every statement
        reads the same snapshot (a verification, an export, a reconciliation). Yields the connection and its
        transaction; commits on success unless the caller ended it."""
        with self.engine(role, isolation=SNAPSHOT_ISOLATION).connect() as conn, conn.begin() as tx:
            conn.execute(sa.text("SELECT set_config('oml.tenant_id', :t, true)"), {"t": tenant})
            yield conn, tx

    @contextmanager
    def read(self, role: str, tenant: str, *, after_lsn: str | None = None,
             queries: Sequence[pipelined.Query] = (), locks: Sequence[str] = (),
             usable: Callable[[list[list]], bool] | None = None) -> Iterator[ReadTx]:
        """A ``REPEATABLE READ`` transaction (:data:`SNAPSHOT_ISOLATION`) as ``role`` bound to ``tenant``, on a standby
        when one can serve it; ``queries`` run right after the binding in the same round trip, their rows in
        :attr:`ReadTx.rows`. Every statement of the read sees one snapshot, taken by the binding: the rows of its
        candidates, read in more than one statement, and their verdicts and bodies agree with each other, as of one
        instant (docs/recall.md, "One snapshot"). On the primary the only write is the read-log row (an insert:
        nothing for a concurrent transaction to conflict with); a standby's transaction is read-only. ``locks``:
        tables the read locks ``IN ACCESS SHARE MODE`` before its snapshot (:func:`lock_first`), in the same round
        trip.

        Standbys are tried round-robin; one that refuses the connection is
        skipped. With ``after_lsn`` (a ``pg_lsn`` text: read your writes) a
        standby serves only once ``pg_last_wal_replay_lsn()`` has reached it,
        waiting at most ``replica_wait_s``; otherwise, and when no standby
        answers, the primary serves. RLS, the tenant binding and the
        ``SECURITY DEFINER`` search functions are the same objects on a
        standby (physical replication), so the read is the same read.
        ``usable``: given a standby's rows of ``queries``, False when its
        snapshot cannot serve this read (it has not replayed something the
        read needs, such as the reading key: services/reads/scope.py); that
        standby is then skipped like one behind ``after_lsn``.
        """
        for n in self._replica_order():
            try:
                cm = self.engine(role, n).connect()
                conn = cm.__enter__()
            except sa.exc.OperationalError:
                log.warning("replica %d refused a connection; trying the next source", n)
                self._count(f"replica:{n}:unreachable")
                continue
            try:
                if after_lsn is not None and not self._replayed(conn, after_lsn):
                    self._count(f"replica:{n}:behind")
                    continue
                with conn.begin():
                    first = [pipelined.Query(f"SET TRANSACTION ISOLATION LEVEL {SNAPSHOT_ISOLATION}, READ ONLY", {}),
                             *([lock_first(locks)] if locks else [])]
                    rows = pipelined.fetch(conn, [*first, pipelined.Query(_BIND, {"t": tenant}), *queries])
                    got = rows[len(first) + 1:]
                    if usable is not None and not usable(got):
                        self._count(f"replica:{n}:behind")
                        continue  # the read-only transaction commits: nothing to undo, prepared statements kept
                    self._count(f"replica:{n}")
                    yield ReadTx(conn, f"replica:{n}", got)
                    return
            finally:
                cm.__exit__(None, None, None)
        self._count("primary")
        with self.bound(role, tenant, queries, isolation=SNAPSHOT_ISOLATION, locks=locks) as (conn, rows):
            yield ReadTx(conn, "primary", rows)

    def _replica_order(self) -> list[int]:
        if not self.replica_urls:
            return []
        start = next(self._next_replica) % len(self.replica_urls)
        return [(start + i) % len(self.replica_urls) for i in range(len(self.replica_urls))]

    def _replayed(self, conn: sa.Connection, lsn: str) -> bool:
        deadline = time.monotonic() + self.replica_wait_s
        while True:
            done = conn.execute(sa.text("SELECT coalesce(pg_last_wal_replay_lsn() >= CAST(:l AS pg_lsn), true)"),
                                {"l": lsn}).scalar()
            # Commit, not rollback: psycopg answers a rollback by deallocating every statement the connection
            # prepared (pipelined.lookup's), and this transaction only read.
            conn.commit()
            if done or time.monotonic() >= deadline:
                return bool(done)
            time.sleep(0.01)

    def _count(self, source: str) -> None:
        self.read_counts[source] = self.read_counts.get(source, 0) + 1

    def write_position(self) -> str:
        """The primary's current WAL write position (``pg_lsn`` text), taken after a write committed.

        A standby that has replayed it shows every transaction committed before this call.
        """
        # begin(): committed, where connect() would return it to the pool's rollback, which psycopg answers by
        # deallocating the read path's prepared lookups on this oml_server connection (_replayed).
        with self.engine("oml_server").begin() as conn:
            return str(conn.execute(sa.text("SELECT pg_current_wal_lsn()")).scalar())

    @contextmanager
    def system(self, role: str | None) -> Iterator[sa.Connection]:
        """One transaction with no tenant bound: RLS then shows no tenant row (fails closed)."""
        with self.engine(role).begin() as conn:
            yield conn

    def dispose(self) -> None:
        with self._lock:
            for eng in self._engines.values():
                eng.dispose()
            self._engines.clear()


def _psycopg(url: str) -> sa.URL:
    u = sa.make_url(url)
    return u.set(drivername="postgresql+psycopg") if u.drivername in ("postgresql", "postgres") else u
