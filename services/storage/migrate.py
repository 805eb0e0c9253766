"""Bring a database to the head migration in one call (Alembic, programmatically)."""
from __future__ import annotations

from importlib import resources

from alembic import command
from alembic.config import Config


def alembic_config(owner_url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(resources.files("oml.services.storage") / "migrations"))
    cfg.set_main_option("sqlalchemy.url", owner_url.replace("%", "%%"))
    return cfg


def upgrade(owner_url: str) -> None:
    """Run every pending migration as the owner."""
    command.upgrade(alembic_config(owner_url), "head")


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
    upgrade(owner.render_as_string(hide_password=False))


if __name__ == "__main__":
    main()
