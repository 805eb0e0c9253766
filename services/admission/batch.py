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

from . import journal, projector, sets
from .signer import Signer

CHUNK = 25

_ARTIFACTS = (
    "WITH a AS (INSERT INTO artifacts " + sets.unnest(
        ("artifact_id", "kind", "claim_id", "version_id", "ciphertext", "sha256", "created_seq"),
        ("uuid", "text", "uuid", "uuid", "bytea", "bytea", "bigint")) + ")"
    " INSERT INTO wrapped_deks " + sets.unnest(("artifact_id", "key_version", "wrapped"), ("uuid", "int", "bytea"))
)
_SUBJECTS = "INSERT INTO claim_subjects " + sets.unnest(("claim_id", "subject_hmac"), ("uuid", "bytea")) + " ON CONFLICT DO NOTHING"


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
        sets.execute(conn, _ARTIFACTS, {
            "t": tenant, "artifact_id": [r.artifact_id for r in rows], "kind": [r.kind for r in rows],
            "claim_id": [r.claim_id for r in rows], "version_id": [r.version_id for r in rows],
            "ciphertext": [r.ciphertext for r in rows], "sha256": [r.digest for r in rows],
            "created_seq": [r.created_seq for r in rows], "key_version": [r.key_version for r in rows],
            "wrapped": [r.wrapped_dek for r in rows]})

def write_subjects(conn: sa.Connection, tenant: str, rows: list[tuple[str, bytes]]) -> None:
    """Insert declared-subject HMACs ``(claim_id, hmac)``; a repeat is a no-op."""
    if rows:
        sets.execute(conn, _SUBJECTS, {"t": tenant} | sets.columns(("claim_id", "subject_hmac"), rows))


@dataclass
class Batch:
    """The deferred writes of one group commit on ``head`` (attach with :func:`attach`).

    Every :data:`CHUNK` events the rows so far are sent in psycopg's pipeline mode without waiting for
    the server, so PostgreSQL inserts one chunk while admission classifies, seals and signs the next
    (the two sides of one transaction on two cores); :meth:`settle` waits for every result, and any
    error of a chunk is raised there, before the commit.
    """

    head: journal.Head
    rows: list[journal.Row] = field(default_factory=list)
    events: list[projector.Event] = field(default_factory=list)
    artifacts: list[Artifact] = field(default_factory=list)
    subjects: list[tuple[str, bytes]] = field(default_factory=list)
    pipeline: Any = None  # the open psycopg Pipeline while chunks are in flight

    def append(self, signer: Signer, type: str, actor: Any, data: dict[str, Any], **kw: Any) -> journal.Appended:
        """Link ``type`` after the head now (seq, hash, signature) and defer its row and projection."""
        if len(self.rows) >= CHUNK:
            self.send()
        ev, row = journal.link(self.head, signer, type, actor, data, **kw)
        self.rows.append(row)
        self.events.append((ev.seq, ev.at, ev.event["actor"], type, data))
        return ev

    def send(self) -> None:
        """Send everything deferred so far -- journal, artifacts, projections, subjects, in this order --
        without waiting for the results."""
        if not (self.rows or self.artifacts or self.subjects):
            return
        conn, tenant = self.head.conn, self.head.tenant
        if self.pipeline is None:
            self.pipeline = conn.connection.driver_connection.pipeline()
            self.pipeline.__enter__()
        journal.write(self.head, self.rows)
        write_artifacts(conn, tenant, self.artifacts)
        projector.apply_many(conn, tenant, self.events)
        write_subjects(conn, tenant, self.subjects)
        self.rows, self.events, self.artifacts, self.subjects = [], [], [], []

    def settle(self) -> None:
        """Send what is deferred and wait for every result (raises the first error of any chunk)."""
        self.send()
        if self.pipeline is not None:
            pipe, self.pipeline = self.pipeline, None
            pipe.__exit__(None, None, None)

    def discard(self) -> None:
        """Drop what is deferred and leave pipeline mode after a refusal (the transaction rolls back)."""
        self.rows, self.events, self.artifacts, self.subjects = [], [], [], []
        if self.pipeline is not None:
            pipe, self.pipeline = self.pipeline, None
            try:
                pipe.__exit__(None, None, None)
            except Exception:  # noqa: BLE001 -- the refusal being raised is the answer; the rollback follows
                pass


def attach(head: journal.Head) -> Batch:
    """Defer ``head``'s appends, artifacts and subjects into a new :class:`Batch` until it settles."""
    head.batch = Batch(head)
    return head.batch


def settle(head: journal.Head) -> None:
    """Write ``head``'s deferred rows and wait for them, if a batch is attached (before a read of the
    projections, or of anything else, inside the batch's transaction)."""
    if head.batch is not None:
        head.batch.settle()


def detach(head: journal.Head, *, ok: bool) -> None:
    """End ``head``'s batch: settle it when ``ok``, else discard it."""
    b, head.batch = head.batch, None
    if b is not None:
        b.settle() if ok else b.discard()
