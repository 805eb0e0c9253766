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

import pickle
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import sqlalchemy as sa

from oml.domain import envelope
from oml.services.storage import pipelined

from . import journal, projector, sets, wrapping
from .signer import Signer

# Rows are sent every CHUNK events. Each set statement has a fixed server cost (parse and plan: 1.3-1.8 ms for the
# three of a chunk in PostgreSQL's statement log); a batch of 100 goes as two chunks (T11 also sent a short last
# chunk: three; docs/decisions.md, T15).
CHUNK = 50
# DEKs go to the wrap worker in groups of this many, independently of CHUNK: at the end of a batch only the
# last group's wraps are waited for (a chunk's worth, 50 × ~90 µs, was exposed at every commit).
WRAP_GROUP = 10
# A batch of at least this many claims wraps its DEKs in the worker (fewer: starting one costs more than it saves).
WORKER_MIN = 50
# With a worker, a batch's bodies are classified there ahead of admission, this many per request
# (:meth:`Batch.classify_ahead`); each item still takes its findings at the point it did.
CLASSIFY_GROUP = 10

_ARTIFACT_COLUMNS = ("artifact_id", "kind", "claim_id", "version_id", "ciphertext", "sha256", "created_seq")
_ARTIFACT_TYPES = ("uuid", "text", "uuid", "uuid", "bytea", "bytea", "bigint")
_ARTIFACTS = (
    "WITH a AS (INSERT INTO artifacts " + sets.unnest(_ARTIFACT_COLUMNS, _ARTIFACT_TYPES) + ")"
    " INSERT INTO wrapped_deks " + sets.unnest(("artifact_id", "key_version", "wrapped"), ("uuid", "int", "bytea"))
)
_SUBJECT_COLUMNS, _SUBJECT_TYPES = ("claim_id", "subject_hmac"), ("uuid", "bytea")
_SUBJECTS = "INSERT INTO claim_subjects " + sets.unnest(_SUBJECT_COLUMNS, _SUBJECT_TYPES) + " ON CONFLICT DO NOTHING"


class Artifact(NamedTuple):
    """A sealed artifact's row: ciphertext and its SHA-256, the HPKE-wrapped DEK and its key version.

    A named tuple (not a frozen dataclass): ``_replace`` costs a fifth of ``dataclasses.replace``,
    twice per claim in a group commit (issue 14)."""

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
        a = sets.array
        sets.execute(conn, _ARTIFACTS, {
            "t": tenant, "artifact_id": a("uuid", [r.artifact_id for r in rows]), "kind": a("text", [r.kind for r in rows]),
            "claim_id": a("uuid", [r.claim_id for r in rows]), "version_id": a("uuid", [r.version_id for r in rows]),
            "ciphertext": a("bytea", [r.ciphertext for r in rows]), "sha256": a("bytea", [r.digest for r in rows]),
            "created_seq": a("bigint", [r.created_seq for r in rows]), "key_version": a("int", [r.key_version for r in rows]),
            "wrapped": a("bytea", [r.wrapped_dek for r in rows])})

def write_subjects(conn: sa.Connection, tenant: str, rows: list[tuple[str, bytes]]) -> None:
    """Insert declared-subject HMACs ``(claim_id, hmac)``; a repeat is a no-op."""
    if rows:
        sets.execute(conn, _SUBJECTS, {"t": tenant} | sets.columns(_SUBJECT_COLUMNS, rows, _SUBJECT_TYPES))


@dataclass
class Batch:
    """The deferred writes of one group commit on ``head`` (attach with :func:`attach`).

    Every :data:`CHUNK` events the rows so far
    are sent in psycopg's pipeline mode without waiting for the server, so PostgreSQL inserts one chunk
    while admission classifies, seals and signs the next (the two sides of one transaction on two cores);
    :meth:`settle` waits for every result, and any error of a chunk is raised there, before the commit.
    """

    head: journal.Head
    rows: list[journal.Row] = field(default_factory=list)
    events: list[projector.Event] = field(default_factory=list)
    artifacts: list[Artifact] = field(default_factory=list)
    subjects: list[tuple[str, bytes]] = field(default_factory=list)
    pipeline: Any = None  # the open psycopg Pipeline while chunks are in flight
    worker: wrapping.Worker | None = None  # wraps DEKs in a worker process (services/admission/wrapping.py)
    unwrapped: list[tuple[Artifact, bytes, bytes, bytes]] = field(default_factory=list)  # (row, dek, info, public key)
    # Groups handed to the worker (or, without one, to wrap here), oldest first: (public key, jobs, rows,
    # the worker's request id or None).
    wrapping: list[tuple[bytes, list[tuple[bytes, bytes]], list[Artifact], int | None]] = field(default_factory=list)
    left: int = 0  # events still expected (the claims of the submit not yet appended)
    # Classification ahead: (first item, bodies, regions, request id or None once the worker is gone), and
    # the answers taken so far by item.
    classes: list[tuple[int, list[dict], Any, int | None]] = field(default_factory=list)
    found: dict[int, Any] = field(default_factory=dict)

    def classify_ahead(self, regions: Any, bodies: list[dict[str, Any]]) -> None:
        """Have the worker classify ``bodies`` (the items of the batch, in order) under ``regions`` while admission
        works through the items (no-op without a worker). Runs under the head lock, with the regions admission
        would classify with; :meth:`findings` hands each item its own answer."""
        if self.worker is None:
            return
        # The first group is classified here, as admission reaches it: the worker's first answer would come only
        # after its wake-up and the whole group, with admission waiting (about 1.5 ms a batch, measured).
        for g in range(CLASSIFY_GROUP, len(bodies), CLASSIFY_GROUP):
            part = bodies[g:g + CLASSIFY_GROUP]
            rid = None
            if self.worker is not None:
                try:
                    rid = self.worker.classify(regions, part)
                except OSError:
                    self._drop_worker()
            self.classes.append((g, part, regions, rid))

    def findings(self, i: int, body: dict[str, Any], regions: Any) -> list:
        """``pii.classify_body(body, phone_regions=regions)`` for item ``i``: the worker's answer when it
        classified the item ahead, else computed here; an exception it raised is raised here."""
        if i not in self.found:
            group = next((c for c in self.classes if c[0] <= i < c[0] + len(c[1])), None)
            if group is None or group[1][i - group[0]] is not body or group[2] != regions:
                return _classify(body, regions)
            first, part, _, rid = group
            answers = None
            if rid is not None and self.worker is not None:
                try:
                    answers = self.worker.result(rid)
                except (OSError, EOFError, pickle.UnpicklingError):
                    self._drop_worker()
            if answers is None or len(answers) != len(part):
                answers = wrapping.classify_all(regions, part)
            self.classes.remove(group)
            self.found.update({first + k: a for k, a in enumerate(answers)})
        answer = self.found.pop(i)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def seal(self, body: dict[str, Any], row: Artifact, *, aad: bytes, info: bytes, public_key: bytes,
             plaintext: bytes | None = None) -> Artifact:
        """Encrypt ``body`` (``plaintext``: its canonical bytes, if computed) for the artifact ``row`` (its
        ciphertext fields unset) and defer its rows.

        The DEK is wrapped here, or, with a worker, by the worker process a chunk at a time and
        collected one chunk later (:meth:`send`). Returns the row with ciphertext and digest set."""
        if self.worker is None:
            sealed = envelope.seal(body, aad=aad, info=info, public_key=public_key, key_version=row.key_version,
                                   plaintext=plaintext)
            row = row._replace(ciphertext=sealed.ciphertext, digest=sealed.digest, wrapped_dek=sealed.wrapped_dek)
            self.artifacts.append(row)
            return row
        dek, ciphertext, digest = envelope.encrypt(body, aad=aad, plaintext=plaintext)
        row = row._replace(ciphertext=ciphertext, digest=digest)
        self.unwrapped.append((row, dek, info, public_key))
        # The batch's last WRAP_GROUP DEKs go one at a time, so the commit waits for one wrap, not ten.
        if len(self.unwrapped) >= WRAP_GROUP or self.left <= WRAP_GROUP:
            self._dispatch()
        return row

    def _dispatch(self) -> None:
        """Hand the unwrapped DEKs, grouped by public key, to the worker."""
        group, self.unwrapped = self.unwrapped, []
        for pub in dict.fromkeys(g[3] for g in group):
            part = [g for g in group if g[3] == pub]
            jobs = [(dek, info) for _, dek, info, _ in part]
            rid = None
            if self.worker is not None:
                try:
                    rid = self.worker.submit(pub, jobs)
                except OSError:
                    self._drop_worker()
            self.wrapping.append((pub, jobs, [r for r, *_ in part], rid))

    def _drop_worker(self) -> None:
        """Give up on the worker (it died): every group it holds is wrapped here instead."""
        wrapping.checkin(self.worker, healthy=False)
        self.worker = None
        self.wrapping = [(pub, jobs, rows, None) for pub, jobs, rows, _ in self.wrapping]
        self.classes = [(first, part, regions, None) for first, part, regions, _ in self.classes]

    def _collect(self, *, keep_last: bool) -> None:
        """Move wrapped artifacts to the rows to write; ``keep_last`` leaves the newest group in flight."""
        if not keep_last and self.unwrapped:
            self._dispatch()
        while len(self.wrapping) > (1 if keep_last else 0):
            pub, jobs, rows, rid = self.wrapping[0]
            wrapped = None
            if rid is not None and self.worker is not None:
                try:
                    wrapped = self.worker.result(rid)
                except (OSError, EOFError, pickle.UnpicklingError):
                    self._drop_worker()
            if wrapped is None or len(wrapped) != len(jobs):
                wrapped = wrapping.wrap_many(pub, jobs)
            self.wrapping.pop(0)
            self.artifacts += [r._replace(wrapped_dek=w) for r, w in zip(rows, wrapped)]

    def append(self, signer: Signer, type: str, actor: Any, data: dict[str, Any], **kw: Any) -> journal.Appended:
        """Link ``type`` after the head now (seq, hash, signature) and defer its row and projection."""
        if len(self.rows) >= CHUNK:
            self.send()
        ev, row = journal.link(self.head, signer, type, actor, data, **kw)
        self.left -= 1
        self.rows.append(row)
        self.events.append((ev.seq, ev.at, ev.event["actor"], type, data))
        return ev

    def send(self) -> None:
        """Send everything deferred so far -- journal, artifacts, projections, subjects, in this order --
        without waiting for the results."""
        self._collect(keep_last=True)
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
        """Send what is deferred and wait for every result (raises the first error of any chunk).

        The rows go before the last wraps are collected and the artifacts those wraps complete after them,
        so PostgreSQL writes the last chunk while the worker finishes (nothing reads an artifact before the
        commit; T15)."""
        self.send()
        self._collect(keep_last=False)
        if self.artifacts:
            write_artifacts(self.head.conn, self.head.tenant, self.artifacts)
            self.artifacts = []
        if self.pipeline is not None:
            pipe, self.pipeline = self.pipeline, None
            with pipelined.wrapped("-- a group commit's pipeline"):
                pipe.__exit__(None, None, None)

    def discard(self) -> None:
        """Drop what is deferred and leave pipeline mode after a refusal (the transaction rolls back)."""
        self.rows, self.events, self.artifacts, self.subjects = [], [], [], []
        self.unwrapped, self.wrapping, self.classes, self.found = [], [], [], {}
        if self.pipeline is not None:
            pipe, self.pipeline = self.pipeline, None
            try:
                pipe.__exit__(None, None, None)
            except Exception:  # noqa: BLE001 -- the refusal being raised is the answer; the rollback follows
                pass


def _classify(body: dict[str, Any], regions: Any) -> list:
    import oml.domain.pii as pii  # imported when first needed (phonenumbers is slow to import)

    return pii.classify_body(body, phone_regions=regions)


def attach(head: journal.Head, size: int = 1) -> Batch:
    """Defer ``head``'s appends, artifacts and subjects into a new :class:`Batch` until it settles.

    ``size``: the number of claims to come; from :data:`WORKER_MIN` on, DEKs are wrapped in the worker process."""
    head.batch = Batch(head, worker=wrapping.checkout() if size >= WORKER_MIN else None, left=size)
    return head.batch


def settle(head: journal.Head) -> None:
    """Write ``head``'s deferred rows and wait for them, if a batch is attached (before a read of the
    projections, or of anything else, inside the batch's transaction)."""
    if head.batch is not None:
        head.batch.settle()


def detach(head: journal.Head, *, ok: bool) -> None:
    """End ``head``'s batch: settle it when ``ok``, else discard it."""
    b, head.batch = head.batch, None
    if b is None:
        return
    try:
        b.settle() if ok else b.discard()
    finally:
        wrapping.checkin(b.worker, healthy=ok)
