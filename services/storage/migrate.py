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

from oml.domain.errors import OMLError

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


#: The refusal of a process that does not migrate (``OML_AUTO_MIGRATE=false``) when the database is behind its
#: release (503, ``Retry-After``: the operator may migrate while the process runs), and when the database is at a
#: revision the release does not have (503: a newer release migrated it).
MIGRATIONS_PENDING, UNKNOWN_REVISION = "db.migrations_pending", "db.unknown_revision"
#: The revision from which the workload roles may read ``alembic_version``; a role refused that read is on a database
#: older than it.
READABLE_FROM = "0028"
_MIGRATE = "as the schema owner run `oml db migrate` (or the deployment's migrate job)"


def refusal(revision: str | None, head: str, *, readable: bool = True) -> OMLError | None:
    """None when ``revision`` (the database's, as a workload role read it) is ``head``; otherwise the refusal that
    names both and what to run: ``db.migrations_pending`` for a revision this release has before ``head`` (or
    ``None``: never migrated; or ``readable`` false: a database before :data:`READABLE_FROM`), ``db.unknown_revision``
    for one it does not have. Content-free: revisions are the release's ids or what ``alembic_version`` holds."""
    if readable and revision == head:
        return None
    if not readable:
        return OMLError(MIGRATIONS_PENDING, f"the database is at a revision before {READABLE_FROM} (its workload roles "
                        f"may not read alembic_version) and this release's head is {head}: migrations are pending; "
                        f"{_MIGRATE}", 503, {"head": head})
    try:
        todo = pending(revision)
    except UnknownRevision:
        return OMLError(UNKNOWN_REVISION, f"the database is at revision {revision}, which this release ({head}) does "
                        "not have: a newer release migrated it; run that release", 503,
                        {"revision": revision, "head": head})
    at = f"is at revision {revision}" if revision is not None else "has no revision (never migrated)"
    n = len(todo)
    return OMLError(MIGRATIONS_PENDING, f"the database {at} and this release's head is {head}: {n} "
                    f"migration{'s' if n != 1 else ''} pending; {_MIGRATE}", 503,
                    {"head": head} | ({"revision": revision} if revision is not None else {}))


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
