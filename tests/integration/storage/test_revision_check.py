"""A process that does not migrate (``OML_AUTO_MIGRATE=false``) reads the database's revision as each workload role
before that role's first use, and refuses while it is not its release's head (services/storage/db.py,
``Database.engine``; docs/operator-guide.md, "Upgrading"): ``db.migrations_pending`` behind, ``db.unknown_revision``
ahead, over HTTP (503 problem) and on the CLI (one line, exit 2). Migration 0028's grant, which the check needs, is
tests/integration/storage/test_migration_0028.py's.

"Behind" is the module's database at head with ``alembic_version`` set back, as tests/integration/storage/test_db_cli.py
does (OML's migrations do not go back).
"""
from __future__ import annotations

import secrets
from contextlib import contextmanager

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy import event

from oml.services.entrypoints.http.app import create_app
from oml.services.runtime.context import open_context
from oml.services.runtime.settings import Settings
from oml.services.storage import migrate
from oml.services.storage.db import WORKLOAD_ROLES

from support.admission import run_cli
from support.owner import owner

HEAD = migrate.head()
PREVIOUS = migrate.pending(None)[-2].revision
NO_MIGRATE = {"OML_AUTO_MIGRATE": "false"}
ANY_KEY = {"Authorization": "Bearer oml_" + "0" * 16 + "_" + "0" * 64}


def _set_revision(ctx, revision: str) -> None:
    with owner(ctx) as c:
        c.execute(sa.text("UPDATE alembic_version SET version_num = :r"), {"r": revision})


def _revision(ctx) -> str:
    with owner(ctx) as c:
        return c.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()


@contextmanager
def at_revision(ctx, revision: str):
    _set_revision(ctx, revision)
    try:
        yield
    finally:
        _set_revision(ctx, HEAD)


@pytest.fixture
def process(ctx, tmp_path):
    """A context as a deployed workload opens it: OML_AUTO_MIGRATE=false, never the owner."""
    p = open_context(Settings(home=tmp_path / "proc", database_url=ctx.db.owner_url.render_as_string(hide_password=False),
                              auto_migrate=False, master_key=secrets.token_hex(32)))
    yield p
    p.close()


def _revision_reads(db) -> list[str]:
    """Record the role of every statement that reads ``alembic_version`` on ``db``'s workload engines (primary)."""
    seen: list[str] = []
    for role in WORKLOAD_ROLES:
        def count(conn, cursor, statement, params, context, executemany, role=role):
            if "alembic_version" in statement:
                seen.append(role)
        event.listen(db._engine(role, None), "before_cursor_execute", count)
    return seen


def test_behind_is_refused_over_http_until_migrated_then_served_without_a_restart(ctx, process):
    client = TestClient(create_app(process))
    reads = _revision_reads(process.db)
    with at_revision(ctx, PREVIOUS):
        for path, headers in (("/readyz", {}), ("/healthz", {}), ("/v1/workareas", ANY_KEY)):
            r = client.get(path, headers=headers)
            assert r.status_code == 503 and r.headers["content-type"] == "application/problem+json", (path, r.text)
            body = r.json()
            assert body["code"] == "db.migrations_pending" and body["head"] == HEAD and body["revision"] == PREVIOUS
            assert f"revision {PREVIOUS}" in body["detail"] and f"head is {HEAD}" in body["detail"]
            assert "`oml db migrate`" in body["detail"] and r.headers["retry-after"]
        assert reads == ["oml_server"] * 3  # each refused use reads again
        assert _revision(ctx) == PREVIOUS  # nothing migrated
        # The owner migrates while the process runs: served, and never read again as that role.
        migrated = run_cli(ctx, ["db", "migrate"])
        assert migrated.exit_code == 0 and f"database revision: {HEAD}" in migrated.stdout, migrated.output
        assert client.get("/readyz").status_code == 200
        assert client.get("/v1/workareas", headers=ANY_KEY).json()["code"] == "access.unauthenticated"
    with at_revision(ctx, PREVIOUS):
        assert client.get("/readyz").status_code == 200
    assert reads == ["oml_server"] * 4


def test_each_role_reads_the_revision_once_at_head(ctx, process):
    reads = _revision_reads(process.db)
    for _ in range(3):
        for role in WORKLOAD_ROLES:
            with process.db.system(role) as c:
                c.execute(sa.text("SELECT 1"))
    assert sorted(reads) == sorted(WORKLOAD_ROLES)


def test_a_database_newer_than_the_release_is_refused(ctx, process):
    client = TestClient(create_app(process))
    with at_revision(ctx, "9999"):
        r = client.get("/readyz")
        assert r.status_code == 503 and r.json()["code"] == "db.unknown_revision", r.text
        assert r.json()["revision"] == "9999" and "retry-after" not in r.headers
        cli = run_cli(ctx, ["tenant", "list"], env=NO_MIGRATE)
        assert cli.exit_code == 2, cli.output
        assert cli.stderr.startswith("db.unknown_revision: ") and len(cli.stderr.strip().splitlines()) == 1
        assert _revision(ctx) == "9999"


def test_a_database_before_the_grant_is_behind(ctx, process):
    """A database migrated before 0028: its roles may not read the revision, so it is behind that one at least."""
    roles = ", ".join(WORKLOAD_ROLES)
    with owner(ctx) as c:
        c.execute(sa.text(f"REVOKE SELECT ON alembic_version FROM {roles}"))
    try:
        with at_revision(ctx, "0027"), pytest.raises(Exception) as refused, process.db.system("oml_admission"):
            pass
        assert getattr(refused.value, "code", None) == "db.migrations_pending", refused.value
        assert f"before {migrate.READABLE_FROM}" in refused.value.detail
    finally:
        with owner(ctx) as c:
            c.execute(sa.text(f"GRANT SELECT ON alembic_version TO {roles}"))


def test_behind_is_refused_on_the_cli_in_one_line(ctx):
    with at_revision(ctx, PREVIOUS):
        r = run_cli(ctx, ["tenant", "list"], env=NO_MIGRATE)
        assert r.exit_code == 2, r.output
        line = r.stderr.strip()
        assert line.startswith("db.migrations_pending: ") and len(line.splitlines()) == 1, r.stderr
        assert f"revision {PREVIOUS}" in line and f"head is {HEAD}" in line and "`oml db migrate`" in line
        assert _revision(ctx) == PREVIOUS
    r = run_cli(ctx, ["tenant", "list"], env=NO_MIGRATE)
    assert r.exit_code == 0, r.output


def test_no_check_when_the_process_migrates(ctx, tmp_path):
    p = open_context(Settings(home=tmp_path / "auto", database_url=ctx.db.owner_url.render_as_string(hide_password=False),
                              auto_migrate=True, master_key=secrets.token_hex(32)))
    try:
        reads = _revision_reads(p.db)
        with p.db.system("oml_server") as c:
            c.execute(sa.text("SELECT 1"))
        assert not p.db.check_revision and reads == []
    finally:
        p.close()



def test_serve_behind_refuses_to_start_in_one_line(ctx, monkeypatch):
    """``oml serve`` reads the database before it listens (the restore check), so it refuses there, not later."""
    import socket

    import uvicorn

    with socket.socket() as s:  # a free port: 0 means the default one
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setattr(uvicorn, "run", lambda *a, **k: pytest.fail("serving a database behind its release"))
    with at_revision(ctx, PREVIOUS):
        r = run_cli(ctx, ["serve", "--no-workers", "--port", str(port)], env=NO_MIGRATE)
    assert r.exit_code == 2, r.output
    assert r.stderr.startswith("db.migrations_pending: ") and len(r.stderr.strip().splitlines()) == 1, r.stderr
