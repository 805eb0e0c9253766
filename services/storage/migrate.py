"""Bring a database to the head migration in one call (Alembic, programmatically)."""
from __future__ import annotations

import logging
from importlib import resources

import sqlalchemy as sa
from alembic import command
from alembic.config import Config

log = logging.getLogger(__name__)

#: Default CONNECTION LIMIT of each workload role (``OML_ROLE_CONNECTION_LIMIT``; docs/operator-guide.md).
ROLE_CONNECTION_LIMIT = 50


def alembic_config(owner_url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(resources.files("oml.services.storage") / "migrations"))
    cfg.set_main_option("sqlalchemy.url", owner_url.replace("%", "%%"))
    return cfg


def upgrade(owner_url: str, role_connection_limit: int = ROLE_CONNECTION_LIMIT) -> None:
    """Run every pending migration as the owner, then set each workload role's connection limit
    (:func:`limit_connections`)."""
    command.upgrade(alembic_config(owner_url), "head")
    limit_connections(owner_url, role_connection_limit)


def limit_connections(owner_url: str, limit: int) -> None:
    """``ALTER ROLE … CONNECTION LIMIT limit`` for every workload role (``limit`` <= 0: -1, none), so one
    credential, if compromised, cannot take every connection ``max_connections`` allows (docs/security-model.md,
    "Locks and connections"). Roles are the cluster's, not one database's: the last migration run sets them.
    Needs CREATEROLE (and, on PostgreSQL 16+, ADMIN on the roles); without it a warning says what to run."""
    from oml.services.storage.db import WORKLOAD_ROLES

    n = limit if limit > 0 else -1
    engine = sa.create_engine(owner_url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            for role in WORKLOAD_ROLES:
                try:
                    if conn.execute(sa.text("SELECT rolconnlimit FROM pg_roles WHERE rolname = :r"), {"r": role}).scalar() != n:
                        conn.execute(sa.text(f"ALTER ROLE {role} CONNECTION LIMIT {int(n)}"))
                except sa.exc.ProgrammingError:
                    log.warning("OML: the owner may not alter role %s; as a role with CREATEROLE run: "
                                "ALTER ROLE %s CONNECTION LIMIT %d", role, role, n)
    finally:
        engine.dispose()


def main() -> None:
    """``python -m oml.services.storage.migrate``: the deployment's one-shot migrate job.

    Reads the owner URL from ``OML_DATABASE_URL``, refuses a pgvector older
    than 0.8.4, and migrates to head. Exit status 0 on success.
    """
    import sqlalchemy as sa

    from oml.services.runtime.settings import Settings
    from oml.services.storage.embedded import check_pgvector

    url = Settings().database_url
    if not url:
        raise SystemExit("OML_DATABASE_URL (the owner URL) is required")
    owner = sa.make_url(url).set(drivername="postgresql+psycopg")
    engine = sa.create_engine(owner)
    try:
        check_pgvector(engine)
    finally:
        engine.dispose()
    upgrade(owner.render_as_string(hide_password=False), Settings().role_connection_limit)


if __name__ == "__main__":
    main()
