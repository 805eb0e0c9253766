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
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator

import sqlalchemy as sa
from sqlalchemy import event

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


class Database:
    """Owns one pooled engine per role. Thread-safe; create one per process.

    Args:
        owner_url: SQLAlchemy URL of the schema owner (``postgresql+psycopg://…``).
        role_password: password for the workload roles, if the server needs one.
        role_passwords: per-role passwords, overriding ``role_password`` for the roles they name.
    """

    def __init__(self, owner_url: str, role_password: str | None = None, pool_size: int = 5,
                 role_passwords: dict[str, str] | None = None) -> None:
        url = sa.make_url(owner_url)
        if url.drivername in ("postgresql", "postgres"):
            url = url.set(drivername="postgresql+psycopg")
        self.owner_url = url
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

    def engine(self, role: str | None) -> sa.Engine:
        key = role or "__owner__"
        with self._lock:
            eng = self._engines.get(key)
            if eng is None:
                eng = sa.create_engine(
                    self.url_for(role),
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
    def system(self, role: str | None) -> Iterator[sa.Connection]:
        """One transaction with no tenant bound: RLS then shows no tenant row (fails closed)."""
        with self.engine(role).begin() as conn:
            yield conn

    def dispose(self) -> None:
        with self._lock:
            for eng in self._engines.values():
                eng.dispose()
            self._engines.clear()
