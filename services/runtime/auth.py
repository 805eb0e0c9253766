"""Bearer-key authentication: ``oml_<key id>_<secret>`` → :class:`Principal`.

The key id routes to the tenant through ``principal_directory`` (ids only);
the secret is checked against the SHA-256 stored for the principal under the
tenant's RLS, in constant time. Revoked keys, unknown keys and malformed
keys all get the same ``access.unauthenticated`` answer — after the same
work: an unknown key id still runs the principal lookup (under no tenant, so
RLS shows no row) and compares the secret against a dummy hash, and a
revoked key still compares its secret, so the answer's timing does not tell
a known key id from an unknown one.
"""
from __future__ import annotations

import hashlib
import secrets

import sqlalchemy as sa
import structlog

from oml.domain import verified_read as V
from oml.domain.access import Principal, parse_api_key, secret_matches
from oml.domain.chain import JournalRow
from oml.domain.errors import OMLError
from oml.services.journal import verified_state
from oml.services.reads import verified_reads
from oml.services.storage.db import Database

log = structlog.get_logger("oml.integrity")

UNAUTHENTICATED = OMLError("access.unauthenticated", "a valid bearer API key is required", 401)
# Compared against when there is no stored hash: no secret's SHA-256 equals it except by a 2^-256 chance.
_DUMMY_HASH = hashlib.sha256(secrets.token_bytes(32)).digest()
# set_config to '' binds no tenant (oml_tenant() is NULLIF(…, '')): the lookup runs and RLS shows nothing.
_NO_TENANT = ""


# The principal row and the journal row its created_seq names, in one round trip.
_PRINCIPAL = sa.text(
    "SELECT p.principal_id, p.identity_id, p.role, p.roots, p.secret_hash, p.revoked_seq, p.created_seq,"
    "       j.seq AS j_seq, j.kid, j.canonical, j.hash, j.prev_hash, j.signature,"
    "       (SELECT h.seq FROM chain_heads h WHERE h.tenant_id = p.tenant_id) AS head_seq"
    "  FROM principals p LEFT JOIN journal_events j ON j.tenant_id = p.tenant_id AND j.seq = p.created_seq"
    " WHERE p.tenant_id = :t AND p.principal_id = :p")


def _require_journalled(conn: sa.Connection, tenant: str, row: sa.Row) -> None:
    """Refuse a key whose row is not the projection of a genuine ``principal.created`` event.

    A row is not trusted to say who may act: a stolen workload credential can append an unsigned event and
    a row naming it (the guard in ``97_authority_guards.sql`` checks values, not signatures), and the
    schema owner can switch the guard off. The event at ``created_seq`` must verify like a verified read's
    (``verified_reads.genuine_event``, signature cached) and carry this row's identity, role, roots and
    secret hash. Raises ``access.unauthenticated`` (the same answer as for an unknown key) and logs
    ``integrity.auth_refused`` with ids and a reason code only.
    """
    why = None
    if row.j_seq is None:
        why = V.JOURNAL_MISSING
    else:
        try:
            ev = verified_reads.genuine_event(conn, tenant, JournalRow(
                int(row.j_seq), bytes(row.canonical), bytes(row.hash), bytes(row.prev_hash), bytes(row.signature), row.kid))
        except ValueError as exc:
            why = str(exc.args[0])
        else:
            d = ev["data"]
            if (ev["type"] != "principal.created" or d.get("principal_id") != row.principal_id
                    or d.get("identity_id") != str(row.identity_id) or d.get("role") != row.role
                    or d.get("secret_sha256") != bytes(row.secret_hash).hex()
                    or [str(r) for r in d.get("roots") or []] != [str(r) for r in row.roots]):
                why = V.NOT_BACKED
    if why is not None:
        log.error("integrity.auth_refused", tenant=tenant, principal_id=row.principal_id, created_seq=row.created_seq,
                  reason=why)
        raise UNAUTHENTICATED


def _require_verified(db: Database, conn: sa.Connection, tenant: str, row: sa.Row, paths: dict[str, str]) -> None:
    """Refuse a key whose principal or root paths are not what the verified chain says
    (services/journal/verified_state.py): the principal as its ``principal.created`` registered it and not revoked
    there, and each root at the path the verified ``workarea.created`` / ``workarea.reparented`` events give it (a
    reparent written around the journal would widen the key's scope). Raises ``access.unauthenticated``
    after recording the refusal (``integrity_events``)."""
    states = verified_state.of(db)
    s = states.current(conn, tenant, refresh=False, strict=False)
    if s.broken is None and s.seq != row.head_seq:  # the head read with the row: catch up only when it moved
        s = states.current(conn, tenant, strict=False)
    v = s.principals.get(row.principal_id)
    what = None
    if (v is None or v["revoked_seq"] is not None or v["identity"] != str(row.identity_id) or v["role"] != row.role
            or v["roots"] != [str(r) for r in row.roots] or v["secret_sha256"] != bytes(row.secret_hash).hex()):
        what = f"principal {row.principal_id}"
    elif any(s.path(str(r)) != paths.get(str(r)) for r in row.roots):
        what = f"the roots of principal {row.principal_id}"
    elif s.broken is not None:
        # An event that does not verify may have moved a subtree under this key's roots (the rows of a reparent
        # match their event by value): every workarea the rows put in scope must be there in the verified tree too.
        what = _moved_into_scope(conn, tenant, s, list(paths.values()))
    if what is not None:
        states.mismatch(tenant, s.seq, what)  # recorded; the answer is the same as for any refused key
        log.error("integrity.auth_refused", tenant=tenant, principal_id=row.principal_id, reason=verified_state.CODE)
        raise UNAUTHENTICATED


def _moved_into_scope(conn: sa.Connection, tenant: str, s: verified_state.TenantState, roots: list[str]) -> str | None:
    """The first workarea whose row path lies under one of ``roots`` but whose verified path does not equal it."""
    for w in conn.execute(sa.text("SELECT node_id, path FROM workareas WHERE tenant_id = :t"), {"t": tenant}):
        if any(w.path == r or w.path.startswith(r + ".") for r in roots) and s.path(str(w.node_id)) != w.path:
            return f"workarea {w.node_id}"
    return None


def revoked_seq(db: Database, api_key: str | None, role: str = "oml_server") -> int | None:
    """The journal seq of the revocation of ``api_key``'s principal when the key is well formed, its secret matches
    and it was revoked; ``None`` otherwise (unknown id, wrong secret, live key).

    For the CLI, which reads its own database: a revoked key is then named as
    revoked instead of sending the operator to look for another home. HTTP keeps
    one answer for every refused key, so a caller cannot probe which ids exist.
    """
    parsed = parse_api_key(api_key or "")
    if parsed is None:
        return None
    key_id, secret = parsed
    tenant = _tenant_of(db, role, key_id)
    if tenant is None:
        return None
    with db.tenant(role, tenant) as conn:
        row = conn.execute(_PRINCIPAL, {"t": tenant, "p": key_id}).one_or_none()
    if row is None or row.revoked_seq is None or not secret_matches(secret, bytes(row.secret_hash)):
        return None
    return int(row.revoked_seq)


def _tenant_of(db: Database, role: str, key_id: str) -> str | None:
    """The tenant a key id belongs to, from the tenant-free directory; None for an unknown id."""
    with db.system(role) as conn:
        return conn.execute(sa.text("SELECT tenant_id FROM principal_directory WHERE principal_id = :p"), {"p": key_id}).scalar()


def authenticate(db: Database, api_key: str | None, role: str = "oml_server") -> Principal:
    parsed = parse_api_key(api_key or "")
    if parsed is None:
        raise UNAUTHENTICATED
    key_id, secret = parsed
    tenant = _tenant_of(db, role, key_id)
    bound = tenant or _NO_TENANT
    with db.tenant(role, bound) as conn:
        row = conn.execute(_PRINCIPAL, {"t": bound, "p": key_id}).one_or_none()
        matches = secret_matches(secret, bytes(row.secret_hash) if row is not None else _DUMMY_HASH)
        if row is None or row.revoked_seq is not None or not matches:
            raise UNAUTHENTICATED
        _require_journalled(conn, tenant, row)
        # A restored database serves nothing until its erasures are replayed (docs/backup-restore.md).
        from oml.services.erasure.restore import refuse_if_pending

        refuse_if_pending(conn)
        roots = [str(r) for r in row.roots]
        found = conn.execute(sa.text("SELECT node_id, path FROM workareas WHERE tenant_id = :t AND node_id = ANY(CAST(:r AS uuid[]))"),
                             {"t": tenant, "r": roots}).all()
        paths = [w.path for w in found]
        _require_verified(db, conn, tenant, row, {str(w.node_id): w.path for w in found})
    return Principal(tenant, row.principal_id, str(row.identity_id), row.role, tuple(roots), tuple(sorted(paths)))
