"""Container health checks: ``python -m oml.services.runtime.healthcheck [--role R]… [--redis] [--http URL] [--tcp H:P]``.

Used by ``deploy/compose.yaml``: each workload checks exactly what it
depends on with exactly the credentials it holds — a login as each of its
database roles (the owner is never used), which also fails while the role has
session defaults of its own (``pg_db_role_setting``: OML sets none, so one was
planted with ``ALTER ROLE CURRENT_USER SET …``, which the pool's checkout reset
returns to; docs/security-model.md, Known limits), and, with ``OML_AUTO_MIGRATE=false``, fails while the database is
not at this release's head revision, as the workload itself would refuse (``db.migrations_pending``,
``db.unknown_revision``: services/storage/db.py), a Redis ``PING`` on
``OML_REDIS_URL``, a GET on an HTTP URL answering 2xx, or a TCP connect. It opens no
KeyStore and reads no key. Exit status 0 when every check passes, 1
otherwise; one line per check on stdout, naming the check and the error
type only (never a URL with credentials or a message that could carry one), or a refusal's stable code.
"""
from __future__ import annotations

import argparse
import sys

from oml.domain.errors import OMLError  # a refusal's code is content-free (domain/errors.py): printed as it is


class RoleSettingsPlanted(RuntimeError):
    """The role has session defaults of its own (rows in ``pg_db_role_setting``), which OML never sets."""


# Any database's defaults for the role, or the role's everywhere (setdatabase 0); the catalog is readable by every role.
_ROLE_SETTINGS = "SELECT count(*) FROM pg_db_role_setting WHERE setrole = (SELECT oid FROM pg_roles WHERE rolname = current_user)"


def check_role(role: str) -> None:
    """Log in as ``role``; raises :class:`RoleSettingsPlanted` when the role carries session defaults of its own."""
    import sqlalchemy as sa

    from oml.services.runtime.settings import Settings
    from oml.services.storage.db import Database

    s = Settings()
    if not s.database_url:
        raise RuntimeError("OML_DATABASE_URL is not set")
    db = Database(s.database_url, s.role_password, 1, s.role_passwords, check_revision=not s.auto_migrate)
    try:
        with db.system(role) as conn:
            if conn.execute(sa.text(_ROLE_SETTINGS)).scalar():
                raise RoleSettingsPlanted(role)
    finally:
        db.dispose()


def check_redis() -> None:
    import redis

    from oml.services.runtime.settings import Settings

    url = Settings().redis_url
    if not url:
        raise RuntimeError("OML_REDIS_URL is not set")
    client = redis.Redis.from_url(url, socket_timeout=3, socket_connect_timeout=3)
    try:
        if not client.ping():
            raise RuntimeError("no PONG")
    finally:
        client.close()


def check_http(url: str) -> None:
    import httpx

    resp = httpx.get(url, timeout=3.0)
    if not resp.is_success:
        raise RuntimeError(f"HTTP {resp.status_code}")


def check_tcp(address: str) -> None:
    import socket

    host, _, port = address.rpartition(":")
    socket.create_connection((host or "127.0.0.1", int(port)), timeout=3).close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m oml.services.runtime.healthcheck", description=__doc__.splitlines()[0])
    ap.add_argument("--role", action="append", default=[], help="database role to log in as (repeatable)")
    ap.add_argument("--redis", action="store_true", help="PING OML_REDIS_URL")
    ap.add_argument("--http", action="append", default=[], help="URL that must answer 2xx (repeatable)")
    ap.add_argument("--tcp", action="append", default=[], help="HOST:PORT that must accept a connection (repeatable)")
    args = ap.parse_args(argv)
    checks = [(f"role {r}", lambda r=r: check_role(r)) for r in args.role]
    if args.redis:
        checks.append(("redis", check_redis))
    checks += [(f"http {u.split('?')[0]}", lambda u=u: check_http(u)) for u in args.http]
    checks += [(f"tcp {a}", lambda a=a: check_tcp(a)) for a in args.tcp]
    if not checks:
        ap.error("nothing to check")
    ok = True
    for name, fn in checks:
        try:
            fn()
            print(f"ok   {name}")
        except Exception as exc:  # report the type only: messages may embed URLs with passwords
            ok = False
            print(f"FAIL {name}: {exc.code if isinstance(exc, OMLError) else type(exc).__name__}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
