"""Group commits as sets: a submit of N claims costs a constant number of statements.

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
from oml.domain.canonical import new_id
from oml.services.journal import journal, projector, sets
from oml.services.keys import wrapping
from oml.services.keys.signer import Signer
from oml.services.storage import pipelined

# Rows are sent every CHUNK events: a batch of 100 goes as two chunks. Interleaved trials of first chunks of 20-30
# and last chunks of 10-25 were no faster, nor was a short last chunk (docs/adr/0001-admission-write-path.md).
CHUNK = 50
# A batch of at least this many claims has a worker (fewer: starting one costs more than it saves).
WORKER_MIN = 50
# With a worker, a batch's bodies are classified and its new claims sealed there ahead of admission, this many
# per request (:meth:`Batch.ahead`), the first request FIRST_GROUP: admission waits for it at its first item.
AHEAD_GROUP = 10
FIRST_GROUP = 2

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
    twice per claim in a group commit."""

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


class Prepared(NamedTuple):
    """Ids drawn ahead for a new claim of a batch with a worker, so the worker can seal its body ahead:
    the AAD names them (``envelope.body_aad``)."""

    claim_id: str
    version_id: str
    artifact_id: str


class _Given(NamedTuple):
    """What the worker was given for one item: a body is sealed only when ``plaintext`` is set."""

    regions: Any
    public_key: bytes
    body: dict[str, Any]
    plaintext: bytes | None
    aad: bytes | None
    info: bytes | None


class _Answer(NamedTuple):
    """The worker's answer for one item: its findings (or the exception the classifier raised) and, when it
    sealed the body, ``(ciphertext, sha256, wrapped DEK)``."""

    findings: Any
    sealed: tuple[bytes, bytes, bytes] | None
    given: _Given


@dataclass
class _Group:
    """Items ``first …`` handed to the worker in one request; ``rid`` is the request's id, ``None`` once the
    worker is gone."""

    first: int
    items: list[_Given]
    rid: int | None


@dataclass(repr=False)
class Batch:
    """The deferred writes of one group commit on ``head`` (attach with :func:`attach`).

    Every :data:`CHUNK` events the rows so far are sent in psycopg's pipeline mode without waiting for
    the server, so PostgreSQL inserts one chunk while admission validates and signs the next (the two
    sides of one transaction on two cores); :meth:`settle` waits for every result, and any error of a
    chunk is raised there, before the commit. With a worker (a batch of :data:`WORKER_MIN` or more),
    the worker classifies every body and seals every new claim's ahead of admission (:meth:`ahead`).
    """

    head: journal.Head
    rows: list[journal.Row] = field(default_factory=list)
    events: list[projector.Event] = field(default_factory=list)
    artifacts: list[Artifact] = field(default_factory=list)
    subjects: list[tuple[str, bytes]] = field(default_factory=list)
    pipeline: Any = None  # the open psycopg Pipeline while chunks are in flight
    worker: wrapping.Worker | None = None  # classifies and seals ahead (services/keys/wrapping.py)
    prepared: dict[int, Prepared] = field(default_factory=dict)  # item -> ids drawn ahead (new claims)
    groups: list[_Group] = field(default_factory=list)  # requests not answered yet, oldest first
    answers: dict[int, _Answer] = field(default_factory=dict)  # item -> the worker's answer, not yet taken
    wrapper: envelope.Wrapper | None = None  # wraps the DEKs of bodies sealed here (not by the worker)

    def __repr__(self) -> str:
        # Counts only: the groups and answers hold plaintext bodies, which no log or traceback may show.
        return (f"Batch(tenant={self.head.tenant!r}, rows={len(self.rows)}, artifacts={len(self.artifacts)}, "
                f"worker={self.worker is not None}, unanswered={len(self.groups)})")

    def ahead(self, regions: Any, key: tuple[int, bytes], items: list[tuple[dict[str, Any], bytes, bool]]) -> None:
        """Have the worker classify each body of ``items`` ``(body, canonical bytes, new claim)`` (the batch's, in
        order) under ``regions`` and seal each new claim's body to ``key`` ``(version, X25519 public key)`` under
        ids drawn now (:attr:`prepared`), while admission works through the items (no-op without a worker).

        Runs under the head lock, with the regions and key admission would use; each item still takes its
        findings (:meth:`findings`) and its sealed body (:meth:`seal`) at the point it did, and only when the
        worker's input is what admission would have used there: a refusal is the same refusal, and an item
        whose AAD turns out otherwise is sealed in-process. The first group is small, so admission's first
        wait for the worker is short."""
        if self.worker is None:
            return
        version, pub = key
        tenant = self.head.tenant
        n = len(items)
        bounds = sorted({0, min(FIRST_GROUP, n), *range(FIRST_GROUP, n, AHEAD_GROUP), n})
        for lo, hi in zip(bounds, bounds[1:]):
            part = []
            for i in range(lo, hi):
                body, plaintext, new_claim = items[i]
                if new_claim:
                    ids = self.prepared[i] = Prepared(new_id(), new_id(), new_id())
                    part.append(_Given(regions, pub, body, plaintext, envelope.body_aad(tenant, *ids),
                                       envelope.dek_info(tenant, ids.artifact_id, version)))
                else:
                    part.append(_Given(regions, pub, body, None, None, None))
            rid = None
            if self.worker is not None:
                try:
                    rid = self.worker.seal(regions, pub, [(g.body, g.plaintext, g.aad, g.info) for g in part])
                except OSError:
                    self._drop_worker()
            self.groups.append(_Group(lo, part, rid))

    def _answer(self, i: int) -> _Answer | None:
        """The worker's answer for item ``i``, waiting for it if needed; ``None`` for an item not handed to it."""
        if i not in self.answers:
            group = next((g for g in self.groups if g.first <= i < g.first + len(g.items)), None)
            if group is None:
                return None
            answers = None
            if group.rid is not None and self.worker is not None:
                try:
                    answers = self.worker.result(group.rid)
                except (OSError, EOFError, pickle.UnpicklingError):
                    self._drop_worker()
            if answers is None or len(answers) != len(group.items):  # the worker is gone: classify here, seal later
                answers = [(f, None) for f in wrapping.classify_all(group.items[0].regions, [g.body for g in group.items])]
            self.groups.remove(group)
            self.answers.update({group.first + k: _Answer(f, sealed, given)
                                 for k, ((f, sealed), given) in enumerate(zip(answers, group.items))})
        return self.answers[i]

    def findings(self, i: int, body: dict[str, Any], regions: Any) -> list:
        """``pii.classify_body(body, phone_regions=regions)`` for item ``i``: the worker's answer when it
        classified the item ahead under the same regions, else computed here; an exception it raised is raised here."""
        answer = self._answer(i)
        if answer is None or answer.given.body is not body or answer.given.regions != regions:
            return _classify(body, regions)
        if isinstance(answer.findings, Exception):
            raise answer.findings
        return answer.findings

    def seal(self, body: dict[str, Any], row: Artifact, *, aad: bytes, info: bytes, public_key: bytes,
             plaintext: bytes | None = None, item: int | None = None) -> Artifact:
        """Encrypt ``body`` (``plaintext``: its canonical bytes, if computed) for the artifact ``row`` (its
        ciphertext fields unset) and defer its rows; returns the row with ciphertext, digest and wrapped DEK set.

        Item ``item``'s body as the worker sealed it ahead, when it sealed exactly this (plaintext, AAD, DEK info,
        public key); else here, under a fresh DEK wrapped by HPKE, the DEKs sealed here in one chunk sharing an
        encapsulation (:attr:`wrapper`, docs/adr/0002-envelope-encryption-and-hpke-sharing.md)."""
        answer = self.answers.pop(item, None) if item is not None else None
        if (answer is not None and answer.sealed is not None and answer.given.body is body
                and answer.given[1:] == (public_key, body, plaintext, aad, info)):
            ciphertext, digest, wrapped_dek = answer.sealed
        else:
            dek, ciphertext, digest = envelope.encrypt(body, aad=aad, plaintext=plaintext)
            if self.wrapper is None or self.wrapper.public_key != public_key:
                self.wrapper = envelope.Wrapper(public_key, wrapping.share())
            wrapped_dek = self.wrapper.wrap(dek, info)
        row = row._replace(ciphertext=ciphertext, digest=digest, wrapped_dek=wrapped_dek)
        self.artifacts.append(row)
        return row

    def _drop_worker(self) -> None:
        """Give up on the worker (it died): every group it holds is classified and sealed here instead."""
        wrapping.checkin(self.worker, healthy=False)
        self.worker = None
        for g in self.groups:
            g.rid = None

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
        self.wrapper = None  # its encapsulation's secret lives for one chunk at most

    def settle(self) -> None:
        """Send what is deferred and wait for every result (raises the first error of any chunk)."""
        self.send()
        if self.pipeline is not None:
            pipe, self.pipeline = self.pipeline, None
            with pipelined.wrapped("-- a group commit's pipeline"):
                pipe.__exit__(None, None, None)

    def discard(self) -> None:
        """Drop what is deferred and leave pipeline mode after a refusal (the transaction rolls back)."""
        self.rows, self.events, self.artifacts, self.subjects = [], [], [], []
        self.groups, self.answers, self.wrapper = [], {}, None
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

    ``size``: the number of claims to come; from :data:`WORKER_MIN` on, the batch has a worker process
    (:meth:`Batch.ahead`)."""
    head.batch = Batch(head, worker=wrapping.checkout() if size >= WORKER_MIN else None)
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
        # A refused batch reads the answers it will not use (briefly), so its worker serves the next batch rather
        # than being killed under the head lock and started again.
        wrapping.checkin(b.worker, healthy=ok or (b.worker is not None and b.worker.drain()))
