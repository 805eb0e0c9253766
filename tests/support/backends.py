"""Which servers the integration tests run against: ``OML_TEST_BACKEND`` (README, Tests; deploy/README.md).

``embedded`` (the default): the embedded PostgreSQL with pgvector under
``.oml-test/pg``, a private ``redis-server`` process per test that needs one,
and moto's S3 server for the ``s3://`` lake.

``containers``: throwaway containers started by ``testcontainers`` —
PostgreSQL with pgvector, Redis and MinIO, pinned to the image tags
deploy/compose.yaml runs (``tests/integration/runtime/test_test_backend.py`` checks
they are the same). When no Docker engine answers (``docker info`` fails)
the embedded backend is used and the reason is printed in pytest's report
header and as a warning: the suite still runs, on the default servers.

The tests themselves are the same on both; only the fixtures in
tests/conftest.py and the server helpers in
tests/support/workers.py ask this module which to start.

Public API::

    POSTGRES_IMAGE, REDIS_IMAGE, MINIO_IMAGE   image tags (Docker Hub)
    docker_unavailable() -> str | None        why no Docker engine answers; None when one does
    choose(env=os.environ) -> Choice          the backend a session runs on, and why
    current() -> Choice                       choose(), once per process
    postgres_url() -> str                     owner URL of the session's PostgreSQL container
    minio() -> dict                           {"endpoint", "access_key", "secret_key"} of the session's MinIO container
    redis_container(port) -> container        a started Redis container published on 127.0.0.1:port
    stop_all() -> None                        stop the session's containers
"""
from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

POSTGRES_IMAGE = "pgvector/pgvector:0.8.5-pg17"
REDIS_IMAGE = "redis:7.4.2-alpine"
MINIO_IMAGE = "minio/minio:RELEASE.2025-04-22T22-12-26Z"

CHOICES = ("embedded", "containers")
# The container's superuser; the database is throwaway, so trust auth keeps the per-role logins password-free
# exactly as on the embedded server's socket.
_PG_USER = "oml_test"
_MINIO_KEYS = ("oml-test-access", "oml-test-secret-key")


@dataclass(frozen=True)
class Choice:
    """``name``: ``embedded`` or ``containers``; ``reason``: one line saying why (for the report header)."""
    name: str
    reason: str
    requested: str

    @property
    def fell_back(self) -> bool:
        return self.requested == "containers" and self.name != "containers"


def docker_unavailable() -> str | None:
    """None when ``docker info`` answers; otherwise why not (one line, no environment values)."""
    try:
        res = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True,
                             timeout=30)
    except FileNotFoundError:
        return "`docker info` failed: the docker CLI is not installed"
    except subprocess.TimeoutExpired:
        return "`docker info` failed: no answer within 30 s"
    if res.returncode != 0:
        first = next((ln.strip() for ln in (res.stderr or res.stdout).splitlines() if ln.strip()), "no output")
        return f"`docker info` failed (exit {res.returncode}): {first[:200]}"
    return None


def choose(env: Mapping[str, str] = os.environ) -> Choice:
    """The backend for ``OML_TEST_BACKEND`` in ``env``; raises ValueError on an unknown value."""
    requested = (env.get("OML_TEST_BACKEND") or "embedded").strip().lower()
    if requested not in CHOICES:
        raise ValueError(f"OML_TEST_BACKEND must be one of {', '.join(CHOICES)}")
    if requested == "embedded":
        return Choice("embedded", "the default (OML_TEST_BACKEND=containers runs the suite against containers)", requested)
    why = docker_unavailable()
    if why:
        return Choice("embedded", f"OML_TEST_BACKEND=containers, but no Docker engine answered ({why}); "
                                  "running on the embedded PostgreSQL, local redis-server and moto instead", requested)
    return Choice("containers", f"PostgreSQL {POSTGRES_IMAGE}, Redis {REDIS_IMAGE}, MinIO {MINIO_IMAGE} "
                                "(testcontainers)", requested)


@lru_cache(maxsize=1)
def current() -> Choice:
    return choose()


# ---------------------------------------------------------------------------------------------- containers

_started: dict[str, Any] = {}


def postgres_url() -> str:
    """Start (once) the PostgreSQL-with-pgvector container; its owner URL for SQLAlchemy with psycopg 3."""
    if "postgres" not in _started:
        from testcontainers.community.postgres import PostgresContainer

        pg = PostgresContainer(POSTGRES_IMAGE, username=_PG_USER, password="unused-under-trust", dbname="postgres",
                               driver="psycopg")
        pg.with_env("POSTGRES_HOST_AUTH_METHOD", "trust")
        _started["postgres"] = pg.start()
    return _started["postgres"].get_connection_url()


def minio() -> dict[str, str]:
    """Start (once) the MinIO container; ``{"endpoint": "http://host:port", "access_key", "secret_key"}``."""
    if "minio" not in _started:
        from testcontainers.core.container import DockerContainer
        from testcontainers.core.wait_strategies import HttpWaitStrategy

        c = (DockerContainer(MINIO_IMAGE).with_exposed_ports(9000)
             .with_env("MINIO_ROOT_USER", _MINIO_KEYS[0]).with_env("MINIO_ROOT_PASSWORD", _MINIO_KEYS[1])
             .with_command("server /data --address :9000")
             .waiting_for(HttpWaitStrategy(9000, "/minio/health/live")))
        _started["minio"] = c.start()
    c = _started["minio"]
    return {"endpoint": f"http://{c.get_container_host_ip()}:{c.get_exposed_port(9000)}",
            "access_key": _MINIO_KEYS[0], "secret_key": _MINIO_KEYS[1]}


def redis_container(port: int):
    """A started Redis container published on ``port`` of the Docker host (no persistence, like the local one)."""
    from testcontainers.community.redis import RedisContainer

    return (RedisContainer(REDIS_IMAGE).with_bind_ports(6379, port)
            .with_command("redis-server --save '' --appendonly no").start())


def stop_all() -> None:
    while _started:
        _, c = _started.popitem()
        try:
            c.stop()
        except Exception:  # noqa: BLE001 - Ryuk removes what is left when the session ends
            pass
