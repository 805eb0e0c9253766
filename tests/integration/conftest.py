"""The database every integration test runs on: a real PostgreSQL with pgvector, one fresh database per test module.

The server is ``OML_TEST_DATABASE_URL`` (an owner URL on a server with
pgvector ≥ 0.8.4), else the one the session's backend starts (tests/conftest.py).
A template database is migrated once per session; each module gets
``CREATE DATABASE … TEMPLATE`` (fast), so modules are isolated
(tests/support/database.py).
"""
from __future__ import annotations

import os

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from oml.services.entrypoints.http.app import create_app
from oml.services.runtime.context import Context
from oml.services.storage import embedded
from oml.services.storage.migrate import upgrade

from support import backends
from support.database import drop_database, fresh_database, make_context, with_db
from support.paths import REPO


def _server_url() -> str:
    url = os.environ.get("OML_TEST_DATABASE_URL")
    if url:
        return url
    if backends.current().name == "containers":
        return backends.postgres_url()
    return embedded.start(REPO / ".oml-test")


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
    url = with_db(pg_server, name)
    upgrade(url)
    yield name
    with admin.connect() as c:
        c.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(scope="module")
def db_url(pg_server: str, template_db: str):
    from oml.services.reads import verified_reads

    # The verified-read caches are per process and keyed by tenant, as a process serves one database; each module
    # has a database of its own, where a tenant name another module used may hold other keys.
    verified_reads.clear_cache()
    url = fresh_database(pg_server, template_db)
    yield url
    drop_database(pg_server, url)


@pytest.fixture(scope="module")
def ctx(db_url: str, tmp_path_factory) -> Context:
    c = make_context(db_url, tmp_path_factory.mktemp("oml-home"))
    yield c
    c.close()


@pytest.fixture(scope="module")
def client(ctx) -> TestClient:
    """The HTTP API over the module's ``ctx``, in process."""
    return TestClient(create_app(ctx))
