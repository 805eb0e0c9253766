"""Group commits as sets (issue 14): a submit of N claims costs a constant number of statements.

While a :class:`Batch` is attached to the locked head (``head.batch``), admission validates each
claim, seals its body and links its ``claim.submitted`` event in Python -- the hash chain and the
signature computed in seq order under the head lock -- and keeps the rows here. :meth:`Batch.flush`
then writes them with one multi-row statement per table, in the order the database's guards need:
the journal rows (with the head and the outbox) first, then the ciphertext and wrapped DEKs, then the
projections through :func:`projector.apply_many` (the authority guard triggers on ``claim_versions``
read the journal event at ``submitted_seq``, so it must already be in the transaction), then the
declared subjects. Anything that reads projection state (a new version of an existing claim, lineage)
flushes first, so a read inside a batch sees every earlier item, as before.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from . import journal, projector
from .signer import Signer

_ARTIFACTS = sa.text(
    "WITH a AS (INSERT INTO artifacts (tenant_id, artifact_id, kind, claim_id, version_id, ciphertext, sha256, created_seq)"
    "           SELECT :t, * FROM unnest(CAST(:a AS uuid[]), CAST(:k AS text[]), CAST(:c AS uuid[]), CAST(:v AS uuid[]),"
    "                  CAST(:ct AS bytea[]), CAST(:d AS bytea[]), CAST(:s AS bigint[])))"
    " INSERT INTO wrapped_deks (tenant_id, artifact_id, key_version, wrapped)"
    " SELECT :t, * FROM unnest(CAST(:a AS uuid[]), CAST(:kv AS int[]), CAST(:w AS bytea[]))"
)
_SUBJECTS = sa.text(
    "INSERT INTO claim_subjects (tenant_id, claim_id, subject_hmac)"
    " SELECT :t, * FROM unnest(CAST(:c AS uuid[]), CAST(:h AS bytea[])) ON CONFLICT DO NOTHING"
)


@dataclass(frozen=True)
class Artifact:
    """A sealed artifact's row: ciphertext and its SHA-256, the HPKE-wrapped DEK and its key version."""

    artifact_id: str
    kind: str
    claim_id: str | None
    version_id: str | None
    ciphertext: bytes
    digest: bytes
    created_seq: int
    key_version: int
    wrapped_dek: bytes


def write_artifacts(conn: sa.Connection, tenant: str, rows: list[Artifact]) -> None:
    """Insert artifacts and their wrapped DEKs (one DEK per artifact, the shredding unit) in one statement."""
    if rows:
        conn.execute(_ARTIFACTS, {
            "t": tenant, "a": [r.artifact_id for r in rows], "k": [r.kind for r in rows], "c": [r.claim_id for r in rows],
            "v": [r.version_id for r in rows], "ct": [r.ciphertext for r in rows], "d": [r.digest for r in rows],
            "s": [r.created_seq for r in rows], "kv": [r.key_version for r in rows], "w": [r.wrapped_dek for r in rows]})


def write_subjects(conn: sa.Connection, tenant: str, rows: list[tuple[str, bytes]]) -> None:
    """Insert declared-subject HMACs ``(claim_id, hmac)``; a repeat is a no-op."""
    if rows:
        conn.execute(_SUBJECTS, {"t": tenant, "c": [c for c, _ in rows], "h": [h for _, h in rows]})


@dataclass
class Batch:
    """The deferred writes of one group commit on ``head`` (attach with :func:`attach`)."""

    head: journal.Head
    rows: list[journal.Row] = field(default_factory=list)
    events: list[projector.Event] = field(default_factory=list)
    artifacts: list[Artifact] = field(default_factory=list)
    subjects: list[tuple[str, bytes]] = field(default_factory=list)

    def append(self, signer: Signer, type: str, actor: Any, data: dict[str, Any], **kw: Any) -> journal.Appended:
        """Link ``type`` after the head now (seq, hash, signature) and defer its row and projection."""
        ev, row = journal.link(self.head, signer, type, actor, data, **kw)
        self.rows.append(row)
        self.events.append((ev.seq, ev.at, ev.event["actor"], type, data))
        return ev

    def flush(self) -> None:
        """Write everything deferred so far: journal, artifacts, projections, subjects (this order)."""
        conn, tenant = self.head.conn, self.head.tenant
        journal.write(self.head, self.rows)
        write_artifacts(conn, tenant, self.artifacts)
        projector.apply_many(conn, tenant, self.events)
        write_subjects(conn, tenant, self.subjects)
        self.rows, self.events, self.artifacts, self.subjects = [], [], [], []


def attach(head: journal.Head) -> Batch:
    """Defer ``head``'s appends, artifacts and subjects into a new :class:`Batch` until it is flushed."""
    head.batch = Batch(head)
    return head.batch


def flush(head: journal.Head) -> None:
    """Write ``head``'s deferred rows, if a batch is attached (before a read of projection state)."""
    if head.batch is not None:
        head.batch.flush()
