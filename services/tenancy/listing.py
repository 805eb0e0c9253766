"""Read-only listings for people at a terminal: tenants, identities, API keys, workareas.

No secret is ever listed: an API key is shown by its key id (the
``principal_id`` in ``oml_<key id>_<secret>``), never its secret or hash.
``list_tenants`` runs with the process's own credentials (the operator's,
like ``oml reconcile``); the others take an authenticated principal and
answer for its tenant only (RLS binds the tenant).
"""
from __future__ import annotations

import sqlalchemy as sa

from oml.domain import claims as rules
from oml.domain.access import Principal
from oml.services.reads import scope
from oml.services.storage.db import SNAPSHOT_ISOLATION

ROLE = "oml_server"


def list_tenants(ctx) -> list[dict]:
    """``[{tenant, created_at (ISO 8601), head_seq}]`` ordered by tenant."""
    with ctx.db.system(ROLE) as conn:
        tenants = conn.execute(sa.text("SELECT tenant_id, created_at FROM tenants ORDER BY tenant_id")).all()
    out = []
    for t in tenants:
        with ctx.db.tenant(ROLE, t.tenant_id) as conn:
            head = conn.execute(sa.text("SELECT seq FROM chain_heads WHERE tenant_id = :t"), {"t": t.tenant_id}).scalar()
        out.append({"tenant": t.tenant_id, "created_at": t.created_at.isoformat(timespec="seconds"), "head_seq": head or 0})
    return out


def list_identities(ctx, p: Principal) -> list[dict]:
    """The tenant's identities (admin key): ``[{identity_id, kind, display_name, created_seq}]``."""
    rules.require_act(p.role, "admin")
    with ctx.db.tenant(ROLE, p.tenant) as conn:
        rows = conn.execute(sa.text("SELECT identity_id, kind, display_name, created_seq FROM identities"
                                    " WHERE tenant_id = :t ORDER BY created_seq"), {"t": p.tenant}).mappings().all()
    return [{**r, "identity_id": str(r["identity_id"])} for r in rows]


def list_api_keys(ctx, p: Principal) -> list[dict]:
    """The tenant's API keys by key id (admin key): ``[{principal_id, identity_id, role, roots, created_seq, revoked_seq}]``."""
    rules.require_act(p.role, "admin")
    with ctx.db.tenant(ROLE, p.tenant) as conn:
        rows = conn.execute(sa.text("SELECT principal_id, identity_id, role, roots, created_seq, revoked_seq FROM principals"
                                    " WHERE tenant_id = :t ORDER BY created_seq"), {"t": p.tenant}).mappings().all()
    return [{**r, "identity_id": str(r["identity_id"]), "roots": [str(x) for x in r["roots"]]} for r in rows]


def list_workareas(ctx, p: Principal) -> list[dict]:
    """Workareas the principal may see: all of the tenant's for an admin, its subtrees for anyone else.

    No ``created_seq``: every key may list workareas, and a journal seq moves with simulated acts
    (docs/simulations.md, "Sequence numbers").
    """
    with ctx.db.tenant(ROLE, p.tenant, isolation=SNAPSHOT_ISOLATION) as conn:
        if p.role != "admin":
            p = scope.in_snapshot(conn, p)  # root paths from the snapshot the listed paths come from (scope.py)
        rows = conn.execute(sa.text(
            "SELECT node_id, parent_id, label, path, development, pii_policy FROM workareas"
            " WHERE tenant_id = :t ORDER BY path"), {"t": p.tenant}).mappings().all()
    out = []
    for r in rows:
        if p.role == "admin" or p.can_access(r["path"]):
            out.append({**r, "node_id": str(r["node_id"]), "parent_id": str(r["parent_id"]) if r["parent_id"] else None})
    return out
