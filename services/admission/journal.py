"""Appending to a tenant's chain inside an admission transaction (DESIGN.md, Journal).

``append`` must run in a transaction bound to the tenant. It locks the
tenant's chain head (``SELECT … FOR UPDATE``) so ``seq`` order is commit
order, builds the v1 event, hashes and signs it, inserts the row and moves
the head. ``UNIQUE (tenant_id, prev_hash)`` makes a fork impossible to commit
even if the lock were bypassed.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from oml.domain import chain, signing
from oml.domain.canonical import new_id, now
from oml.domain.events import Actor, encode, event_object

from .signer import Signer


@dataclass(frozen=True)
class Appended:
    seq: int
    hash: bytes
    at: dt.datetime
    event: dict[str, Any]


class Head:
    """The locked chain head of one tenant for the current transaction."""

    def __init__(self, conn: sa.Connection, tenant: str) -> None:
        row = conn.execute(
            sa.text("SELECT seq, hash FROM chain_heads WHERE tenant_id = :t FOR UPDATE"), {"t": tenant}
        ).one_or_none()
        if row is None:
            raise LookupError("tenant has no chain head")
        self.conn, self.tenant, self.seq, self.hash = conn, tenant, row.seq, bytes(row.hash)
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
    head.conn.execute(
        sa.text(
            "INSERT INTO journal_events (tenant_id, seq, event_id, type, kid, at, canonical, hash, prev_hash, signature)"
            " VALUES (:t, :seq, :eid, :type, :kid, :at, :c, :h, :p, :s)"
        ),
        {"t": head.tenant, "seq": seq, "eid": event["event_id"], "type": type, "kid": kid, "at": at,
         "c": body, "h": h, "p": head.hash, "s": sig},
    )
    head.conn.execute(
        sa.text("UPDATE chain_heads SET seq = :seq, hash = :h WHERE tenant_id = :t"),
        {"seq": seq, "h": h, "t": head.tenant},
    )
    head.seq, head.hash = seq, h
    if type == "tenant.created":
        head.signing_kid = kid
    elif type == "signing_key.rotated":
        head.signing_kid = signing.kid(bytes.fromhex(data["new_key"]))
    # Every event wakes the downstream consumers; each catches up from its own cursor.
    outbox(head.conn, head.tenant, seq, type, {"seq": seq, "type": type})
    return Appended(seq, h, at, event)


def outbox(conn: sa.Connection, tenant: str, seq: int, topic: str, payload: dict[str, Any]) -> None:
    """Queue a message for the relay in the same transaction. ``payload`` holds ids and seqs only."""
    import json

    conn.execute(
        sa.text("INSERT INTO outbox (tenant_id, seq, topic, payload) VALUES (:t, :s, :topic, CAST(:p AS jsonb))"),
        {"t": tenant, "s": seq, "topic": topic, "p": json.dumps(payload)},
    )
    conn.execute(sa.text("SELECT pg_notify('oml_outbox', :t)"), {"t": tenant})
