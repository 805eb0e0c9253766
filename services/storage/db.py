"""Engines per workload role and per-transaction tenant binding.

Each workload connects as its own non-owner login role (``oml_admission``,
``oml_server``, ``oml_lake_writer``, ``oml_reconciler``, ``oml_indexer``,
``oml_relay``); the owner URL is used only for migrations and for the
``SECURITY DEFINER`` maintenance functions' owner. The tenant is bound per
transaction with ``set_config('oml.tenant_id', T, true)`` — psycopg binds
parameters server-side and ``SET LOCAL`` cannot take them (FIELD-NOTES,
Tenancy). Every pooled connection runs ``DISCARD ALL`` when checked in, so
no setting, role or prepared plan survives to the next borrower
(SQLAlchemy's own reset is a ROLLBACK only).

Reads may go to hot standbys (``replica_urls``, issue 16): :meth:`Database.read`
opens a read-only, tenant-bound transaction on a standby, or on the primary
when none is configured, none answers, or the standby has not yet replayed
the position the caller asked to read after (docs/operations.md, "Recall
from hot standbys").
"""
from __future__ import annotations

import itertools
import logging
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import sqlalchemy as sa
from sqlalchemy import event

log = logging.getLogger(__name__)

WORKLOAD_ROLES = ("oml_admission", "oml_server", "oml_lake_writer", "oml_reconciler", "oml_indexer", "oml_relay")


def _discard_all(dbapi_connection, connection_record) -> None:
    try:
        dbapi_connection.rollback()
        dbapi_connection.autocommit = True
        try:
            dbapi_connection.execute("DISCARD ALL")
        finally:
            dbapi_connection.autocommit = False
    except Exception:  # a broken connection is dropped rather than reused
        connection_record.invalidate()


@dataclass
class ReadTx:
    """A read transaction: ``conn`` bound to the tenant; ``source`` is ``"primary"`` or ``"replica:<n>"``."""

    conn: sa.Connection
    source: str

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
    """

    def __init__(self, owner_url: str, role_password: str | None = None, pool_size: int = 5,
                 role_passwords: dict[str, str] | None = None, replica_urls: list[str] | None = None,
                 replica_wait_s: float = 0.5) -> None:
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
        self._engines: dict[str, sa.Engine] = {}
        self._lock = threading.Lock()

    def url_for(self, role: str | None) -> sa.URL:
        if role is None:
            return self.owner_url
        if role not in WORKLOAD_ROLES:
            raise ValueError(f"unknown workload role {role!r}")
        return self.owner_url.set(username=role, password=self.role_passwords.get(role, self.role_password))

    def engine(self, role: str | None, replica: int | None = None) -> sa.Engine:
        """The pooled engine of ``role`` (``None``: the owner) on the primary, or on standby number ``replica``."""
        key = f"{role or '__owner__'}@{'primary' if replica is None else replica}"
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
                    pool_pre_ping=True,
                    pool_reset_on_return="rollback",
                    # DISCARD ALL drops server-side prepared statements behind
                    # psycopg's back; never prepare, so nothing can go stale.
                    connect_args={"prepare_threshold": None},
                    # Parameters carry plaintext (the indexer's text, a subject under erasure): never
                    # in SQLAlchemy's INFO log nor in a StatementError's message (docs/erasure.md, Logs).
                    hide_parameters=True,
                )
                event.listen(eng, "checkin", _discard_all)
                self._engines[key] = eng
            return eng

    @contextmanager
    def tenant(self, role: str, tenant: str) -> Iterator[sa.Connection]:
        """One transaction as ``role`` with ``oml.tenant_id`` bound to ``tenant``; commits on success."""
        with self.engine(role).begin() as conn:
            conn.execute(sa.text("SELECT set_config('oml.tenant_id', :t, true)"), {"t": tenant})
            yield conn

    @contextmanager
    def read(self, role: str, tenant: str, *, after_lsn: str | None = None) -> Iterator[ReadTx]:
        """A read-only transaction as ``role`` bound to ``tenant``, on a standby when one can serve it.

        Standbys are tried round-robin; one that refuses the connection is
        skipped. With ``after_lsn`` (a ``pg_lsn`` text: read your writes) a
        standby serves only once ``pg_last_wal_replay_lsn()`` has reached it,
        waiting at most ``replica_wait_s``; otherwise, and when no standby
        answers, the primary serves. RLS, the tenant binding and the
        ``SECURITY DEFINER`` search functions are the same objects on a
        standby (physical replication), so the read is the same read.
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
                    conn.execute(sa.text("SET TRANSACTION READ ONLY"))
                    conn.execute(sa.text("SELECT set_config('oml.tenant_id', :t, true)"), {"t": tenant})
                    self._count(f"replica:{n}")
                    yield ReadTx(conn, f"replica:{n}")
                    return
            finally:
                cm.__exit__(None, None, None)
        self._count("primary")
        with self.tenant(role, tenant) as conn:
            yield ReadTx(conn, "primary")

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
            conn.rollback()
            if done or time.monotonic() >= deadline:
                return bool(done)
            time.sleep(0.01)

    def _count(self, source: str) -> None:
        self.read_counts[source] = self.read_counts.get(source, 0) + 1

    def write_position(self) -> str:
        """The primary's current WAL write position (``pg_lsn`` text), taken after a write committed.

        A standby that has replayed it shows every transaction committed before this call.
        """
        with self.engine("oml_server").connect() as conn:
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
