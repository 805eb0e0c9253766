"""The act runner: the one way a write reaches a tenant's journal (docs/design.md §The journal).

An act is one transaction bound to the tenant under ``oml_admission``: lock the chain head, check the
idempotency record, run the act's function against the head, append its signed events through the one
append point (which checks :mod:`oml.domain.authority` and applies the projector), remember the response.
Tenancy, claims, keys, erasure, simulations, restore and the workers' reports all act through
:class:`ActRunner`; none of them opens an admission transaction of its own.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from oml.domain import authority
from oml.domain.access import Principal
from oml.domain.canonical import canonical
from oml.domain.errors import OMLError, invalid
from oml.domain.events import SYSTEM, Actor
from oml.services.journal import batch as batching
from oml.services.journal import journal, projector, state_snapshots
from oml.services.journal import verified_state as verified_states
from oml.services.keys.signer import Signer
from oml.services.storage import pipelined
from oml.services.storage.db import Database

ROLE = "oml_admission"


@dataclass(frozen=True)
class Acting(Actor):
    """An actor with the role it authenticated with (the event records only principal and identity)."""

    role: str | None = None


def memo(head: journal.Head, key: Any, load: Callable[[], Any]) -> Any:
    """``load()`` once per transaction (a batch's claims share their workareas and the encryption key)."""
    if key not in head.memo:
        batching.settle(head)  # a read: nothing of a group commit may be in flight
        head.memo[key] = load()
    return head.memo[key]


def idempotency_key_digest(key: str) -> str:
    """Hex SHA-256 of a client's ``Idempotency-Key``: what the record keeps (docs/journal-format.md: digests,
    never the request). A key is the client's own token and may carry anything; stored as a digest it is
    looked up, never read."""
    return hashlib.sha256(key.encode()).hexdigest()


def request_digest(payload: Any) -> bytes:
    """SHA-256 of the canonical request (RFC 8785); what an idempotency record keeps instead of the body.

    ``payload`` is a JSON value, or an object with a ``canonical() -> bytes`` method that returns those bytes
    without encoding again what the caller has encoded already (a submit's bodies)."""
    encode = getattr(payload, "canonical", None)
    return hashlib.sha256(encode() if callable(encode) else canonical(payload)).digest()


#: HKDF info of the key that authenticates stored responses, derived from the tenant's ``query-hmac`` KeyStore key.
RESPONSE_KEY_INFO = b"oml.idempotency.v1"


def response_mac(key: bytes, tenant: str, principal: str, key_digest: str, digest: bytes, response: dict) -> bytes:
    """HMAC-SHA-256 binding a stored response to its tenant, principal, ``Idempotency-Key`` digest and request digest
    (each length-prefixed; the response as RFC 8785 canonical JSON), under ``key`` (docs/security-model.md,
    "Idempotency records")."""
    mac = hmac.new(key, RESPONSE_KEY_INFO + b"\x00", hashlib.sha256)
    for part in (tenant.encode(), principal.encode(), key_digest.encode(), digest, canonical(response)):
        mac.update(len(part).to_bytes(8, "big") + part)
    return mac.digest()


class ActRunner:
    """Transactions, idempotency, actors and the append point of every act.

    ``signer`` signs every event (docs/key-management.md); ``idempotency_hours``: how long a response is
    replayed for a repeated ``Idempotency-Key``; ``snapshots``: when verified-state snapshots are written
    (:class:`state_snapshots.Policy`; its defaults when None).
    """

    def __init__(self, db: Database, signer: Signer, *, idempotency_hours: int = 24,
                 snapshots: state_snapshots.Policy | None = None) -> None:
        self.db = db
        self.signer = signer
        self.idempotency_hours = idempotency_hours
        self.verified = verified_states.of(db)
        # Verified-state snapshots MACed under the KeyStore this runner signs with (services/journal/state_snapshots.py);
        # a runner made without a policy keeps the one the process's settings gave.
        if snapshots is not None or self.verified.snapshots is None:
            self.verified.use_snapshots(signer.keystore, snapshots)
        self._response_keys: dict[str, bytes] = {}
        self._response_keys_lock = threading.Lock()

    def _response_key(self, tenant: str) -> bytes:
        """The tenant's response-MAC key (HKDF-SHA256 of its ``query-hmac`` KeyStore key), kept per process."""
        with self._response_keys_lock:
            key = self._response_keys.get(tenant)
            if key is None:
                from oml.services.keys.keystore import query_hmac_subkey

                key = self._response_keys[tenant] = query_hmac_subkey(self.signer.keystore, tenant, RESPONSE_KEY_INFO)
            return key

    def tx(self, tenant: str):
        """A transaction bound to ``tenant`` under ``oml_admission`` (no head lock: :class:`journal.Head` takes it)."""
        return self.db.tenant(ROLE, tenant)

    def append(self, head: journal.Head, type: str, actor: Actor, data: dict[str, Any], **kw) -> journal.Appended:
        """The one append point: the act must be one :mod:`oml.domain.authority` permits to the actor's role.
        Raises ``access.denied`` (403) otherwise."""
        authority.require(type, self.role_of(head, actor))
        if head.batch is not None:  # a group commit: linked now, written as sets (services/journal/batch.py)
            return head.batch.append(self.signer, type, actor, data, **kw)
        ev = journal.append(head, self.signer, type, actor, data, **kw)
        projector.apply(head.conn, head.tenant, ev.seq, ev.at, ev.event["actor"], type, data)
        return ev

    @staticmethod
    def idempotency_lookup(p: Principal, key: str | None) -> pipelined.Query | None:
        """The live idempotency record's query for (tenant, principal, key); ``None`` without a key.
        Raises ``admission.invalid`` for a malformed key."""
        if key is None:
            return None
        if not (1 <= len(key) <= 200) or not key.isprintable():
            raise invalid("Idempotency-Key must be 1-200 printable characters", field="Idempotency-Key")
        return pipelined.Query(
            "SELECT request_digest, response, response_mac FROM idempotency_keys WHERE tenant_id = %(t)s AND principal_id = %(p)s AND key = %(k)s"
            " AND expires_at > now()", {"t": p.tenant, "p": p.principal_id, "k": idempotency_key_digest(key)}, prepare=True)

    def first_response(self, p: Principal, key: str | None, digest: bytes | None, conn: sa.Connection,
                       rows: list | None = None) -> dict | None:
        """The first response for (tenant, principal, key), or ``None``; ``idempotency.conflict`` (409) if the
        request differs. ``rows``: :meth:`idempotency_lookup`'s result when already run in this transaction.

        A stored response is replayed only when its MAC (:func:`response_mac`, under a key the KeyStore holds and no
        database role does) verifies for this tenant, principal, key and request: a record a workload wrote, or
        copied from another key, is refused with ``integrity.unverified_state`` (500), recorded, and never replayed."""
        query = self.idempotency_lookup(p, key)
        if query is None:
            return None
        if rows is None:
            (rows,) = pipelined.fetch(conn, [query])
        if not rows:
            return None
        row = rows[0]
        if bytes(row.request_digest) != digest:
            raise OMLError("idempotency.conflict", "this Idempotency-Key was used with a different request", 409)
        response = dict(row.response)
        expected = response_mac(self._response_key(p.tenant), p.tenant, p.principal_id, idempotency_key_digest(key),
                                digest or b"", response)
        if row.response_mac is None or not hmac.compare_digest(bytes(row.response_mac), expected):
            raise self.verified.refusal(p.tenant, 0, "state.idempotency",
                                        "the stored response for this Idempotency-Key is not one this server wrote;"
                                        " retry with a new key")
        return response | {"replayed": True}

    def remember(self, p: Principal, key: str | None, digest: bytes | None, response: dict, conn: sa.Connection) -> None:
        """Keep ``response`` for (tenant, principal, key) for :attr:`idempotency_hours`; nothing without a key."""
        if key is None:
            return
        k = idempotency_key_digest(key)
        conn.execute(
            sa.text("DELETE FROM idempotency_keys WHERE tenant_id = :t AND principal_id = :p AND key = :k AND expires_at <= now()"),
            {"t": p.tenant, "p": p.principal_id, "k": k},
        )
        conn.execute(
            sa.text("INSERT INTO idempotency_keys (tenant_id, principal_id, key, request_digest, response, response_mac, status,"
                    " expires_at) VALUES (:t, :p, :k, :d, CAST(:r AS jsonb), :m, 200, now() + make_interval(hours => :h))"),
            {"t": p.tenant, "p": p.principal_id, "k": k, "d": digest, "r": json.dumps(response),
             # over the response as it will be read back (JSON), so the replay's check sees the same value
             "m": response_mac(self._response_key(p.tenant), p.tenant, p.principal_id, k, digest or b"",
                               json.loads(json.dumps(response))),
             "h": self.idempotency_hours},
        )

    def run(self, p: Principal, idem_key: str | None, request: Any, fn: Callable[[journal.Head], dict],
            lookups: dict[Any, pipelined.Query] | None = None) -> dict:
        """One act in one transaction: bind the tenant, lock the head, check the idempotency record, run
        ``fn(head)``, remember its response. These opening statements and ``lookups`` (memo key → query:
        rows the act will read, left in ``head.fetched``) go to PostgreSQL in one round trip, in this order,
        so every lookup reads what is committed once the head is locked, as a later read would."""
        idem = self.idempotency_lookup(p, idem_key)
        # Only an idempotency record keeps the digest: without a key nothing reads it, and a submit's would
        # encode every item's fields again.
        digest = request_digest(request) if idem is not None else None
        lookups = lookups or {}
        opening = journal.head_queries(p.tenant) + ([idem] if idem is not None else []) + list(lookups.values())
        with self.db.bound(ROLE, p.tenant, opening) as (conn, rows):
            head = journal.Head(conn, p.tenant, rows[:2])
            first = self.first_response(p, idem_key, digest, conn, rows[2] if idem is not None else None)
            if first is not None:
                return first
            head.fetched = dict(zip(lookups, rows[2 + (idem is not None):]))
            # Every decision below reads authority from the verified chain, at this locked head.
            head.verified = self.verified.at_head(conn, p.tenant, head.seq, head.hash)
            response = fn(head)
            self.remember(p, idem_key, digest, response, conn)
        self.verified.advance(p.tenant, head.linked)
        return response

    def verified_head(self, head: journal.Head) -> verified_states.TenantState:
        """The verified state at ``head`` (an act outside :meth:`run` that takes the head itself: rotation).
        Raises ``integrity.unverified_state`` (500)."""
        if head.verified is None:
            head.verified = self.verified.at_head(head.conn, head.tenant, head.seq, head.hash)
        return head.verified

    @staticmethod
    def actor(p: Principal) -> Actor:
        """The actor an event records for principal ``p``, carrying the role it authenticated with."""
        return Acting(p.principal_id, p.identity_id, p.role)

    @staticmethod
    def role_of(head: journal.Head, actor: Actor) -> str | None:
        """The actor's role: ``None`` for the system actor, else the authenticated role an :class:`Acting` carries,
        else the active principal's role (``access.denied`` for an unknown or revoked principal)."""
        if actor.principal is None:
            return None
        if isinstance(actor, Acting):
            return actor.role
        role = memo(head, ("role", actor.principal), lambda: head.conn.execute(
            sa.text("SELECT role FROM principals WHERE tenant_id = :t AND principal_id = :p AND identity_id = CAST(:i AS uuid)"
                    " AND revoked_seq IS NULL"), {"t": head.tenant, "p": actor.principal, "i": actor.identity}).scalar())
        if role is None:
            raise OMLError("access.denied", "the actor is not an active principal of this tenant", 403)
        return role

    def system_event(self, tenant: str, type: str, data: dict[str, Any] | Callable[..., dict[str, Any] | None],
                     actor: Actor = SYSTEM, *, effect: Callable[[sa.Connection, journal.Appended], None] | None = None,
                     verified: bool = False) -> journal.Appended | None:
        """Journal a worker's report (``reconciliation.completed``, ``readlog.anchored``, …).

        ``data`` may be a callable ``(conn) -> dict | None`` run after the
        chain-head lock is taken, so what it reads cannot race another
        append; ``None`` appends nothing and returns ``None``. ``effect(conn,
        appended)`` runs in the same transaction after the append (e.g.
        marking the read-log rows a ``readlog.anchored`` seals): the event and
        its effect commit together or not at all. ``verified``: an act that
        decides from authority (read-log retention) -- the callable is called
        as ``(conn, state)`` with the tenant's verified state at the locked head
        (:class:`verified_states.TenantState`; raises ``integrity.unverified_state``,
        500, when the chain up to the head does not verify), and the appended
        row is linked onto that state after the commit.
        """
        with self.tx(tenant) as conn:
            head = journal.Head(conn, tenant)
            if callable(data):
                data = data(conn, self.verified_head(head)) if verified else data(conn)
                if data is None:
                    return None
            ev = self.append(head, type, actor, data)
            if effect is not None:
                effect(conn, ev)
        if verified:
            self.verified.advance(tenant, head.linked)
        return ev
