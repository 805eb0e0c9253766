"""Bring a database to the head migration in one call (Alembic, programmatically)."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from importlib import resources

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError

log = logging.getLogger(__name__)

#: Default CONNECTION LIMIT of each workload role (``OML_ROLE_CONNECTION_LIMIT``; docs/operator-guide.md).
ROLE_CONNECTION_LIMIT = 50


def alembic_config(owner_url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(resources.files("oml.services.storage") / "migrations"))
    cfg.set_main_option("sqlalchemy.url", owner_url.replace("%", "%%"))
    return cfg


@dataclass(frozen=True)
class Migration:
    """One revision of the installed release: its id and the first sentence of its file's docstring."""

    revision: str
    summary: str


class UnknownRevision(LookupError):
    """The database is at a revision the installed release does not have (a newer release migrated it)."""


def _scripts() -> ScriptDirectory:
    return ScriptDirectory.from_config(alembic_config(""))


def _migration(script) -> Migration:
    # The docstring's first sentence: its first line often stops mid-sentence. Its reStructuredText literals
    # (``name``) are printed as Markdown's (`name`), as the operator guide quotes them.
    paragraph = " ".join((script.module.__doc__ or "").strip().split("\n\n")[0].split()).replace("``", "`")
    return Migration(script.revision, paragraph.split(". ", 1)[0].rstrip("."))


def describe(revision: str) -> Migration:
    """``revision`` of the installed release with its summary; :class:`UnknownRevision` when the release has none."""
    try:
        return _migration(_scripts().get_revision(revision))
    except CommandError:
        raise UnknownRevision(revision) from None


def head() -> str:
    """The head revision of the installed release."""
    rev = _scripts().get_current_head()
    assert rev is not None
    return rev


def current(owner_url: str) -> str | None:
    """The database's revision (``alembic_version``; ``None`` before the first migration), read in a read-only
    transaction: nothing is created or migrated."""
    engine = sa.create_engine(owner_url, execution_options={"postgresql_readonly": True})
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()


def pending(revision: str | None) -> list[Migration]:
    """The installed release's migrations after ``revision`` (``None``: every one), oldest first.
    :class:`UnknownRevision` when the release has no ``revision``."""
    scripts = _scripts()
    if revision is not None:
        try:
            scripts.get_revision(revision)
        except CommandError:
            raise UnknownRevision(revision) from None
    return [_migration(s) for s in reversed(list(scripts.iterate_revisions("heads", revision or "base")))]


def upgrade(owner_url: str, role_connection_limit: int = ROLE_CONNECTION_LIMIT) -> list[Migration]:
    """Run every pending migration as the owner, then set each workload role's connection limit
    (:func:`limit_connections`). Returns the migrations applied, oldest first, each logged at INFO once the
    upgrade has committed (Alembic runs them in one transaction: none is applied unless all are)."""
    cfg = alembic_config(owner_url)
    applied: list[str] = []

    def record(ctx, step, heads, run_args) -> None:
        if step.is_upgrade and step.up_revision_id:
            applied.append(step.up_revision_id)

    cfg.attributes["on_version_apply"] = record
    command.upgrade(cfg, "head")
    scripts = _scripts()
    done = [_migration(scripts.get_revision(rev)) for rev in applied]
    for m in done:
        log.info("OML: applied migration %s: %s", m.revision, m.summary)
    limit_connections(owner_url, role_connection_limit)
    return done


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
