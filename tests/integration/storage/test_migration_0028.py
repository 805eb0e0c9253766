"""Migration 0028: every workload role reads ``alembic_version`` (the revision its process compares with its release's
head when it does not migrate; services/storage/db.py) and writes none of it, on a new database (the template ran every
migration) and on one migrated to 0027 before it."""
from __future__ import annotations

import pytest
import sqlalchemy as sa

from oml.services.storage import migrate
from oml.services.storage.db import WORKLOAD_ROLES

from support.bm25_function import upgrade_to
from support.owner import owner

_GRANTS = sa.text("SELECT grantee, privilege_type FROM information_schema.role_table_grants"
                  " WHERE table_name = 'alembic_version' AND grantee LIKE 'oml\\_%'")


def test_each_workload_role_reads_the_revision_and_cannot_write_it(ctx):
    for role in WORKLOAD_ROLES:
        with ctx.db.system(role) as c:
            assert c.execute(sa.text("SELECT version_num FROM alembic_version")).scalar() == migrate.head(), role
        for sql in ("UPDATE alembic_version SET version_num = '9999'", "DELETE FROM alembic_version",
                    "INSERT INTO alembic_version VALUES ('9999')", "TRUNCATE alembic_version"):
            with pytest.raises(sa.exc.ProgrammingError) as refused, ctx.db.system(role) as c:
                c.execute(sa.text(sql))
            assert refused.value.orig.sqlstate == "42501", (role, sql)
    with owner(ctx) as c:
        assert set(c.execute(_GRANTS).all()) == {(r, "SELECT") for r in WORKLOAD_ROLES}


def test_upgrade_from_0027_grants_the_read(ctx):
    with owner(ctx) as c:
        c.execute(sa.text(f"REVOKE SELECT ON alembic_version FROM {', '.join(WORKLOAD_ROLES)}"))
        c.execute(sa.text("UPDATE alembic_version SET version_num = '0027'"))
        assert c.execute(_GRANTS).all() == []
    upgrade_to(ctx, "0028")
    with owner(ctx) as c:
        assert set(c.execute(_GRANTS).all()) == {(r, "SELECT") for r in WORKLOAD_ROLES}
    with ctx.db.system("oml_relay") as c:
        assert c.execute(sa.text("SELECT version_num FROM alembic_version")).scalar() == "0028"
