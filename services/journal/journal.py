"""Appending to a tenant's chain inside an admission transaction (docs/design.md §The journal).

``append`` must run in a transaction bound to the tenant. It locks the
tenant's chain head (``SELECT … FOR UPDATE``) so ``seq`` order is commit
order, builds the v1 event, hashes and signs it, inserts the row and moves
the head. ``UNIQUE (tenant_id, prev_hash)`` makes a fork impossible to commit
even if the lock were bypassed.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, NamedTuple

import sqlalchemy as sa

from oml.domain import chain, signing
from oml.domain.canonical import new_id, now
from oml.domain.events import Actor, encode, event_object
from oml.services.journal import sets
from oml.services.keys.signer import Signer
from oml.services.runtime.tracing import annotate, traced
from oml.services.storage import pipelined

# Data-modifying CTEs run exactly once whether or not the outer query reads them (PostgreSQL docs,
# "Data-Modifying Statements in WITH"); the outer SELECT only sends the NOTIFY when asked to. One
# statement for any number of events: the rows, the head moved to the last one, one outbox message each
# (ids and seqs only), so a group commit costs what a single act does.
_COLUMNS = ("seq", "event_id", "type", "kid", "at", "canonical", "hash", "prev_hash", "signature")
_TYPES = ("bigint", "uuid", "text", "text", "timestamptz", "bytea", "bytea", "bytea", "bytea")
_APPEND = (
    "WITH j AS (INSERT INTO journal_events "
    + sets.unnest(_COLUMNS, _TYPES) + "),"
    "     head AS (UPDATE chain_heads SET seq = %(last_seq)b, hash = %(last_hash)b WHERE tenant_id = %(t)b),"
    "     o AS (INSERT INTO outbox (tenant_id, seq, topic, payload)"
    "           SELECT %(t)b, u.s, u.ty, jsonb_build_object('seq', u.s, 'type', u.ty)"
    "           FROM unnest(CAST(%(seq)b AS bigint[]), CAST(%(type)b AS text[])) WITH ORDINALITY AS u(s, ty, n) ORDER BY u.n)"
    " SELECT pg_notify('oml_outbox', %(t)b) WHERE %(notify)b"
)


class Row(NamedTuple):
    """A linked, signed journal row not yet written (:func:`link`; :func:`write` inserts it); its fields
    are ``_COLUMNS`` in order (a tuple, so a chunk's rows transpose into the statement's arrays)."""

    seq: int
    event_id: str
    type: str
    kid: str
    at: dt.datetime
    canonical: bytes
    hash: bytes
    prev_hash: bytes
    signature: bytes


@dataclass(frozen=True)
class Appended:
    seq: int
    hash: bytes
    at: dt.datetime
    event: dict[str, Any]


def head_queries(tenant: str) -> list[pipelined.Query]:
    """The statements that lock ``tenant``'s chain head (``SELECT … FOR UPDATE``) and read its current
    signing key, for :class:`Head` (sent with a transaction's other opening lookups by admission)."""
    return [pipelined.Query("SELECT seq, hash FROM chain_heads WHERE tenant_id = %(t)s FOR UPDATE", {"t": tenant}, prepare=True),
            pipelined.Query("SELECT kid FROM tenant_keys WHERE tenant_id = %(t)s AND purpose = 'signing' AND retired_seq IS NULL",
                            {"t": tenant}, prepare=True)]


class Head:
    """The locked chain head of one tenant for the current transaction.

    ``memo`` caches lookups for the rest of the transaction (the encryption key, workareas): while the
    head is locked no other transaction can append, and every change to those rows is an appended act.
    ``locked``: the rows of :func:`head_queries`, when the caller has already run them in this
    transaction; otherwise they are run here. Raises ``LookupError`` for a tenant without a chain head.
    """

    def __init__(self, conn: sa.Connection, tenant: str, locked: list[list[Any]] | None = None) -> None:
        head_rows, kid_rows = locked if locked is not None else pipelined.fetch(conn, head_queries(tenant))
        if not head_rows:
            raise LookupError("tenant has no chain head")
        self.conn, self.tenant, self.seq, self.hash = conn, tenant, head_rows[0].seq, bytes(head_rows[0].hash)
        self.memo: dict[Any, Any] = {}
        self.notified = False
        self.fetched: dict[Any, list[Any]] = {}  # rows read in the transaction's opening round trip (ActRunner.run)
        # A group commit's deferred writes (services/journal/batch.py), or None: written at once.
        self.batch: Any = None
        self.signing_kid = kid_rows[0].kid if kid_rows else None
        # Rows linked and signed in this transaction: once it commits, the act runner links them onto the process's
        # verified state without checking its own signatures (services/journal/verified_state.py).
        self.linked: list[Row] = []
        self.verified: Any = None  # the tenant's verified state at this head, once the act runner has it


def create_head(conn: sa.Connection, tenant: str) -> Head:
    conn.execute(
        sa.text("INSERT INTO chain_heads (tenant_id, seq, hash) VALUES (:t, 0, :h)"),
        {"t": tenant, "h": chain.genesis(tenant)},
    )
    return Head(conn, tenant)


@traced("journal.link")
def link(
    head: Head,
    signer: Signer,
    type: str,
    actor: Actor,
    data: dict[str, Any],
    *,
    kid: str | None = None,
    at: dt.datetime | None = None,
) -> tuple[Appended, Row]:
    """Build, hash and sign the event after ``head`` and advance ``head`` in memory; nothing is written.

    The hash links to the previous event and the signature covers that hash (docs/design.md §The journal), so
    this runs under the head lock. ``kid`` overrides the signing key (first event, recovery rotation).
    Raises ``LookupError`` without a current signing key, ``ValueError`` for non-canonical data.
    """
    kid = kid or head.signing_kid
    if kid is None:
        raise LookupError("tenant has no current signing key")
    seq = head.seq + 1
    annotate(**{"oml.tenant": head.tenant, "oml.event_type": type, "oml.seq": seq})
    at = at or now()
    event = event_object(
        tenant=head.tenant, seq=seq, type=type, event_id=new_id(), at=at, actor=actor, kid=kid, data=data
    )
    body = encode(event)
    h = chain.link(head.hash, body)
    sig = signer.sign_event(head.tenant, kid, h)
    row = Row(seq, event["event_id"], type, kid, at, body, h, head.hash, sig)
    head.linked.append(row)
    head.seq, head.hash = seq, h
    if type == "tenant.created":
        head.signing_kid = kid
    elif type == "signing_key.rotated":
        head.signing_kid = signing.kid(bytes.fromhex(data["new_key"]))
    return Appended(seq, h, at, event), row


@traced("journal.write")
def write(head: Head, rows: list[Row]) -> None:
    """Insert linked ``rows`` (consecutive, from :func:`link`), move the stored head to the last, queue
    one outbox message each, in one statement; one NOTIFY per transaction -- PostgreSQL delivers one
    per distinct payload at commit however often it is sent."""
    if not rows:
        return
    sets.execute(head.conn, _APPEND, {
        "t": head.tenant, **sets.columns(_COLUMNS, rows, _TYPES),
        "last_seq": rows[-1].seq, "last_hash": rows[-1].hash, "notify": not head.notified})
    head.notified = True


@traced("journal.append")
def append(head: Head, signer: Signer, type: str, actor: Actor, data: dict[str, Any], **options: Any) -> Appended:
    """Append one event after ``head`` and advance it (:func:`link` then :func:`write`).

    ``options`` are :func:`link`'s: ``kid`` overrides the signing key (first event, recovery rotation), ``at`` the time.
    Raises ``ValueError`` for an unknown type or non-canonical data.
    """
    ev, row = link(head, signer, type, actor, data, **options)
    write(head, [row])
    return ev
