"""The schema owner's transaction, shared by the test helpers (support.admission, support.erasure, support.recall)."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa

from oml.services.runtime.context import Context


@contextmanager
def owner(ctx: Context, tenant: str | None = None) -> Iterator[sa.Connection]:
    """A transaction as the schema owner (what a tampering test, or an attacker with DB access, gets).

    With ``tenant`` the transaction binds ``oml.tenant_id`` to it (transaction-local), as a tenant session would.
    """
    with ctx.db.engine(None).begin() as conn:
        if tenant is not None:
            conn.execute(sa.text("SELECT set_config('oml.tenant_id', :t, true)"), {"t": tenant})
        yield conn


@contextmanager
def temporary_tables(ctx: Context, *roles: str) -> Iterator[None]:
    """``roles`` allowed temporary tables for the body (98_public_privileges.sql keeps them from every workload but the
    reconciler): what a database gets whose owner could not run that file, for tests of what else holds then."""
    with owner(ctx) as c:
        db = c.execute(sa.text("SELECT quote_ident(current_database())")).scalar()
        c.execute(sa.text(f"GRANT TEMPORARY ON DATABASE {db} TO {', '.join(roles)}"))
    try:
        yield
    finally:
        with owner(ctx) as c:
            c.execute(sa.text(f"REVOKE TEMPORARY ON DATABASE {db} FROM {', '.join(roles)}"))


def version_dek(ctx: Context, tenant: str, version_id: str) -> sa.Row:
    """A version's body artifact and its wrapped DEK, read as the owner: ``claim_id``, ``artifact_id``,
    ``submitted_seq``, ``key_version``, ``wrapped``."""
    with owner(ctx, tenant) as c:
        return c.execute(sa.text(
            "SELECT v.claim_id, v.artifact_id, v.submitted_seq, d.key_version, d.wrapped FROM claim_versions v"
            "  JOIN wrapped_deks d ON d.tenant_id = v.tenant_id AND d.artifact_id = v.artifact_id"
            " WHERE v.tenant_id = :t AND v.version_id = :v"), {"t": tenant, "v": version_id}).one()


def integrity_reasons(ctx: Context, tenant: str, version_id: str) -> set[str]:
    """The reasons ``integrity_events`` holds for one version (``body.digest``, ``dek.digest``, …)."""
    with owner(ctx, tenant) as c:
        return set(c.execute(sa.text("SELECT reason FROM integrity_events WHERE tenant_id = :t AND version_id = :v"),
                             {"t": tenant, "v": version_id}).scalars())


@contextmanager
def chain_checks_off(conn: sa.Connection) -> Iterator[None]:
    """The chain-membership triggers (``97_chain_membership.sql``) disabled on the schema owner's ``conn`` for the body,
    enabled again after it in the same transaction: what an owner who cuts the journal's tail and moves the head back
    does first (the owner may disable a table's triggers; no workload may). Rows written meanwhile are never checked."""
    triggers = (("journal_events", "oml_chain_member"), ("chain_heads", "oml_chain_head"))
    for table, trigger in triggers:
        conn.execute(sa.text(f"ALTER TABLE {table} DISABLE TRIGGER {trigger}"))
    yield
    for table, trigger in triggers:
        conn.execute(sa.text(f"ALTER TABLE {table} ENABLE TRIGGER {trigger}"))
