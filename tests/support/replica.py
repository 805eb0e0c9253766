"""A real hot standby of the test server for the replica tests (not a test module).

``start_standby`` base-backs-up the test PostgreSQL with its own
``pg_basebackup`` and starts it as a hot standby on its own socket
(services/storage/standby.py); ``replica_context`` is a :class:`Context`
whose reads may go to it while everything that writes stays on the primary.
"""
from __future__ import annotations

import os
import shutil
import uuid

import sqlalchemy as sa

from oml.services.runtime.context import Context
from oml.services.storage.db import Database
from oml.services.storage.standby import Standby

from support.paths import REPO


def start_standby(pg_server: str, port: int = 5433) -> Standby:
    """A standby under ``.oml-test/`` (not pytest's tmp dirs: concurrent pytest runs prune those, and the
    embedded server's system user must be able to reach the folder)."""
    folder = REPO / ".oml-test" / f"standby-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    return Standby(pg_server, folder / "pg", port).start()


def stop_standby(standby: Standby) -> None:
    standby.stop()
    shutil.rmtree(standby.pgdata.parent, ignore_errors=True)


def replica_context(ctx: Context, standby: Standby, *, wait_s: float = 0.5) -> Context:
    """``ctx``'s database, keys and settings, with ``standby`` as its one replica."""
    name = ctx.db.owner_url.database
    db = Database(ctx.db.owner_url.render_as_string(hide_password=False), None, 5,
                  replica_urls=[standby.url_for_database(name)], replica_wait_s=wait_s)
    return Context(ctx.settings, db, ctx.keystore)


def caught_up(ctx: Context, standby: Standby) -> None:
    """Wait until the standby has replayed everything the primary has written so far."""
    standby.wait_for(ctx.db.write_position())


def in_recovery(conn: sa.Connection) -> bool:
    return bool(conn.execute(sa.text("SELECT pg_is_in_recovery()")).scalar())
