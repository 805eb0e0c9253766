"""CLI: the database's schema revision and its migrations (docs/operator-guide.md, "Upgrading").

Commands::

    oml db status [--json]     exit 0 at head, 1 with migrations pending
    oml db migrate [--json]    run the pending migrations as the owner

Both open the owner URL directly, not through :func:`~oml.services.entrypoints.cli.common.context`, whose
``open_context`` migrates first when ``OML_AUTO_MIGRATE`` is true: ``status`` reads ``alembic_version`` in a
read-only transaction. Neither creates a home (``home.not_found``). A database that cannot be reached is
``db.unavailable`` (the exception type only: driver messages can quote the URL), one at a revision this release
does not have is ``db.unknown_revision``; both exit 2.
"""
from __future__ import annotations

from typing import NoReturn

import typer

from oml.domain.errors import OMLError
from oml.services.entrypoints.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    JSON,
    emit,
    print_problem,
    refuse_unavailable,
    require_home,
)

db_app = typer.Typer(no_args_is_help=True, help="The database's schema revision and its migrations (schema owner).")


def _refuse(code: str, detail: str) -> NoReturn:
    print_problem(OMLError(code, detail, 409))
    raise typer.Exit(EXIT_USAGE)


def _owner_url() -> str:
    """The owner URL of the home's database (starting the embedded server, never creating a home)."""
    import sqlalchemy as sa

    from oml.services.runtime.context import owner_url
    from oml.services.runtime.settings import get_settings

    settings = get_settings()
    require_home(settings)
    url = sa.make_url(owner_url(settings))
    if url.drivername in ("postgresql", "postgres"):  # the driver OML installs, as storage.db.Database picks it
        url = url.set(drivername="postgresql+psycopg")
    return url.render_as_string(hide_password=False)


def _unavailable(exc: Exception) -> NoReturn:
    from oml.services.runtime.settings import get_settings

    refuse_unavailable(get_settings(), exc, "could not read {db} as the schema owner")


def _pending(revision: str | None):
    from oml.services.storage import migrate

    try:
        return migrate.pending(revision)
    except migrate.UnknownRevision:
        _refuse("db.unknown_revision", f"the database is at revision {revision}, which this release ({migrate.head()}) "
                "does not have: a newer release migrated it; install that release")


def _line(m) -> str:
    return f"{m.revision}  {m.summary}"


@db_app.command("status")
def db_status(as_json: bool = JSON) -> None:
    """Print the database's revision, the installed release's head and the migrations pending; migrate nothing.
    Exit 0 at head, 1 with migrations pending."""
    import sqlalchemy as sa

    from oml.services.storage import migrate

    url = _owner_url()
    try:
        revision = migrate.current(url)
    except sa.exc.SQLAlchemyError as exc:
        _unavailable(exc)
    todo = _pending(revision)
    head = migrate.head()
    # The database's own revision with what it did, so an operator at head sees what the last migration was.
    lines = [f"database revision: {_line(migrate.describe(revision)) if revision else 'none (never migrated)'}",
             f"head revision: {head}"]
    if todo:
        lines += [f"pending: {len(todo)} (`oml db migrate` applies them)"] + [f"  {_line(m)}" for m in todo]
    else:
        lines.append("at head: nothing to migrate")
    emit({"revision": revision, "head": head, "at_head": not todo,
          "pending": [{"revision": m.revision, "summary": m.summary} for m in todo]}, as_json, lines)
    raise typer.Exit(EXIT_FAILED if todo else EXIT_OK)


@db_app.command("migrate")
def db_migrate(as_json: bool = JSON) -> None:
    """Run the pending migrations as the schema owner (whatever OML_AUTO_MIGRATE says) and print each one applied,
    then the database's revision."""
    import sqlalchemy as sa

    from oml.services.runtime.settings import get_settings
    from oml.services.storage import migrate
    from oml.services.storage.embedded import PgvectorTooOld, check_pgvector

    url = _owner_url()
    try:
        _pending(migrate.current(url))  # refuses a revision this release does not have before running anything
        engine = sa.create_engine(url)
        try:
            check_pgvector(engine)
        finally:
            engine.dispose()
    except sa.exc.SQLAlchemyError as exc:
        _unavailable(exc)
    except PgvectorTooOld as exc:
        _refuse("db.pgvector_too_old", str(exc))
    applied = migrate.upgrade(url, get_settings().role_connection_limit)
    revision = migrate.current(url)
    lines = [f"applied {_line(m)}" for m in applied]
    lines.append(f"database revision: {revision}" if applied else f"already at head {revision}")
    emit({"applied": [{"revision": m.revision, "summary": m.summary} for m in applied], "revision": revision},
         as_json, lines)


def register(app: typer.Typer) -> None:
    """Add this area's commands to the root oml app."""
    app.add_typer(db_app, name="db")
