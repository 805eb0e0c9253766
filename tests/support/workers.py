"""Helpers shared by the outbox-worker tests (relay, lake-writer, indexer, failures)."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
import uvicorn

from oml.services.claims.admission import Submission
from oml.services.runtime.auth import authenticate
from oml.services.storage.db import Database

from support import backends


@dataclass
class Env:
    tenant: str
    root: str
    admin: object
    writer: object
    reviewer: object


def setup_tenant(ctx, tenant: str) -> Env:
    t = ctx.tenancy.create_tenant(tenant)
    admin = authenticate(ctx.db, t.admin_key)
    w = ctx.tenancy.create_identity(admin, "service", "ingest")
    r = ctx.tenancy.create_identity(admin, "person", "rev")
    wk = ctx.tenancy.create_principal(admin, w["identity_id"], "writer", [t.root_workarea])
    rk = ctx.tenancy.create_principal(admin, r["identity_id"], "reviewer", [t.root_workarea])
    return Env(tenant, t.root_workarea, admin, authenticate(ctx.db, wk["api_key"]), authenticate(ctx.db, rk["api_key"]))


def submit(ctx, env: Env, statements, *, workarea=None, claim_id=None, supersedes=None) -> list[dict]:
    items = [Submission(workarea or env.root, {"statement": s, "tags": ["t1"], "subject": "subj"},
                        claim_id=claim_id, supersedes=supersedes) for s in statements]
    out = ctx.admission.submit(env.writer, items)["items"]
    # Admission answers carry no journal seq (docs/simulations.md); these tests reason about seqs, so look them up.
    with ctx.db.tenant("oml_server", env.tenant) as c:
        seqs = dict(c.execute(sa.text("SELECT version_id::text, submitted_seq FROM claim_versions"
                                      " WHERE tenant_id = :t AND version_id = ANY(CAST(:v AS uuid[]))"),
                              {"t": env.tenant, "v": [i["version_id"] for i in out]}).all())
    return [i | {"seq": seqs[i["version_id"]]} for i in out]


def promote(ctx, env: Env, statement: str, **kw) -> dict:
    item = submit(ctx, env, [statement], **kw)[0]
    ctx.admission.review(env.reviewer, item["version_id"], "promote", "accurate")
    return item


def supersede(ctx, env: Env, claim_id: str, old_version: str, statement: str) -> dict:
    return promote(ctx, env, statement, claim_id=claim_id, supersedes=old_version)


def head(ctx, tenant: str) -> int:
    with ctx.db.tenant("oml_server", tenant) as c:
        return c.execute(sa.text("SELECT seq FROM chain_heads WHERE tenant_id = :t"), {"t": tenant}).scalar()


def tip_intervals(ctx, tenant: str) -> set[tuple]:
    """What the index must hold: every tip interval of an untainted version of a live claim."""
    with ctx.db.tenant("oml_indexer", tenant) as c:
        rows = c.execute(sa.text(
            "SELECT ti.version_id, ti.from_seq, ti.to_seq FROM tip_intervals ti"
            " JOIN claims cl ON cl.tenant_id = ti.tenant_id AND cl.claim_id = ti.claim_id"
            " JOIN claim_versions v ON v.tenant_id = ti.tenant_id AND v.version_id = ti.version_id"
            " WHERE ti.tenant_id = :t AND cl.erased_seq IS NULL AND NOT v.tainted"), {"t": tenant}).all()
    return {(str(r.version_id), r.from_seq, r.to_seq) for r in rows}


def index_rows(ctx, tenant: str, table: str = "memories_fts") -> list[tuple]:
    with ctx.db.tenant("oml_indexer", tenant) as c:
        rows = c.execute(sa.text(f"SELECT version_id, tip_from_seq, tip_to_seq FROM {table} WHERE tenant_id = :t"),
                         {"t": tenant}).all()
    return [(str(r.version_id), r.tip_from_seq, r.tip_to_seq) for r in rows]


def assert_index_exact(ctx, tenant: str) -> None:
    want = tip_intervals(ctx, tenant)
    for table in ("memories_fts", "memory_embeddings"):
        rows = index_rows(ctx, tenant, table)
        assert len(rows) == len(set(rows)), f"duplicate rows in {table}"
        assert set(rows) == want, table


def lake_rows(ctx, table: str, tenant: str) -> list[dict]:
    from oml.workers.lake.writer import lake_for

    dt = lake_for(ctx).table(table)
    return dt.to_pyarrow_table(filters=[("tenant_id", "=", tenant)]).to_pylist()


def assert_lake_exact(ctx, tenant: str) -> None:
    with ctx.db.tenant("oml_lake_writer", tenant) as c:
        seqs = list(c.execute(sa.text("SELECT seq FROM journal_events WHERE tenant_id = :t ORDER BY seq"), {"t": tenant}).scalars())
        arts = set(str(a) for a in c.execute(sa.text(
            "SELECT artifact_id FROM artifacts WHERE tenant_id = :t AND ciphertext IS NOT NULL"), {"t": tenant}).scalars())
    journal = sorted(r["seq"] for r in lake_rows(ctx, "journal", tenant))
    assert journal == seqs
    bodies = [r["artifact_id"] for r in lake_rows(ctx, "bodies", tenant)]
    assert len(bodies) == len(set(bodies))
    assert set(bodies) == arts


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class NoKeys:
    """A KeyStore stand-in that fails on any use: a keyless workload must never need a key."""

    def __init__(self, who: str = "a keyless worker") -> None:
        self.who = who

    def __getattr__(self, name):
        raise AssertionError(f"{self.who} touched the KeyStore ({name})")


class Fenced(Database):
    """A Database that can log in as the listed roles only."""

    def __init__(self, url: str, allowed: set[str]) -> None:
        super().__init__(url)
        self.allowed = allowed

    def engine(self, role, replica=None, *, isolation=None):
        if role not in self.allowed:
            raise AssertionError(f"this workload may not connect as {role or 'the owner'}")
        return super().engine(role, replica, isolation=isolation)


@contextmanager
def serving(app) -> Iterator[str]:
    """``app`` on a real uvicorn server on a free local port (no lifespan); yields its base URL, stops it after."""
    port = free_port()
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    th = threading.Thread(target=srv.run, daemon=True)
    th.start()
    deadline = time.monotonic() + 30
    while not srv.started:
        assert th.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        srv.should_exit = True
        th.join(timeout=10)


class RedisServer:
    """A private Redis on its own port (never the shared 6379), stopped and restarted on that port.

    A local ``redis-server`` process by default; a Redis container under
    ``OML_TEST_BACKEND=containers`` (tests/support/backends.py). Neither persists.
    """

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.proc: subprocess.Popen | None = None
        self.container = None
        self.host = "127.0.0.1"

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    def start(self) -> RedisServer:
        if backends.current().name == "containers":
            self.container = backends.redis_container(self.port)
            self.host = self.container.get_container_host_ip()
        else:
            exe = shutil.which("redis-server")
            assert exe, "redis-server is not installed"
            self.proc = subprocess.Popen([exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                with socket.create_connection((self.host, self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.container is not None:
            self.container.stop()
            self.container = None
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


def child_env(ctx, **extra) -> dict[str, str]:
    """Environment for a subprocess that opens the same database, KeyStore and lake as ``ctx``."""
    env = dict(os.environ)
    env.update({
        "OML_DATABASE_URL": str(ctx.db.owner_url.render_as_string(hide_password=False)),
        "OML_HOME": str(Path(ctx.settings.home)),
        "OML_MASTER_KEY": ctx.settings.master_key,
        "OML_LAKE_URI": ctx.settings.lake,
        "HF_HUB_OFFLINE": "1",
    })
    env.pop("OML_REDIS_URL", None)
    env.update({k: str(v) for k, v in extra.items()})
    return env
