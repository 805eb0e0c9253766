"""Decrypt on serve: unwrap one artifact's DEK and open its body (docs/design.md §Bodies and keys; docs/journal-format.md).

Only oml-server calls this, on a connection bound to the tenant as
``oml_server`` (the one database role with SELECT on ``wrapped_deks``),
after access and the simulation predicate passed, and the caller logs the
read in ``read_events`` in the same transaction. The tenant's X25519
private key for the DEK's key version comes from the KeyStore; nothing
decrypted is cached. A version's body is opened only when the journal backs
its projected status (:mod:`oml.services.reads.verified_reads`); one it
does not back is :class:`Unverified` — to the reader, not found. A version's
ciphertext is served only when it is the one the signed ``claim.submitted``
names (its ``ciphertext_sha256``): a body sealed anew to the tenant's public
key, with every stored digest rewritten, is refused (``integrity.body``) and
counted in ``integrity_events`` under a reason naming what failed. Its wrapped
DEK is unwrapped only when it is the one the latest signed act for the artifact
names (``wrapped_dek_sha256`` of ``claim.submitted`` or of the last
``encryption_key.rewrapped``; :func:`verified_reads.dek_refusal`): another is
``dek.digest``, never taken for an erasure.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any

import psycopg
import sqlalchemy as sa
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from psycopg import pq
from psycopg import sql as pgsql

from oml.domain import envelope
from oml.domain import verified_read as V
from oml.domain.errors import OMLError, not_found
from oml.services.keys.keystore import KeyStore
from oml.services.reads import verified_reads
from oml.services.runtime.tracing import traced
from oml.services.storage import pipelined


class Unverified(OMLError):
    """A version whose projected status the journal does not back (an integrity event): served as not found."""

    def __init__(self) -> None:
        super().__init__("claim.not_found", "claim not found", 404)


def _gone(erased: bool) -> OMLError:
    """A ciphertext or wrapped DEK that is gone: an erasure when the claim's ``erased_seq`` says so (set only by the
    journalled ``claim.erased`` act, which the authority guard checks), else destroyed outside any act, which a
    reader must not take for an erasure (reconcile reports it)."""
    if erased:
        return OMLError("claim.erased", "the body was erased", 410)
    return OMLError("integrity.body", "a stored body or its key is missing", 500)


def _check_digest(row) -> None:
    """Raise ``ValueError`` unless the ciphertext is the one ``artifacts.sha256`` names.

    For artifacts opened one at a time (a simulation's notes; the indexing feed, which first compares the
    ciphertext with the signed ``claim.submitted`` through :func:`body_refusal`). No workload role may update the
    digest; the owner can, which is why version bodies are judged by the signed event (:func:`decrypt_versions`).
    """
    if row.sha256 is None or hashlib.sha256(bytes(row.ciphertext)).digest() != bytes(row.sha256):
        raise ValueError("ciphertext digest")


def decrypt_artifact(conn: sa.Connection, keystore: KeyStore, tenant: str, artifact_id: str) -> dict[str, Any]:
    """The decrypted JSON object of one artifact (a body or a note).

    Raises ``claim.not_found`` (404) for an unknown artifact, ``claim.erased``
    (410) when its ciphertext was purged or its DEK shredded by the claim's erasure, and
    ``integrity.body`` (500) when the ciphertext is not the one admission stored or does not open (tampered or
    wrong key: the AAD binds tenant, claim, version and artifact), or is gone, or its DEK, with no erasure.
    """
    row = conn.execute(sa.text(
        "SELECT a.artifact_id, a.claim_id, a.version_id, a.ciphertext, a.sha256, d.key_version, d.wrapped,"
        " c.erased_seq IS NOT NULL AS erased"
        " FROM artifacts a LEFT JOIN wrapped_deks d ON d.tenant_id = a.tenant_id AND d.artifact_id = a.artifact_id"
        " LEFT JOIN claims c ON c.tenant_id = a.tenant_id AND c.claim_id = a.claim_id"
        " WHERE a.tenant_id = :t AND a.artifact_id = CAST(:a AS uuid)"), {"t": tenant, "a": artifact_id}).one_or_none()
    if row is None:
        raise not_found("artifact")
    if row.ciphertext is None or row.wrapped is None:
        raise _gone(bool(row.erased))
    art = str(row.artifact_id)
    try:
        _check_digest(row)
        dek = envelope.unwrap(bytes(row.wrapped), info=envelope.dek_info(tenant, art, row.key_version),
                              private_key=keystore.get(tenant, f"encryption/{row.key_version}"))
        plain = envelope.open_body(bytes(row.ciphertext), dek=dek,
                                   aad=envelope.body_aad(tenant, str(row.claim_id or ""), str(row.version_id or ""), art))
    except (InvalidTag, ValueError) as exc:
        raise OMLError("integrity.body", "a stored body failed authentication", 500) from exc
    return json.loads(plain)


def decrypt_version(conn: sa.Connection, keystore: KeyStore, tenant: str, version_id: str) -> dict[str, Any]:
    """The decrypted body of a claim version (``statement``, ``source``, ``tags``, …): :func:`decrypt_versions`
    for one version, raising what it maps the version to (``claim.not_found``, :class:`Unverified`,
    ``claim.erased``, ``integrity.body``)."""
    got = _decrypt_versions(conn, keystore, tenant, [version_id])
    body = got.get(str(version_id))
    if body is None:
        raise not_found("claim version")
    if isinstance(body, OMLError):
        raise body
    return body


_BODIES = sa.text(
    "SELECT " + verified_reads.VERDICT_COLUMNS + ", " + verified_reads.SUBMITTED_COLUMNS + ","
    " a.artifact_id AS stored_artifact, a.ciphertext, a.sha256, d.key_version, d.wrapped, c.erased_seq IS NOT NULL AS erased"
    + verified_reads.VERDICT_FROM + verified_reads.SUBMITTED_FROM +
    # LEFT: a version whose artifact row is gone is still judged (and its refusal recorded), then not found
    " LEFT JOIN LATERAL (SELECT a.artifact_id, a.ciphertext, a.sha256 FROM artifacts a"
    "   WHERE a.tenant_id = (SELECT CAST(:t AS text)) AND a.artifact_id = v.artifact_id LIMIT 1) a ON true"
    " LEFT JOIN LATERAL (SELECT d.key_version, d.wrapped FROM wrapped_deks d"
    "   WHERE d.tenant_id = (SELECT CAST(:t AS text)) AND d.artifact_id = v.artifact_id LIMIT 1) d ON true"
    " LEFT JOIN LATERAL (SELECT c.erased_seq FROM claims c"
    "   WHERE c.tenant_id = (SELECT CAST(:t AS text)) AND c.claim_id = v.claim_id LIMIT 1) c ON true")

_TAMPERED = "a stored body failed authentication"


def body_refusal(conn: sa.Connection, tenant: str, row: Any, ciphertext: bytes, stored_sha256: bytes | None) -> str | None:
    """Why this stored ciphertext is not the one the signed ``claim.submitted`` admitted (a reason code), or None.

    ``artifacts.sha256`` and ``claim_versions.ciphertext_sha256`` are rows: whoever can write them (the database
    owner) could seal a body of their own to the tenant's public key, write its wrapped DEK and its digest. The
    signed event's ``ciphertext_sha256`` is what no role can change without the tenant's signing key.
    With verification off (``OML_VERIFY_READS=false``) ``stored_sha256`` is compared instead.
    ``row``: read with :data:`verified_reads.SUBMITTED_COLUMNS` plus ``version_id`` and ``artifact_id``.
    """
    digest = hashlib.sha256(ciphertext).digest()
    if not verified_reads.enabled():
        return None if stored_sha256 is not None and digest == bytes(stored_sha256) else V.BODY_DIGEST
    try:
        signed = verified_reads.signed_body(conn, tenant, row)
    except ValueError as exc:
        return str(exc.args[0])
    return V.body_reason(signed, str(row.version_id), str(row.artifact_id), digest)


@traced("recall.decrypt")
def decrypt_versions(conn: sa.Connection, keystore: KeyStore, tenant: str, version_ids: list[str]
                     ) -> dict[str, dict[str, Any] | OMLError]:
    """Bodies of many versions in one round trip (recall's span ``recall.decrypt``): see :func:`_decrypt_versions`."""
    return _decrypt_versions(conn, keystore, tenant, version_ids)


def _decrypt_versions(conn: sa.Connection, keystore: KeyStore, tenant: str, version_ids: list[str]
                      ) -> dict[str, dict[str, Any] | OMLError]:
    """Bodies of many versions in one round trip: version id → body, or the :class:`OMLError` for it:
    ``claim.not_found`` (unknown), :class:`Unverified` (a status the journal does not back), ``claim.erased``
    (410, purged or shredded by the claim's erasure) or ``integrity.body`` (500).

    ``integrity.body`` is counted in ``integrity_events`` under a reason that tells what failed
    (:mod:`oml.domain.verified_read`): ``body.digest`` / ``body.not_submitted`` (the ciphertext is not the one the
    signed ``claim.submitted`` names), ``dek.digest`` (the wrapped DEK is not the one the latest signed act for
    its artifact names: its ``claim.submitted`` or the last ``encryption_key.rewrapped``; overwritten, even by a
    genuine wrap of another DEK), ``dek.unwrap`` (the wrapped DEK does not open under the tenant's key:
    overwritten, for a submission journalled before it recorded the DEK's digest), ``body.open`` (the body does not open under its DEK), ``body.missing`` / ``dek.missing``
    (gone without an erasure). Each DEK is still unwrapped per artifact; the tenant's private key is read from
    the KeyStore once per key version per call. Nothing is cached beyond the call but verified event ids.
    """
    ids = sorted({str(v) for v in version_ids})
    out: dict[str, dict[str, Any] | OMLError] = {v: not_found("claim version") for v in ids}
    if not ids:
        return out
    # One statement verifies and opens: the verdict's rows (verified_reads), the signed submission behind each
    # body, and each version's artifact and wrapped DEK. Full-key lookups behind LATERAL/LIMIT fences, tenant as
    # (SELECT :t): linear plans even when the tenant's statistics are stale (services/reads/rows.py explains).
    rows = pipelined.lookup(conn, _BODIES, {"t": tenant, "ids": ids})
    bad = verified_reads.judge(conn, tenant, rows)
    out.update({v: Unverified() for v in bad})
    rows = [r for r in rows if str(r.version_id) not in bad and r.stored_artifact is not None]
    keys: dict[int, X25519PrivateKey] = {}
    refusals: list[verified_reads.Refusal] = []

    def refuse(row: Any, reason: str, err: OMLError) -> None:
        out[str(row.version_id)] = err
        refusals.append(verified_reads.Refusal(str(row.version_id), int(row.submitted_seq or 0), reason))

    for row in rows:
        vid, art = str(row.version_id), str(row.artifact_id)
        if row.ciphertext is None or row.wrapped is None:
            err = _gone(bool(row.erased))
            if row.erased:
                out[vid] = err
            else:
                refuse(row, V.BODY_MISSING if row.ciphertext is None else V.DEK_MISSING, err)
            continue
        why = body_refusal(conn, tenant, row, bytes(row.ciphertext), row.sha256)
        if why is not None:
            refuse(row, why, OMLError("integrity.body", _TAMPERED, 500))
            continue
        if verified_reads.dek_refusal(conn, tenant, row, int(row.key_version), bytes(row.wrapped)) is not None:
            refuse(row, V.DEK_DIGEST, OMLError("integrity.body", "a stored body's key is not the one journalled", 500))
            continue
        if row.key_version not in keys:
            keys[row.key_version] = X25519PrivateKey.from_private_bytes(keystore.get(tenant, f"encryption/{row.key_version}"))
        try:
            dek = envelope.unwrap(bytes(row.wrapped), info=envelope.dek_info(tenant, art, row.key_version),
                                  private_key=keys[row.key_version])
        except (InvalidTag, ValueError):
            refuse(row, V.DEK_UNWRAP, OMLError("integrity.body", "a stored body's key failed authentication", 500))
            continue
        try:
            plain = envelope.open_body(bytes(row.ciphertext), dek=dek,
                                       aad=envelope.body_aad(tenant, str(row.claim_id), vid, art))
        except (InvalidTag, ValueError):
            refuse(row, V.BODY_OPEN, OMLError("integrity.body", _TAMPERED, 500))
            continue
        out[vid] = json.loads(plain)
    if refusals:
        verified_reads.record(conn, tenant, refusals)
    return out


_LOG_READ = ("INSERT INTO read_events (tenant_id, principal_id, identity_id, role, op, workarea_ids, claim_ids, query_digest)"
             " VALUES (:t, :p, CAST(:i AS uuid), :r, :op, CAST(:w AS uuid[]), CAST(:c AS uuid[]), :q)")
# The same row as a simple query followed by COMMIT (log_read's ``commit``); the values are psycopg-quoted literals.
_LOG_READ_COMMIT = pgsql.SQL(
    "INSERT INTO read_events (tenant_id, principal_id, identity_id, role, op, workarea_ids, claim_ids, query_digest)"
    " VALUES ({t}, {p}, CAST({i} AS uuid), {r}, {op}, CAST({w} AS uuid[]), CAST({c} AS uuid[]), {q}); COMMIT")


def log_read(conn: sa.Connection, tenant: str, *, principal_id: str | None, identity_id: str | None, role: str, op: str,
             claim_ids: list[str], workarea_ids: list[str] = (), query_digest: bytes | None = None,
             commit: bool = False) -> None:
    """Record one read in ``read_events`` (ids and a keyed digest only, never text), in the caller's transaction.

    ``commit``: the row is the transaction's last statement, and the row and ``COMMIT`` go in one round trip (one
    simple query; the values as literals quoted by psycopg): when this returns the read and its row are committed,
    and SQLAlchemy's transaction is closed with it (psycopg reads the transaction status from the connection and
    sends nothing): a statement sent on ``conn`` after it raises ``InvalidRequestError`` inside the caller's
    ``begin()``, and the caller's own commit finds nothing left to do. An error leaves the transaction failed and nothing
    committed, as the plain insert would, except a connection lost after the ``COMMIT`` left (``OperationalError``):
    the row may then have committed, as with any commit whose answer never came; the read is not served."""
    params = {"t": tenant, "p": principal_id, "i": identity_id, "r": role, "op": op, "w": sorted(set(workarea_ids)),
              "c": sorted(set(claim_ids)), "q": query_digest}
    if not commit:
        conn.execute(sa.text(_LOG_READ), params)
        return
    dc = conn.connection.driver_connection
    if dc.pgconn.transaction_status != pq.TransactionStatus.INTRANS:
        raise RuntimeError("log_read(commit=True) needs an open transaction")
    with pipelined.wrapped("-- the read-log row and COMMIT"):
        res = dc.pgconn.exec_(_LOG_READ_COMMIT.format(**{k: pgsql.Literal(v) for k, v in params.items()}).as_bytes(dc))
        if res.status == pq.ExecStatus.FATAL_ERROR:
            # A connection lost after the COMMIT left may have committed the row: the read is not served either way.
            raise pipelined.error_for(dc.pgconn, res, "the connection was lost at the read-log row's COMMIT; the read"
                                      " is not served" if dc.pgconn.status == pq.ConnStatus.BAD else
                                      "the read-log row was refused; nothing was committed")
        if res.status != pq.ExecStatus.COMMAND_OK or dc.pgconn.transaction_status != pq.TransactionStatus.IDLE:
            raise psycopg.OperationalError("the read-log row did not commit")
    # SQLAlchemy's transaction ends too (psycopg finds nothing to commit: no round trip), so its state is the
    # server's: a statement sent on ``conn`` after this raises InvalidRequestError inside the caller's ``begin()``
    # instead of opening a new transaction with no tenant bound, which that context would then commit.
    conn.commit()
