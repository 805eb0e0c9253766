"""The server's indexing feed: plaintext of claim versions for the oml-indexer (docs/design.md §Outbox and workers).

The indexer holds no key. It asks this feed, authorised by an ``indexer``
principal of the tenant, for the versions it must index; the feed runs as
``oml_server`` (the one role that reads wrapped DEKs), unwraps each DEK with
the tenant's X25519 private key from the KeyStore (``encryption/<version>``),
opens the body with its AAD (``domain/envelope.py``: tenant, claim, version,
artifact bound) through :func:`oml.services.reads.bodies.decrypt_artifact`,
and logs the read in ``read_events`` (op ``indexing_feed``, ids only) in the
same transaction. Nothing decrypted is cached or logged.

Credentials: runs with the server's database role and KeyStore; the caller
(the indexer) needs only its principal.

Public API::

    IndexingFeed(db, keystore).fetch(principal, version_ids) -> list[FeedItem]
    indexing_feed(ctx) -> IndexingFeed

A version that cannot be served comes back as a :class:`FeedItem` with
``error`` set to a reason code and no text, so one bad body never hides the
others: ``claim.erased`` (the claim was erased: not a fault), ``version.not_found``,
``access.denied`` (outside the principal's workarea roots), ``body.purged``
(ciphertext gone but claim not erased), ``body.dek_missing`` (wrapped DEK gone
but claim not erased), ``body.key_missing`` (KeyStore has no private key for
the DEK's key version), ``body.integrity`` (the ciphertext does not open with
its AAD, or its digest differs from the version's recorded digest),
``body.malformed`` (the body has no string ``statement``), ``version.unverified``
(the journal does not back the version's projected status: an integrity
event, :mod:`oml.services.reads.verified_reads`).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING
from uuid import UUID

import sqlalchemy as sa

from oml.domain import claims as rules
from oml.domain import context_window as windows
from oml.domain import verified_read as V
from oml.domain.access import Principal
from oml.domain.errors import OMLError
from oml.services.keys.keystore import KeyNotFound, KeyStore
from oml.services.reads import verified_reads
from oml.services.reads.bodies import body_refusal, decrypt_artifact, log_read
from oml.services.storage.db import Database

if TYPE_CHECKING:  # pragma: no cover
    from oml.services.runtime.context import Context

ROLE = "oml_server"
OP = "indexing_feed"
MAX_VERSIONS = 1000

# Reason codes an item can carry instead of text (stable; shown in poison records).
ERASED = "claim.erased"
NOT_FOUND = "version.not_found"
DENIED = "access.denied"
PURGED = "body.purged"
DEK_MISSING = "body.dek_missing"
KEY_MISSING = "body.key_missing"
INTEGRITY = "body.integrity"
UNVERIFIED = "version.unverified"
MALFORMED = "body.malformed"


@dataclass(frozen=True)
class FeedItem:
    """One requested version: its plaintext fields, or ``error`` (a reason code) and no text."""

    version_id: str
    claim_id: str | None = None
    workarea_id: str | None = None
    statement: str | None = None
    subject: str | None = None
    tags: tuple[str, ...] = ()
    tainted: bool = False
    simulation_id: str | None = None
    error: str | None = None
    #: The body's declared place in a thread (``domain/context_window.py``), None when it declares none.
    context: windows.Context | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def fts_text(self) -> str:
        """Text for ``to_tsvector``: statement, subject and tags, newline-separated."""
        return "\n".join([self.statement or ""] + ([self.subject] if self.subject else []) + list(self.tags))

    def embedding_text(self) -> str:
        """Text for the embedding model: the statement (docs/workers.md, Indexer)."""
        return self.statement or ""


def _uuid_or_none(value: str) -> str | None:
    try:
        return str(UUID(str(value)))
    except (ValueError, TypeError, AttributeError):
        return None


def _fields(body: dict) -> tuple[str, str | None, tuple[str, ...]] | None:
    statement = body.get("statement")
    if not isinstance(statement, str) or not statement.strip():
        return None
    subject = body.get("subject")
    subject = subject if isinstance(subject, str) and subject.strip() else None
    tags = body.get("tags")
    tags = tuple(t for t in tags if isinstance(t, str)) if isinstance(tags, list) else ()
    return statement, subject, tags


# One row per requested version, each found by its full key behind a LATERAL ... LIMIT fence with the
# tenant as `(SELECT :t)`: the shape services/reads/rows.py explains, which keeps the plan linear when a
# young tenant's statistics are stale (measured there).
_ROWS = sa.text(
    "SELECT v.version_id, v.claim_id, v.workarea_id, v.artifact_id, v.ciphertext_sha256, v.tainted,"
    "       v.simulation_id, c.erased_seq, w.path, a.ciphertext IS NULL AS purged,"
    "       a.ciphertext AS ct, d.artifact_id IS NOT NULL AS has_dek, d.key_version, d.wrapped, " + verified_reads.SUBMITTED_COLUMNS +
    "  FROM unnest(CAST(:ids AS uuid[])) AS x(vid)"
    "  CROSS JOIN LATERAL (SELECT * FROM claim_versions v WHERE v.tenant_id = (SELECT CAST(:t AS text)) AND v.version_id = x.vid LIMIT 1) v"
    "  CROSS JOIN LATERAL (SELECT c.erased_seq FROM claims c"
    "                       WHERE c.tenant_id = (SELECT CAST(:t AS text)) AND c.claim_id = v.claim_id LIMIT 1) c"
    "  CROSS JOIN LATERAL (SELECT w.path FROM workareas w"
    "                       WHERE w.tenant_id = (SELECT CAST(:t AS text)) AND w.node_id = v.workarea_id LIMIT 1) w"
    "  LEFT JOIN LATERAL (SELECT a.ciphertext FROM artifacts a"
    "                      WHERE a.tenant_id = (SELECT CAST(:t AS text)) AND a.artifact_id = v.artifact_id LIMIT 1) a ON true"
    "  LEFT JOIN LATERAL (SELECT d.artifact_id, d.key_version, d.wrapped FROM wrapped_deks d"
    "                      WHERE d.tenant_id = (SELECT CAST(:t AS text)) AND d.artifact_id = v.artifact_id LIMIT 1) d ON true"
    + verified_reads.SUBMITTED_FROM)


class IndexingFeed:
    """Decrypts versions for an ``indexer`` principal; every call that serves text is logged."""

    def __init__(self, db: Database, keystore: KeyStore) -> None:
        self.db = db
        self.keystore = keystore

    def fetch(self, principal: Principal, version_ids: Sequence[str]) -> list[FeedItem]:
        """Plaintext fields of ``version_ids`` (at most 1,000 per call), in request order.

        Raises ``access.denied`` (403) unless ``principal`` has role ``indexer``,
        ``access.unauthenticated`` (401) when it was revoked, and
        ``admission.invalid`` (422) for more than 1,000 ids. Per-version
        failures are items with ``error`` set (see the module docstring).
        """
        rules.require_act(principal.role, "indexing_feed")
        if len(version_ids) > MAX_VERSIONS:
            raise OMLError("admission.invalid", f"at most {MAX_VERSIONS} versions per call", 422, {"field": "version_ids"})
        tenant = principal.tenant
        wanted = [(_uuid_or_none(v), str(v)) for v in version_ids]
        ids = sorted({u for u, _ in wanted if u})
        out: dict[str, FeedItem] = {}
        with self.db.tenant(ROLE, tenant) as conn:
            who = conn.execute(sa.text(
                "SELECT revoked_seq, roots FROM principals WHERE tenant_id = :t AND principal_id = :p"),
                {"t": tenant, "p": principal.principal_id}).one_or_none()
            if who is None or who.revoked_seq is not None:
                raise OMLError("access.unauthenticated", "a valid bearer API key is required", 401)
            # Roots are re-resolved here: a re-parent since authentication moves the subtree paths.
            root_paths = conn.execute(sa.text(
                "SELECT path FROM workareas WHERE tenant_id = :t AND node_id = ANY(CAST(:r AS uuid[]))"),
                {"t": tenant, "r": [str(r) for r in who.roots]}).scalars().all()
            rows = conn.execute(_ROWS, {"t": tenant, "ids": ids}).all()
            unverified = verified_reads.refused(conn, tenant, [r.version_id for r in rows if r.erased_seq is None])
            served_claims: list[str] = []
            served_workareas: list[str] = []
            for r in rows:
                vid, cid, wid = str(r.version_id), str(r.claim_id), str(r.workarea_id)
                base = dict(version_id=vid, claim_id=cid, workarea_id=wid, tainted=bool(r.tainted),
                            simulation_id=str(r.simulation_id) if r.simulation_id else None)
                if r.erased_seq is not None:
                    out[vid] = FeedItem(**base, error=ERASED)
                elif not any(rules.is_within(r.path, rp) for rp in root_paths):
                    out[vid] = FeedItem(**base, error=DENIED)
                elif vid in unverified:
                    out[vid] = FeedItem(**base, error=UNVERIFIED)
                elif r.purged:
                    out[vid] = FeedItem(**base, error=PURGED)
                elif not r.has_dek:
                    out[vid] = FeedItem(**base, error=DEK_MISSING)
                elif (why := body_refusal(conn, tenant, r, bytes(r.ct), r.ciphertext_sha256)) is not None:
                    # Not the ciphertext the signed claim.submitted names: never indexed, counted like a read's.
                    verified_reads.record(conn, tenant, [verified_reads.Refusal(vid, int(r.submitted_seq or 0), why)])
                    out[vid] = FeedItem(**base, error=INTEGRITY)
                elif verified_reads.dek_refusal(conn, tenant, r, int(r.key_version), bytes(r.wrapped)) is not None:
                    # Not the wrapped DEK the latest signed act names for this artifact: overwritten.
                    verified_reads.record(conn, tenant, [verified_reads.Refusal(vid, int(r.submitted_seq or 0), V.DEK_DIGEST)])
                    out[vid] = FeedItem(**base, error=INTEGRITY)
                else:
                    try:
                        body = decrypt_artifact(conn, self.keystore, tenant, str(r.artifact_id))
                    except KeyNotFound:
                        out[vid] = FeedItem(**base, error=KEY_MISSING)
                        continue
                    except OMLError as exc:
                        out[vid] = FeedItem(**base, error=ERASED if exc.code == "claim.erased" else INTEGRITY)
                        continue
                    fields = _fields(body) if isinstance(body, dict) else None
                    if fields is None:
                        out[vid] = FeedItem(**base, error=MALFORMED)
                        continue
                    statement, subject, tags = fields
                    out[vid] = FeedItem(**base, statement=statement, subject=subject, tags=tags,
                                        context=windows.parse(body))
                    served_claims.append(cid)
                    served_workareas.append(wid)
            if served_claims:
                log_read(conn, tenant, principal_id=principal.principal_id, identity_id=principal.identity_id,
                         role=principal.role, op=OP, claim_ids=served_claims, workarea_ids=served_workareas)
        return [out.get(u) if u and u in out else FeedItem(version_id=raw, error=NOT_FOUND) for u, raw in wanted]


def indexing_feed(ctx: Context) -> IndexingFeed:
    """The feed bound to a process context (database and KeyStore)."""
    return IndexingFeed(ctx.db, ctx.keystore)
