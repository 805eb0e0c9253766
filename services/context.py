"""Process wiring: settings → database (embedded or external) → KeyStore → services.

``open_context()`` is what every entry point (CLI, HTTP app, MCP server,
workers) calls. On the embedded default it starts PostgreSQL under
``OML_HOME`` (default ``.oml``), migrates it to head, and checks pgvector.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import cached_property

from oml.services.keystore import KeyStore, LocalKeyStore, load_master_key
from oml.services.settings import Settings, get_settings
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
        from oml.services.admission.service import Admission

        return Admission(self.db, self.keystore, idempotency_hours=self.settings.idempotency_retention_hours)

    def close(self) -> None:
        self.db.dispose()


def owner_url(settings: Settings) -> str:
    if settings.database_url:
        return settings.database_url
    return embedded.start(settings.home)


def open_context(settings: Settings | None = None, *, migrate: bool = True) -> Context:
    settings = settings or get_settings()
    url = owner_url(settings)
    db = Database(url, settings.role_password, settings.pool_size)
    embedded.check_pgvector(db.engine(None))
    if migrate:
        upgrade(str(db.owner_url.render_as_string(hide_password=False)))
    keystore = LocalKeyStore(settings.keys, load_master_key(settings.master_key, settings.home))
    return Context(settings, db, keystore)
