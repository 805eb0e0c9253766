"""Decrypt on serve: unwrap one artifact's DEK and open its body (DESIGN.md, Formats and Bodies and keys).

Only oml-server calls this, on a connection bound to the tenant as
``oml_server`` (the one database role with SELECT on ``wrapped_deks``),
after access and the simulation predicate passed, and the caller logs the
read in ``read_events`` in the same transaction. The tenant's X25519
private key for the DEK's key version comes from the KeyStore; nothing
decrypted is cached.
"""
from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from cryptography.exceptions import InvalidTag

from oml.domain import envelope
from oml.domain.errors import OMLError, not_found
from oml.services.keystore import KeyStore


def _erased() -> OMLError:
    return OMLError("claim.erased", "the body was erased", 410)


def decrypt_artifact(conn: sa.Connection, keystore: KeyStore, tenant: str, artifact_id: str) -> dict[str, Any]:
    """The decrypted JSON object of one artifact (a body or a note).

    Raises ``claim.not_found`` (404) for an unknown artifact, ``claim.erased``
    (410) when its ciphertext was purged or its DEK shredded, and
    ``integrity.body`` (500) when the ciphertext does not open (tampered or
    wrong key): the AAD binds tenant, claim, version and artifact.
    """
    row = conn.execute(sa.text(
        "SELECT a.artifact_id, a.claim_id, a.version_id, a.ciphertext, d.key_version, d.wrapped"
        " FROM artifacts a LEFT JOIN wrapped_deks d ON d.tenant_id = a.tenant_id AND d.artifact_id = a.artifact_id"
        " WHERE a.tenant_id = :t AND a.artifact_id = CAST(:a AS uuid)"), {"t": tenant, "a": artifact_id}).one_or_none()
    if row is None:
        raise not_found("artifact")
    if row.ciphertext is None or row.wrapped is None:
        raise _erased()
    art = str(row.artifact_id)
    try:
        dek = envelope.unwrap(bytes(row.wrapped), info=envelope.dek_info(tenant, art, row.key_version),
                              private_key=keystore.get(tenant, f"encryption/{row.key_version}"))
        plain = envelope.open_body(bytes(row.ciphertext), dek=dek,
                                   aad=envelope.body_aad(tenant, str(row.claim_id or ""), str(row.version_id or ""), art))
    except (InvalidTag, ValueError) as exc:
        raise OMLError("integrity.body", "a stored body failed authentication", 500) from exc
    return json.loads(plain)


def decrypt_version(conn: sa.Connection, keystore: KeyStore, tenant: str, version_id: str) -> dict[str, Any]:
    """The decrypted body of a claim version (``statement``, ``source``, ``tags``, …).

    Same errors as :func:`decrypt_artifact`; ``claim.not_found`` for an unknown version.
    """
    art = conn.execute(sa.text("SELECT artifact_id FROM claim_versions WHERE tenant_id = :t AND version_id = CAST(:v AS uuid)"),
                       {"t": tenant, "v": version_id}).scalar()
    if art is None:
        raise not_found("claim version")
    return decrypt_artifact(conn, keystore, tenant, str(art))


def log_read(conn: sa.Connection, tenant: str, *, principal_id: str | None, identity_id: str | None, role: str, op: str,
             claim_ids: list[str], workarea_ids: list[str] = (), query_digest: bytes | None = None) -> None:
    """Record one read in ``read_events`` (ids and a keyed digest only, never text), in the caller's transaction."""
    conn.execute(sa.text(
        "INSERT INTO read_events (tenant_id, principal_id, identity_id, role, op, workarea_ids, claim_ids, query_digest)"
        " VALUES (:t, :p, CAST(:i AS uuid), :r, :op, CAST(:w AS uuid[]), CAST(:c AS uuid[]), :q)"),
        {"t": tenant, "p": principal_id, "i": identity_id, "r": role, "op": op, "w": sorted(set(workarea_ids)),
         "c": sorted(set(claim_ids)), "q": query_digest})
