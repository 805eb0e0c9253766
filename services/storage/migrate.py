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
