"""Appending to a tenant's chain inside an admission transaction (DESIGN.md, Journal).

``append`` must run in a transaction bound to the tenant. It locks the
tenant's chain head (``SELECT … FOR UPDATE``) so ``seq`` order is commit
order, builds the v1 event, hashes and signs it, inserts the row and moves
the head. ``UNIQUE (tenant_id, prev_hash)`` makes a fork impossible to commit
even if the lock were bypassed.
"""
from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from oml.domain import chain, signing
from oml.domain.canonical import new_id, now
from oml.domain.events import Actor, encode, event_object

from .signer import Signer


# Data-modifying CTEs run exactly once whether or not the outer query reads them (PostgreSQL docs,
# "Data-Modifying Statements in WITH"); the outer SELECT only sends the NOTIFY when asked to.
_APPEND = sa.text(
    "WITH j AS (INSERT INTO journal_events (tenant_id, seq, event_id, type, kid, at, canonical, hash, prev_hash, signature)"
    "           VALUES (:t, :seq, :eid, :type, :kid, :at, :c, :h, :p, :s)),"
    "     head AS (UPDATE chain_heads SET seq = :seq, hash = :h WHERE tenant_id = :t),"
    "     o AS (INSERT INTO outbox (tenant_id, seq, topic, payload) VALUES (:t, :seq, :type, CAST(:payload AS jsonb)))"
    " SELECT pg_notify('oml_outbox', :t) WHERE CAST(:notify AS boolean)"
)


@dataclass(frozen=True)
class Appended:
    seq: int
    hash: bytes
    at: dt.datetime
    event: dict[str, Any]


class Head:
    """The locked chain head of one tenant for the current transaction.

    ``memo`` caches lookups for the rest of the transaction (the encryption key, workareas): while the
    head is locked no other transaction can append, and every change to those rows is an appended act.
    """

    def __init__(self, conn: sa.Connection, tenant: str) -> None:
        row = conn.execute(
            sa.text("SELECT seq, hash FROM chain_heads WHERE tenant_id = :t FOR UPDATE"), {"t": tenant}
        ).one_or_none()
        if row is None:
            raise LookupError("tenant has no chain head")
        self.conn, self.tenant, self.seq, self.hash = conn, tenant, row.seq, bytes(row.hash)
        self.memo: dict[Any, Any] = {}
        self.notified = False
        self.signing_kid = conn.execute(
            sa.text(
                "SELECT kid FROM tenant_keys WHERE tenant_id = :t AND purpose = 'signing' AND retired_seq IS NULL"
            ),
            {"t": tenant},
        ).scalar()


def create_head(conn: sa.Connection, tenant: str) -> Head:
    conn.execute(
        sa.text("INSERT INTO chain_heads (tenant_id, seq, hash) VALUES (:t, 0, :h)"),
        {"t": tenant, "h": chain.genesis(tenant)},
    )
    return Head(conn, tenant)


def append(
    head: Head,
    signer: Signer,
    type: str,
    actor: Actor,
    data: dict[str, Any],
    *,
    kid: str | None = None,
    at: dt.datetime | None = None,
) -> Appended:
    """Append one event after ``head`` and advance it.

    ``kid`` overrides the signing key (first event, recovery rotation).
    Raises ``ValueError`` for an unknown type or non-canonical data.
    """
    kid = kid or head.signing_kid
    if kid is None:
        raise LookupError("tenant has no current signing key")
    seq = head.seq + 1
    at = at or now()
    event = event_object(
        tenant=head.tenant, seq=seq, type=type, event_id=new_id(), at=at, actor=actor, kid=kid, data=data
    )
    body = encode(event)
    h = chain.link(head.hash, body)
    sig = signer.sign_event(head.tenant, kid, h)
    # One round trip: the row, the head and the outbox message (ids and seqs only), then one NOTIFY per
    # transaction -- PostgreSQL delivers one per distinct payload at commit however often it is sent.
    head.conn.execute(_APPEND, {
        "t": head.tenant, "seq": seq, "eid": event["event_id"], "type": type, "kid": kid, "at": at,
        "c": body, "h": h, "p": head.hash, "s": sig, "payload": json.dumps({"seq": seq, "type": type}),
        "notify": not head.notified})
    head.seq, head.hash, head.notified = seq, h, True
    if type == "tenant.created":
        head.signing_kid = kid
    elif type == "signing_key.rotated":
        head.signing_kid = signing.kid(bytes.fromhex(data["new_key"]))
    return Appended(seq, h, at, event)

