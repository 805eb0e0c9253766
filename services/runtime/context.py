"""Process wiring: settings → database (embedded or external) → KeyStore → services.

``open_context()`` is what every entry point (CLI, HTTP app, MCP server,
workers) calls. On the embedded default it starts PostgreSQL under the
home (``OML_HOME``, else the nearest ``.oml``, else the per-user data
directory: :mod:`oml.services.runtime.home`), migrates it to head, and checks pgvector. With
``OML_AUTO_MIGRATE=false`` it migrates nothing, and each workload role is refused until it reads this release's head
revision in the database (:class:`~oml.services.storage.db.Database`, ``check_revision``).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from oml.services.keys.keystore import KeyStore, LocalKeyStore, load_master_key
from oml.services.runtime.settings import Settings, get_settings
from oml.services.storage import embedded
from oml.services.storage.db import Database
from oml.services.storage.migrate import upgrade

log = logging.getLogger(__name__)


@dataclass
class Context:
    settings: Settings
    db: Database
    keystore: KeyStore

    @cached_property
    def admission(self):
        from oml.services.claims.admission import Admission

        return Admission(self.db, self.keystore, acts=self.acts, max_body_chars=self.settings.max_body_chars)

    @cached_property
    def acts(self):
        """The process's one act runner: every capability that journals acts through it."""
        from oml.services.journal.acts import ActRunner
        from oml.services.journal.state_snapshots import Policy
        from oml.services.keys.signer import Signer

        s = self.settings
        return ActRunner(self.db, Signer(self.keystore), idempotency_hours=s.idempotency_retention_hours,
                         snapshots=Policy(s.verified_state_snapshot_events, s.verified_state_snapshot_every,
                                          s.verified_state_snapshot_interval_s))

    @cached_property
    def tenancy(self):
        from oml.services.tenancy.acts import Tenancy

        return Tenancy(self.acts, self.keystore)

    def close(self) -> None:
        self.db.dispose()


def owner_url(settings: Settings) -> str:
    if settings.database_url:
        return settings.database_url
    return embedded.start(settings.home)


def open_context(settings: Settings | None = None, *, migrate: bool = True) -> Context:
    settings = settings or get_settings()
    url = owner_url(settings)
    db = Database(url, settings.role_password, settings.pool_size, settings.role_passwords,
                  replica_urls=settings.replica_urls, replica_wait_s=settings.replica_wait_s,
                  lock_timeout_ms=settings.db_lock_timeout_ms, statement_timeout_ms=settings.db_statement_timeout_ms,
                  check_revision=not settings.auto_migrate)
    # With auto_migrate off the process never connects as the owner (it may not hold its password); each workload
    # role reads the database's revision before its first use instead, and is refused while it is not this
    # release's head (Database.engine; docs/operator-guide.md, "Upgrading").
    if settings.auto_migrate:
        embedded.check_pgvector(db.engine(None))
        if migrate:
            upgrade(str(db.owner_url.render_as_string(hide_password=False)), settings.role_connection_limit)
    keystore = DeferredKeyStore(settings)
    if not settings.database_url:
        keystore.open()  # embedded default: one process plays every workload; load (and warn) at start
    return Context(settings, db, keystore)


def describe_keystore(store: Any) -> str:
    """Where a KeyStore keeps keys, in words for reports (``local key files`` or the token's label)."""
    describe = getattr(store, "describe", None)
    return describe() if describe is not None else "local key files"


class DeferredKeyStore:
    """The process's KeyStore, opened on first use: :class:`LocalKeyStore`, or a PKCS#11 token when
    ``OML_KEYSTORE`` is a ``pkcs11:`` URI (``services/keys/keystore_pkcs11.py``).

    Keyless workloads (relay, lake-writer, indexer, reconciler) open a
    context too; deferring means they never load the master key — nor, on the
    embedded default, create one, nor log in to a token — unless something in
    them asks for a key.
    """

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._store: Any = None

    def open(self) -> Any:
        if self._store is None:
            spec = self._settings.keystore
            if spec.startswith("pkcs11:"):
                from oml.services.keys.keystore_pkcs11 import Pkcs11Config, Pkcs11KeyStore

                self._store = Pkcs11KeyStore(Pkcs11Config.from_uri(spec))
            elif spec == "local":
                self._store = LocalKeyStore(self._settings.keys, load_master_key(self._settings.master_key, self._settings.home))
            else:
                raise ValueError("OML_KEYSTORE must be 'local' or a pkcs11: URI")
        return self._store

    def can_sign(self, tenant: str, name: str) -> bool:
        store = self.open()
        return bool(getattr(store, "can_sign", None)) and store.can_sign(tenant, name)

    def sign(self, tenant: str, name: str, message: bytes) -> bytes:
        return self.open().sign(tenant, name, message)

    def describe(self) -> str:
        return describe_keystore(self.open())

    def put(self, tenant: str, name: str, secret: bytes) -> None:
        self.open().put(tenant, name, secret)

    def get(self, tenant: str, name: str) -> bytes:
        return self.open().get(tenant, name)

    def exists(self, tenant: str, name: str) -> bool:
        return self.open().exists(tenant, name)

    def destroy(self, tenant: str, name: str) -> None:
        self.open().destroy(tenant, name)

    def names(self, tenant: str) -> list[str]:
        return self.open().names(tenant)
