"""Bearer-key authentication: ``oml_<key id>_<secret>`` → :class:`Principal`.

The key id routes to the tenant through ``principal_directory`` (ids only);
the secret is checked against the SHA-256 stored for the principal under the
tenant's RLS, in constant time. Revoked keys, unknown keys and malformed
keys all get the same ``access.unauthenticated`` answer — after the same
work: an unknown key id still runs the principal lookup (under no tenant, so
RLS shows no row) and compares the secret against a dummy hash, and a
revoked key still compares its secret, so the answer's timing does not tell
a known key id from an unknown one (issue 13.9).
"""
from __future__ import annotations

import hashlib
import secrets

import sqlalchemy as sa

from oml.domain.access import Principal, parse_api_key, secret_matches
from oml.domain.errors import OMLError
from oml.services.storage.db import Database

UNAUTHENTICATED = OMLError("access.unauthenticated", "a valid bearer API key is required", 401)
# Compared against when there is no stored hash: no secret's SHA-256 equals it except by a 2^-256 chance.
_DUMMY_HASH = hashlib.sha256(secrets.token_bytes(32)).digest()
# set_config to '' binds no tenant (oml_tenant() is NULLIF(…, '')): the lookup runs and RLS shows nothing.
_NO_TENANT = ""


def authenticate(db: Database, api_key: str | None, role: str = "oml_server") -> Principal:
    parsed = parse_api_key(api_key or "")
    if parsed is None:
        raise UNAUTHENTICATED
    key_id, secret = parsed
    with db.system(role) as conn:
        tenant = conn.execute(sa.text("SELECT tenant_id FROM principal_directory WHERE principal_id = :p"), {"p": key_id}).scalar()
    bound = tenant or _NO_TENANT
    with db.tenant(role, bound) as conn:
        row = conn.execute(
            sa.text("SELECT principal_id, identity_id, role, roots, secret_hash, revoked_seq FROM principals"
                    " WHERE tenant_id = :t AND principal_id = :p"), {"t": bound, "p": key_id}).one_or_none()
        matches = secret_matches(secret, bytes(row.secret_hash) if row is not None else _DUMMY_HASH)
        if row is None or row.revoked_seq is not None or not matches:
            raise UNAUTHENTICATED
        # A restored database serves nothing until its erasures are replayed (docs/backup-restore.md).
        from oml.services.restore import refuse_if_pending

        refuse_if_pending(conn)
        roots = [str(r) for r in row.roots]
        paths = conn.execute(sa.text("SELECT path FROM workareas WHERE tenant_id = :t AND node_id = ANY(CAST(:r AS uuid[]))"),
                             {"t": tenant, "r": roots}).scalars().all()
    return Principal(tenant, row.principal_id, str(row.identity_id), row.role, tuple(roots), tuple(sorted(paths)))
