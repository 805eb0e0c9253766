"""Bearer-key authentication: ``oml_<key id>_<secret>`` → :class:`Principal`.

The key id routes to the tenant through ``principal_directory`` (ids only);
the secret is checked against the SHA-256 stored for the principal under the
tenant's RLS, in constant time. Revoked keys, unknown keys and malformed
keys all get the same ``access.unauthenticated`` answer.
"""
from __future__ import annotations

import sqlalchemy as sa

from oml.domain.access import Principal, parse_api_key, secret_matches
from oml.domain.errors import OMLError
from oml.services.storage.db import Database

UNAUTHENTICATED = OMLError("access.unauthenticated", "a valid bearer API key is required", 401)


def authenticate(db: Database, api_key: str | None, role: str = "oml_server") -> Principal:
    parsed = parse_api_key(api_key or "")
    if parsed is None:
        raise UNAUTHENTICATED
    key_id, secret = parsed
    with db.system(role) as conn:
        tenant = conn.execute(sa.text("SELECT tenant_id FROM principal_directory WHERE principal_id = :p"), {"p": key_id}).scalar()
    if tenant is None:
        raise UNAUTHENTICATED
    with db.tenant(role, tenant) as conn:
        row = conn.execute(
            sa.text("SELECT principal_id, identity_id, role, roots, secret_hash, revoked_seq FROM principals"
                    " WHERE tenant_id = :t AND principal_id = :p"), {"t": tenant, "p": key_id}).one_or_none()
        if row is None or row.revoked_seq is not None or not secret_matches(secret, bytes(row.secret_hash)):
            raise UNAUTHENTICATED
        # A restored database serves nothing until its erasures are replayed (docs/backup-restore.md).
        from oml.services.restore import refuse_if_pending

        refuse_if_pending(conn)
        roots = [str(r) for r in row.roots]
        paths = conn.execute(sa.text("SELECT path FROM workareas WHERE tenant_id = :t AND node_id = ANY(CAST(:r AS uuid[]))"),
                             {"t": tenant, "r": roots}).scalars().all()
    return Principal(tenant, row.principal_id, str(row.identity_id), row.role, tuple(roots), tuple(sorted(paths)))
