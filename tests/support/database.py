"""One database per test module, copied from the session's migrated template, and a Context over it.

``tests/conftest.py``'s ``db_url`` and ``ctx`` fixtures use these; tests that need a second database (a restore, the
demo) call them directly.
"""
from __future__ import annotations

import secrets
import uuid
from pathlib import Path

import sqlalchemy as sa

from oml.services.keys.keystore import LocalKeyStore
from oml.services.runtime.context import Context
from oml.services.runtime.settings import Settings
from oml.services.storage.db import Database
from oml.services.storage.migrations.sqlfiles import SQL


def with_db(url: str, name: str) -> str:
    return sa.make_url(url).set(database=name).render_as_string(hide_password=False)


def new_database(pg_server: str, template: str | None = None) -> str:
    """A new database on ``pg_server`` (a copy of ``template``, or empty); its URL."""
    name = f"oml_t_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(pg_server, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(sa.text(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else "")))
    admin.dispose()
    return with_db(pg_server, name)


def fresh_database(pg_server: str, template: str) -> str:
    url = new_database(pg_server, template)
    # A copy does not inherit the template's database privileges (who may create temporary tables).
    eng = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    with eng.connect() as c:
        c.connection.driver_connection.execute((SQL / "98_public_privileges.sql").read_text())  # no placeholders
    eng.dispose()
    return url


def drop_database(pg_server: str, url: str) -> None:
    name = sa.make_url(url).database
    admin = sa.create_engine(pg_server, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def make_context(db_url: str, home: Path) -> Context:
    settings = Settings(home=home, database_url=db_url, master_key=secrets.token_hex(32), lake_uri=str(home / "lake"))
    db = Database(db_url, None, 5)
    ks = LocalKeyStore(home / "keys", bytes.fromhex(settings.master_key))
    return Context(settings, db, ks)
