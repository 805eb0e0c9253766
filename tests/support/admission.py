"""Helpers shared by the admission integration tests (not a test module).

``Kit`` holds one tenant with a writer, a reviewer and a "dual" identity
that holds both a writer and a reviewer key. ``owner(ctx, tenant)`` is a
transaction as the schema owner with the tenant bound: what an attacker with
database write access, or a test that tampers, gets.
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa

from oml.services.journal.projections import guards_off
from oml.services.runtime.context import Context
from oml.services.runtime.settings import get_settings

from support.owner import owner


@dataclass
class Kit:
    tenant: str
    fingerprint: str
    recovery: str
    root: str
    admin_key: str
    writer_key: str
    reviewer_key: str
    dual_writer_key: str
    dual_reviewer_key: str
    writer_identity: str
    reviewer_identity: str
    dual_identity: str


def reader_of_a(ctx: Context, kit: Kit):
    """Workareas ``a`` and ``b`` under ``kit``'s root and a reader key scoped to ``a`` alone:
    ``(admin principal, a, b, reader's API key)``."""
    from oml.services.runtime.auth import authenticate

    admin = authenticate(ctx.db, kit.admin_key)
    a = ctx.tenancy.create_workarea(admin, "a", kit.root)["node_id"]
    b = ctx.tenancy.create_workarea(admin, "b", kit.root)["node_id"]
    ident = ctx.tenancy.create_identity(admin, "person", "reader of a")["identity_id"]
    return admin, a, b, ctx.tenancy.create_principal(admin, ident, "reader", [a])["api_key"]


def make_kit(ctx: Context, tenant: str) -> Kit:
    from oml.services.runtime.auth import authenticate

    t = ctx.tenancy.create_tenant(tenant)
    admin = authenticate(ctx.db, t.admin_key)
    w = ctx.tenancy.create_identity(admin, "service", "ingest")["identity_id"]
    r = ctx.tenancy.create_identity(admin, "person", "reviewer")["identity_id"]
    d = ctx.tenancy.create_identity(admin, "person", "dual")["identity_id"]

    def key(ident, role):
        return ctx.tenancy.create_principal(admin, ident, role, [t.root_workarea])["api_key"]

    return Kit(tenant, t.fingerprint, t.recovery_private_key, t.root_workarea, t.admin_key, key(w, "writer"),
               key(r, "reviewer"), key(d, "writer"), key(d, "reviewer"), w, r, d)


@contextmanager
def owner_unguarded(ctx: Context, tenant: str) -> Iterator[sa.Connection]:
    """``owner`` with the authority guards (``97_authority_guards.sql``) off for this one transaction: what the schema
    owner, who may disable a table's triggers, gets. They are on again when the transaction commits."""
    with owner(ctx, tenant) as conn:
        with guards_off(conn):
            yield conn


def journal_len(ctx: Context, tenant: str) -> int:
    with owner(ctx, tenant) as c:
        return c.execute(sa.text("SELECT count(*) FROM journal_events WHERE tenant_id = :t"), {"t": tenant}).scalar()


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def operator_key(client, kit: Kit) -> str:
    """An API key of an operator principal over the kit's root, made over HTTP by its admin key."""
    return client.post("/v1/principals", json={"identity_id": kit.writer_identity, "role": "operator", "roots": [kit.root]},
                       headers=bearer(kit.admin_key)).json()["api_key"]


@contextmanager
def cli_env(ctx: Context) -> Iterator[dict[str, str]]:
    """Point ``oml`` (open_context) at the test database and KeyStore for the duration."""
    s = ctx.settings
    env = {"OML_DATABASE_URL": ctx.db.owner_url.render_as_string(hide_password=False), "OML_HOME": str(s.home),
           "OML_MASTER_KEY": s.master_key, "OML_KEY_DIR": str(Path(s.keys))}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    get_settings.cache_clear()
    try:
        yield env
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        get_settings.cache_clear()


def run_cli(ctx: Context, args: list[str], input: str | None = None, env: dict[str, str] | None = None):
    """Run ``oml <args>`` in-process against the test database; returns the Click result."""
    from typer.testing import CliRunner

    from oml.services.entrypoints.cli.main import app

    with cli_env(ctx):
        return CliRunner().invoke(app, args, input=input, env=env or {}, catch_exceptions=False)
