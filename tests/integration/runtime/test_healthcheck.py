"""The workloads' health check against real PostgreSQL: a role with session defaults of its own fails it.

Any role may set its own session defaults (``ALTER ROLE CURRENT_USER SET …``), and ``RESET ALL`` -- the pool's
checkout reset -- returns to them, so a borrower with SQL on a workload's connection could plant a setting for every
later session of that role (docs/security-model.md, Known limits). OML sets none, so the check fails while one
exists and names it by the exception's type only.
"""
from __future__ import annotations

import sqlalchemy as sa

from oml.services.runtime import healthcheck
from oml.services.storage.db import Database


def test_a_role_with_planted_session_defaults_fails_its_health_check(db_url, monkeypatch, capsys):
    monkeypatch.setenv("OML_DATABASE_URL", db_url)
    roles = ["--role", "oml_admission", "--role", "oml_server"]
    assert healthcheck.main(roles) == 0
    planter = sa.create_engine(Database(db_url).url_for("oml_admission"))
    owner = sa.create_engine(db_url)
    try:
        with planter.begin() as c:
            c.execute(sa.text("ALTER ROLE CURRENT_USER SET statement_timeout = '1h'"))
        capsys.readouterr()
        assert healthcheck.main(roles) == 1
        out = capsys.readouterr().out
        assert "FAIL role oml_admission: RoleSettingsPlanted" in out and "ok   role oml_server" in out
    finally:
        with owner.begin() as c:
            c.execute(sa.text("ALTER ROLE oml_admission RESET ALL"))
        planter.dispose()
        owner.dispose()
    assert healthcheck.main(roles) == 0


def test_a_workload_that_does_not_migrate_fails_its_health_check_while_the_database_is_behind(db_url, monkeypatch, capsys):
    from oml.services.storage import migrate

    monkeypatch.setenv("OML_DATABASE_URL", db_url)
    monkeypatch.setenv("OML_AUTO_MIGRATE", "false")
    owner = sa.create_engine(db_url)
    previous = migrate.pending(None)[-2].revision
    try:
        with owner.begin() as c:
            c.execute(sa.text("UPDATE alembic_version SET version_num = :r"), {"r": previous})
        assert healthcheck.main(["--role", "oml_relay"]) == 1
        assert capsys.readouterr().out.strip() == "FAIL role oml_relay: db.migrations_pending"
    finally:
        with owner.begin() as c:
            c.execute(sa.text("UPDATE alembic_version SET version_num = :r"), {"r": migrate.head()})
        owner.dispose()
    assert healthcheck.main(["--role", "oml_relay"]) == 0
