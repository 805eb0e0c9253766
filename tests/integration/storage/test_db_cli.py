"""``oml db status`` and ``oml db migrate`` (docs/operator-guide.md, "Upgrading"), and the log line of each migration
applied, on the module's database set back one revision.

OML's migrations do not go back (``sqlfiles.append_only``), so "one revision behind" is the database at head with
``alembic_version`` set to the revision before it: the head migration re-applies re-runnable SQL files.
"""
from __future__ import annotations

import json
import logging

import pytest
import sqlalchemy as sa

from oml.services.storage import migrate

from support.admission import run_cli
from support.database import drop_database, new_database
from support.owner import owner

HEAD = migrate.head()
PREVIOUS = migrate.pending(None)[-2].revision


def _revision(ctx) -> str:
    with owner(ctx) as c:
        return c.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()


@pytest.fixture
def behind(ctx):
    """The database one revision behind head for the test."""
    with owner(ctx) as c:
        c.execute(sa.text("UPDATE alembic_version SET version_num = :r"), {"r": PREVIOUS})
    yield
    with owner(ctx) as c:
        c.execute(sa.text("UPDATE alembic_version SET version_num = :r"), {"r": HEAD})


def test_status_at_head_exits_0_and_names_the_head(ctx):
    r = run_cli(ctx, ["db", "status"])
    assert r.exit_code == 0, r.output
    assert f"database revision: {HEAD}  {migrate.describe(HEAD).summary}" in r.stdout.splitlines()
    assert f"head revision: {HEAD}" in r.stdout.splitlines()
    assert "at head" in r.stdout


def test_status_one_behind_names_the_pending_migration_exits_1_and_migrates_nothing(ctx, behind):
    r = run_cli(ctx, ["db", "status"])
    assert r.exit_code == 1, r.output
    summary = migrate.pending(PREVIOUS)[0].summary
    assert f"database revision: {PREVIOUS}  {migrate.describe(PREVIOUS).summary}" in r.stdout.splitlines()
    assert "pending: 1" in r.stdout
    assert f"  {HEAD}  {summary}" in r.stdout.splitlines()
    assert _revision(ctx) == PREVIOUS


def test_status_json(ctx, behind):
    r = run_cli(ctx, ["db", "status", "--json"])
    assert r.exit_code == 1, r.output
    got = json.loads(r.stdout)
    assert got == {"revision": PREVIOUS, "head": HEAD, "at_head": False,
                   "pending": [{"revision": HEAD, "summary": migrate.pending(PREVIOUS)[0].summary}]}
    assert _revision(ctx) == PREVIOUS


def test_migrate_applies_the_pending_migration_prints_and_logs_it(ctx, behind, caplog):
    caplog.set_level(logging.INFO, logger=migrate.log.name)
    r = run_cli(ctx, ["db", "migrate"])
    assert r.exit_code == 0, r.output
    summary = migrate.pending(PREVIOUS)[0].summary
    assert r.stdout.splitlines() == [f"applied {HEAD}  {summary}", f"database revision: {HEAD}"]
    assert _revision(ctx) == HEAD
    assert [m.getMessage() for m in caplog.records if m.name == migrate.log.name] == [
        f"OML: applied migration {HEAD}: {summary}"]
    r = run_cli(ctx, ["db", "migrate", "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout) == {"applied": [], "revision": HEAD}, r.output
    r = run_cli(ctx, ["db", "migrate"])
    assert r.exit_code == 0 and r.stdout.strip() == f"already at head {HEAD}", r.output


def test_verbose_says_each_migration_once_in_oml_s_own_line(ctx, behind, caplog):
    caplog.set_level(logging.INFO)
    r = run_cli(ctx, ["-v", "db", "migrate"])
    assert r.exit_code == 0, r.output
    said = [m for m in caplog.records if m.levelno >= logging.INFO]
    assert [m.getMessage() for m in said if m.name == migrate.log.name] == [
        f"OML: applied migration {HEAD}: {migrate.pending(PREVIOUS)[0].summary}"]
    assert not [m.getMessage() for m in said if m.name.startswith("alembic") and m.levelno < logging.WARNING]


def test_the_auto_migration_of_any_command_logs_each_migration_applied(ctx, behind, caplog):
    caplog.set_level(logging.INFO, logger=migrate.log.name)
    r = run_cli(ctx, ["tenant", "list"])
    assert r.exit_code == 0, r.output
    assert _revision(ctx) == HEAD
    assert [m.getMessage() for m in caplog.records if m.name == migrate.log.name] == [
        f"OML: applied migration {HEAD}: {migrate.pending(PREVIOUS)[0].summary}"]


def test_status_of_a_database_never_migrated_lists_every_migration(ctx, pg_server):
    url = new_database(pg_server)
    try:
        r = run_cli(ctx, ["db", "status", "--json"], env={"OML_DATABASE_URL": url})
        assert r.exit_code == 1, r.output
        got = json.loads(r.stdout)
        assert got["revision"] is None and got["pending"][0]["revision"] == "0001" and got["pending"][-1]["revision"] == HEAD
        eng = sa.create_engine(url)
        with eng.connect() as c:  # read-only: not even the version table was created
            assert c.execute(sa.text("SELECT to_regclass('alembic_version')")).scalar() is None
        eng.dispose()
    finally:
        drop_database(pg_server, url)


def test_a_database_newer_than_the_release_is_refused_in_one_line(ctx):
    with owner(ctx) as c:
        c.execute(sa.text("UPDATE alembic_version SET version_num = '9999'"))
    try:
        for args in (["db", "status"], ["db", "migrate"]):
            r = run_cli(ctx, args)
            assert r.exit_code == 2, r.output
            assert r.stderr.startswith("db.unknown_revision: ") and len(r.stderr.strip().splitlines()) == 1
    finally:
        with owner(ctx) as c:
            c.execute(sa.text("UPDATE alembic_version SET version_num = :r"), {"r": HEAD})


@pytest.mark.parametrize("args", [["db", "status"], ["db", "migrate"]])
def test_no_home_and_no_database_are_refused_in_one_line(ctx, tmp_path, args):
    typo = tmp_path / "oml-hmoe"
    r = run_cli(ctx, args, env={"OML_HOME": str(typo), "OML_DATABASE_URL": "", "OML_KEY_DIR": ""})
    assert r.exit_code == 2, r.output
    assert r.stderr.startswith("home.not_found: ") and str(typo) in r.stderr and not typo.exists()
    r = run_cli(ctx, args, env={"OML_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"})
    assert r.exit_code == 2, r.output
    assert r.stderr.startswith("db.unavailable: ") and len(r.stderr.strip().splitlines()) == 1
