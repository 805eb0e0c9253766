"""Admission acts: every write to OML passes here (DESIGN.md, Journal/Claims/Workareas).

Each public method is one act (or one batch of acts) committed in a single
transaction bound to the tenant: lock the chain head, validate against the
projections, append the signed event(s), apply the projector, write outbox
rows and the idempotency record. Admission holds public keys and the
signer; it encrypts bodies but can never decrypt one.
"""
from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import sqlalchemy as sa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from oml.domain import authority, envelope, signing
from oml.domain import claims as rules
from oml.domain import simulation as simrules
from oml.domain.access import Principal, new_api_key
from oml.domain.canonical import MAX_DEPTH, CanonicalError, canonical, format_time, new_id
from oml.domain.errors import OMLError, invalid, not_found
from oml.domain.events import REASON_CODES, SYSTEM, Actor
from oml.services.keystore import KeyStore
from oml.services.storage import pipelined
from oml.services.storage.db import Database
from oml.services.tracing import traced

from . import batch as batching
from . import journal, projector
from .signer import Signer

ROLE = "oml_admission"


@dataclass(frozen=True)
class Acting(Actor):
    """An actor with the role it authenticated with (the event records only principal and identity)."""

    role: str | None = None


@dataclass(frozen=True)
class TenantCreated:
    tenant: str
    fingerprint: str          # trust anchor: SHA-256 of the signing public key
    verifier_key: str         # C2SP note verifier key for checkpoints
    recovery_private_key: str  # hex; shown once, never stored
    admin_key: str            # oml_<id>_<secret>; shown once
    admin_principal: str
    admin_identity: str
    root_workarea: str


@dataclass
class Submission:
    """One claim version to admit. ``body`` is the plaintext JSON object (encrypted here)."""

    workarea_id: str
    body: dict[str, Any]
    kind: str = "fact"
    provenance: str = "observed"
    claim_id: str | None = None      # set to add a version to an existing claim
    supersedes: str | None = None
    derived_from: list[str] = field(default_factory=list)
    valid_from: str | None = None
    valid_to: str | None = None
    confidence: int | None = None
    simulation_id: str | None = None


def _memo(head: journal.Head, key: Any, load: Callable[[], Any]) -> Any:
    """``load()`` once per transaction (a batch's claims share their workareas and the encryption key)."""
    if key not in head.memo:
        batching.settle(head)  # a read: nothing of a group commit may be in flight
        head.memo[key] = load()
    return head.memo[key]


def idempotency_key_digest(key: str) -> str:
    """Hex SHA-256 of a client's ``Idempotency-Key``: what the record keeps (DESIGN.md, Journal: digests, never the
    request). A key is the client's own token and may carry anything; stored as a digest it is looked up, never read."""
    return hashlib.sha256(key.encode()).hexdigest()


def request_digest(payload: Any) -> bytes:
    """SHA-256 of the canonical request; what an idempotency record keeps instead of the body."""
    if isinstance(payload, _SubmitRequest):
        return hashlib.sha256(payload.canonical()).digest()
    return hashlib.sha256(canonical(payload)).digest()


@dataclass(frozen=True)
class _SubmitRequest:
    """A submit's request, ``{"act": "claim.submit", "items": [_submission_request(s) …]}``, with each body's
    canonical bytes already computed (``plaintexts``): :meth:`canonical` splices them in instead of
    encoding every body a second time (issue 14). The bytes are those of ``canonical(self.value())``
    (test: tests/integration/test_admission_batch.py)."""

    items: Sequence["Submission"]
    plaintexts: Sequence[bytes]

    def value(self) -> dict:
        return {"act": "claim.submit", "items": [_submission_request(s) for s in self.items]}

    def canonical(self) -> bytes:
        # RFC 8785 sorts members by key: "act" < "items", and "b" (the body) sorts first in an item
        # ("c", "conf", "d", "k", "p", "s", "sim", "vf", "vt", "w" follow), so an item is '{"b":' + body + the
        # rest of the item's object without its opening brace.
        parts = []
        for s, body in zip(self.items, self.plaintexts):
            rest = _submission_request(s)
            del rest["b"]
            parts.append(b'{"b":' + body + b"," + canonical(rest)[1:])
        return b'{"act":"claim.submit","items":[' + b",".join(parts) + b"]}"


class Admission:
    def __init__(self, db: Database, keystore: KeyStore, signer: Signer | None = None, *,
                 idempotency_hours: int = 24, classify: Callable[[dict], Sequence[Any]] | None = None) -> None:
        self.db = db
        self.keystore = keystore
        self.signer = signer or Signer(keystore)
        self.idempotency_hours = idempotency_hours
        self._classify = classify

    # ------------------------------------------------------------------ plumbing
    def _tx(self, tenant: str):
        return self.db.tenant(ROLE, tenant)

    def _append(self, head: journal.Head, type: str, actor: Actor, data: dict[str, Any], **kw) -> journal.Appended:
        """The one append point: the act must be one :mod:`oml.domain.authority` permits to the actor's role."""
        authority.require(type, self._role_of(head, actor))
        if head.batch is not None:  # a group commit: linked now, written as sets (services/admission/batch.py)
            return head.batch.append(self.signer, type, actor, data, **kw)
        ev = journal.append(head, self.signer, type, actor, data, **kw)
        projector.apply(head.conn, head.tenant, ev.seq, ev.at, ev.event["actor"], type, data)
        return ev

    @staticmethod
    def _idempotency_lookup(p: Principal, key: str | None) -> pipelined.Query | None:
        """The live idempotency record's query for (tenant, principal, key); ``None`` without a key.
        Raises ``admission.invalid`` for a malformed key."""
        if key is None:
            return None
        if not (1 <= len(key) <= 200) or not key.isprintable():
            raise invalid("Idempotency-Key must be 1-200 printable characters", field="Idempotency-Key")
        return pipelined.Query(
            "SELECT request_digest, response FROM idempotency_keys WHERE tenant_id = %(t)s AND principal_id = %(p)s AND key = %(k)s"
            " AND expires_at > now()", {"t": p.tenant, "p": p.principal_id, "k": idempotency_key_digest(key)}, prepare=True)

    def _idempotent(self, p: Principal, key: str | None, digest: bytes | None, conn: sa.Connection,
                    rows: list | None = None) -> dict | None:
        """Return the first response for (tenant, principal, key) or None; conflict if the body differs.
        ``rows``: the result of :meth:`_idempotency_lookup`'s query when already run in this transaction."""
        query = self._idempotency_lookup(p, key)
        if query is None:
            return None
        if rows is None:
            (rows,) = pipelined.fetch(conn, [query])
        if not rows:
            return None
        row = rows[0]
        if bytes(row.request_digest) != digest:
            raise OMLError("idempotency.conflict", "this Idempotency-Key was used with a different request", 409)
        return dict(row.response) | {"replayed": True}

    def _remember(self, p: Principal, key: str | None, digest: bytes | None, response: dict, conn: sa.Connection) -> None:
        if key is None:
            return
        k = idempotency_key_digest(key)
        conn.execute(
            sa.text("DELETE FROM idempotency_keys WHERE tenant_id = :t AND principal_id = :p AND key = :k AND expires_at <= now()"),
            {"t": p.tenant, "p": p.principal_id, "k": k},
        )
        conn.execute(
            sa.text("INSERT INTO idempotency_keys (tenant_id, principal_id, key, request_digest, response, status, expires_at)"
                    " VALUES (:t, :p, :k, :d, CAST(:r AS jsonb), 200, now() + make_interval(hours => :h))"),
            {"t": p.tenant, "p": p.principal_id, "k": k, "d": digest, "r": json.dumps(response), "h": self.idempotency_hours},
        )

    def _run(self, p: Principal, idem_key: str | None, request: Any, fn: Callable[[journal.Head], dict],
             lookups: dict[Any, pipelined.Query] | None = None) -> dict:
        """One act in one transaction: bind the tenant, lock the head, check the idempotency record, run
        ``fn(head)``, remember its response. These opening statements and ``lookups`` (memo key → query:
        rows the act will read, left in ``head.fetched``) go to PostgreSQL in one round trip, in this order,
        so every lookup reads what is committed once the head is locked, as a later read would."""
        idem = self._idempotency_lookup(p, idem_key)
        # Only an idempotency record keeps the digest: without a key nothing reads it (a submit's would encode
        # every item's fields again; issue 14).
        digest = request_digest(request) if idem is not None else None
        lookups = lookups or {}
        opening = journal.head_queries(p.tenant) + ([idem] if idem is not None else []) + list(lookups.values())
        with self.db.bound(ROLE, p.tenant, opening) as (conn, rows):
            head = journal.Head(conn, p.tenant, rows[:2])
            first = self._idempotent(p, idem_key, digest, conn, rows[2] if idem is not None else None)
            if first is not None:
                return first
            head.fetched = dict(zip(lookups, rows[2 + (idem is not None):]))
            response = fn(head)
            self._remember(p, idem_key, digest, response, conn)
            return response

    @staticmethod
    def _actor(p: Principal) -> Actor:
        return Acting(p.principal_id, p.identity_id, p.role)

    @staticmethod
    def _role_of(head: journal.Head, actor: Actor) -> str | None:
        """The actor's role: ``None`` for the system actor, else the authenticated role an :class:`Acting` carries,
        else the active principal's role (``access.denied`` for an unknown or revoked principal)."""
        if actor.principal is None:
            return None
        if isinstance(actor, Acting):
            return actor.role
        role = _memo(head, ("role", actor.principal), lambda: head.conn.execute(
            sa.text("SELECT role FROM principals WHERE tenant_id = :t AND principal_id = :p AND identity_id = CAST(:i AS uuid)"
                    " AND revoked_seq IS NULL"), {"t": head.tenant, "p": actor.principal, "i": actor.identity}).scalar())
        if role is None:
            raise OMLError("access.denied", "the actor is not an active principal of this tenant", 403)
        return role

    @staticmethod
    def _workarea_lookup(tenant: str, node_id: str) -> pipelined.Query:
        return pipelined.Query("SELECT node_id, parent_id, path, development, pii_policy FROM workareas"
                               " WHERE tenant_id = %(t)s AND node_id = CAST(%(n)s AS uuid)", {"t": tenant, "n": node_id}, prepare=True)

    def _workarea(self, conn: sa.Connection, tenant: str, node_id: str, rows: list | None = None):
        """The workarea row; ``rows``: :meth:`_workarea_lookup`'s result when already fetched. Raises ``workarea.not_found``,
        also for an id not in the hyphenated form (PostgreSQL would read braces or no hyphens, and the act would
        journal the id as given, which the journal's verifier refuses)."""
        if rows is None:
            (rows,) = pipelined.fetch(conn, [self._workarea_lookup(tenant, node_id)]) if _is_uuid(node_id) else ([],)
        if not rows:
            raise not_found("workarea", "workarea.not_found")
        return rows[0]

    def _scoped_workarea(self, conn, p: Principal, node_id: str, rows: list | None = None):
        wa = self._workarea(conn, p.tenant, node_id, rows)
        if not p.can_access(wa.path):
            # Same answer as a missing workarea: a foreign subtree's existence is not disclosed.
            raise not_found("workarea", "workarea.not_found")
        return wa

    # ------------------------------------------------------------------ tenants
    def create_tenant(self, tenant: str, root_label: str = "main") -> TenantCreated:
        """Create a tenant, its keys, its first workarea and a bootstrap admin key.

        The signing and body-encryption private keys and the HMAC keys go to
        the KeyStore; the recovery private key is returned once and never
        stored. Raises ``tenant.exists`` (409) or ``admission.invalid`` (422).
        """
        if not rules.TENANT_SLUG.match(tenant or ""):
            raise invalid("tenant must match [a-z0-9][a-z0-9-]{0,62}", field="tenant")
        if not rules.LABEL.match(root_label):
            raise invalid("workarea label must match [a-z0-9][a-z0-9-]{0,62}", field="label")
        sk = Ed25519PrivateKey.generate()
        rk = Ed25519PrivateKey.generate()
        ek = X25519PrivateKey.generate()
        sk_pub, rk_pub, ek_pub = signing.raw_public(sk), signing.raw_public(rk), envelope.x25519_public_raw(ek)
        kid = signing.kid(sk_pub)
        with self.db.tenant(ROLE, tenant) as conn:
            exists = conn.execute(sa.text("SELECT 1 FROM tenants WHERE tenant_id = :t"), {"t": tenant}).scalar()
            if exists:
                raise OMLError("tenant.exists", "a tenant with this id exists", 409)
            # Keys go to the KeyStore before the commit; an orphaned key of a tenant
            # that never committed is harmless, a committed tenant without keys is not.
            self.keystore.put(tenant, f"signing/{kid}", signing.raw_private(sk))
            self.keystore.put(tenant, "encryption/1", ek.private_bytes_raw())
            import secrets

            for name in ("subject-hmac", "query-hmac"):
                if not self.keystore.exists(tenant, name):
                    self.keystore.put(tenant, name, secrets.token_bytes(32))
            conn.execute(sa.text("INSERT INTO tenants (tenant_id) VALUES (:t)"), {"t": tenant})
            head = journal.create_head(conn, tenant)
            self._append(head, "tenant.created", SYSTEM,
                         {"signing_key": sk_pub.hex(), "encryption_key": ek_pub.hex(), "recovery_key": rk_pub.hex()}, kid=kid)
            conn.execute(sa.text("SELECT oml_create_tenant_partitions()"))
            root = new_id()
            self._append(head, "workarea.created", SYSTEM,
                         {"node_id": root, "parent_id": None, "label": root_label, "development": False, "pii_policy": "deny"})
            ident = new_id()
            self._append(head, "identity.created", SYSTEM, {"identity_id": ident, "kind": "person"})
            conn.execute(sa.text("UPDATE identities SET display_name = 'bootstrap admin' WHERE tenant_id = :t AND identity_id = :i"),
                         {"t": tenant, "i": ident})
            key_id, key, secret_hash = new_api_key()
            self._append(head, "principal.created", SYSTEM,
                         {"principal_id": key_id, "identity_id": ident, "role": "admin", "roots": [root], "secret_sha256": secret_hash.hex()})
            conn.execute(sa.text("INSERT INTO principal_directory (principal_id, tenant_id) VALUES (:p, :t)"), {"p": key_id, "t": tenant})
        from oml.domain.checkpoint import verifier_key

        return TenantCreated(tenant, signing.fingerprint(sk_pub), verifier_key(f"oml/{tenant}", sk_pub),
                             signing.raw_private(rk).hex(), key, key_id, ident, root)

    # ------------------------------------------------------------------ admin acts
    def create_identity(self, p: Principal, kind: str, display_name: str | None = None, *, idempotency_key: str | None = None) -> dict:
        rules.require_act(p.role, "admin")
        if kind not in ("person", "service"):
            raise invalid("kind must be person or service", field="kind")
        if display_name is not None and (len(display_name) > 200 or "\x00" in display_name):
            raise invalid("display_name must be at most 200 characters without NUL", field="display_name")

        def act(head):
            ident = new_id()
            ev = self._append(head, "identity.created", self._actor(p), {"identity_id": ident, "kind": kind})
            head.conn.execute(sa.text("UPDATE identities SET display_name = :d WHERE tenant_id = :t AND identity_id = :i"),
                              {"d": display_name, "t": p.tenant, "i": ident})
            return {"identity_id": ident, "seq": ev.seq}

        return self._run(p, idempotency_key, {"act": "identity.create", "kind": kind, "name": display_name}, act)

    def create_principal(self, p: Principal, identity_id: str, role: str, roots: Sequence[str], *, idempotency_key: str | None = None) -> dict:
        """Create an API key; the response carries the key once (and is not kept by idempotency)."""
        rules.require_act(p.role, "admin")
        if role not in rules.ROLES:
            raise invalid(f"role must be one of {', '.join(rules.ROLES)}", field="role")
        if not roots:
            raise invalid("at least one workarea root is required", field="roots")

        key_holder: dict[str, str] = {}

        def act(head):
            conn = head.conn
            try:
                ok = conn.execute(sa.text("SELECT 1 FROM identities WHERE tenant_id = :t AND identity_id = CAST(:i AS uuid)"),
                                  {"t": p.tenant, "i": identity_id}).scalar()
            except sa.exc.DataError:
                ok = None
            if not ok:
                raise not_found("identity", "identity.not_found")
            for r in roots:
                self._workarea(conn, p.tenant, r)
            key_id, key, secret_hash = new_api_key()
            ev = self._append(head, "principal.created", self._actor(p),
                              {"principal_id": key_id, "identity_id": identity_id, "role": role,
                               "roots": list(roots), "secret_sha256": secret_hash.hex()})
            conn.execute(sa.text("INSERT INTO principal_directory (principal_id, tenant_id) VALUES (:p, :t)"), {"p": key_id, "t": p.tenant})
            key_holder["key"] = key
            return {"principal_id": key_id, "seq": ev.seq}

        resp = self._run(p, idempotency_key, {"act": "principal.create", "identity": identity_id, "role": role, "roots": list(roots)}, act)
        # The secret is shown once: a replay returns the ids but not the key.
        return resp | ({"api_key": key_holder["key"]} if "key" in key_holder else {})

    def revoke_principal(self, p: Principal, principal_id: str, *, idempotency_key: str | None = None) -> dict:
        rules.require_act(p.role, "admin")

        def act(head):
            row = head.conn.execute(sa.text("SELECT revoked_seq FROM principals WHERE tenant_id = :t AND principal_id = :p"),
                                    {"t": p.tenant, "p": principal_id}).one_or_none()
            if row is None:
                raise not_found("principal", "principal.not_found")
            if row.revoked_seq is not None:
                return {"principal_id": principal_id, "seq": row.revoked_seq}
            ev = self._append(head, "principal.revoked", self._actor(p), {"principal_id": principal_id})
            return {"principal_id": principal_id, "seq": ev.seq}

        return self._run(p, idempotency_key, {"act": "principal.revoke", "principal": principal_id}, act)

    def create_workarea(self, p: Principal, label: str, parent_id: str | None, *, development: bool = False,
                        pii_policy: str = "deny", idempotency_key: str | None = None) -> dict:
        rules.require_act(p.role, "admin")
        if not rules.LABEL.match(label or ""):
            raise invalid("label must match [a-z0-9][a-z0-9-]{0,62}", field="label")
        if pii_policy not in rules.PII_POLICIES:
            raise invalid("pii_policy must be deny, declare or allow", field="pii_policy")

        def act(head):
            conn = head.conn
            if parent_id is not None:
                parent = self._workarea(conn, p.tenant, parent_id)
                path = f"{parent.path}.{label}"
            else:
                path = label
            if conn.execute(sa.text("SELECT 1 FROM workareas WHERE tenant_id = :t AND path = :p"), {"t": p.tenant, "p": path}).scalar():
                raise OMLError("workarea.exists", "a workarea with this path exists", 409)
            node = new_id()
            ev = self._append(head, "workarea.created", self._actor(p),
                              {"node_id": node, "parent_id": parent_id, "label": label, "development": development, "pii_policy": pii_policy})
            return {"node_id": node, "path": path, "seq": ev.seq}

        return self._run(p, idempotency_key, {"act": "workarea.create", "label": label, "parent": parent_id,
                                              "dev": development, "pol": pii_policy}, act)

    def reparent_workarea(self, p: Principal, node_id: str, new_parent_id: str | None, *, idempotency_key: str | None = None) -> dict:
        """Move a subtree; every derived path (projections and index rows) is rewritten in the same transaction."""
        rules.require_act(p.role, "admin")

        def act(head):
            conn = head.conn
            wa = self._workarea(conn, p.tenant, node_id)
            if new_parent_id is not None:
                parent = self._workarea(conn, p.tenant, new_parent_id)
                if rules.is_within(parent.path, wa.path):
                    raise invalid("a workarea cannot move below itself", field="new_parent_id")
                new_path = f"{parent.path}.{wa.path.rsplit('.', 1)[-1]}"
            else:
                new_path = wa.path.rsplit(".", 1)[-1]
            if conn.execute(sa.text("SELECT 1 FROM workareas WHERE tenant_id = :t AND path = :p"), {"t": p.tenant, "p": new_path}).scalar():
                raise OMLError("workarea.exists", "a workarea with the target path exists", 409)
            ev = self._append(head, "workarea.reparented", self._actor(p), {"node_id": node_id, "new_parent_id": new_parent_id})
            for table in ("memories_fts", "memory_embeddings", "sim_memories_fts", "sim_memory_embeddings"):
                conn.execute(sa.text(f"UPDATE {table} SET path = :new || substr(path, length(:old) + 1)"
                                     " WHERE tenant_id = :t AND (path = :old OR starts_with(path, :old || '.'))"),
                             {"t": p.tenant, "new": new_path, "old": wa.path})
            return {"node_id": node_id, "path": new_path, "seq": ev.seq}

        return self._run(p, idempotency_key, {"act": "workarea.reparent", "node": node_id, "parent": new_parent_id}, act)

    def set_workarea_policy(self, p: Principal, node_id: str, *, development: bool | None = None, pii_policy: str | None = None,
                            idempotency_key: str | None = None) -> dict:
        rules.require_act(p.role, "admin")
        if pii_policy is not None and pii_policy not in rules.PII_POLICIES:
            raise invalid("pii_policy must be deny, declare or allow", field="pii_policy")

        def act(head):
            wa = self._workarea(head.conn, p.tenant, node_id)
            dev = wa.development if development is None else development
            pol = wa.pii_policy if pii_policy is None else pii_policy
            ev = self._append(head, "workarea.policy_set", self._actor(p), {"node_id": node_id, "development": dev, "pii_policy": pol})
            return {"node_id": node_id, "development": dev, "pii_policy": pol, "seq": ev.seq}

        return self._run(p, idempotency_key, {"act": "workarea.policy", "node": node_id, "dev": development, "pol": pii_policy}, act)

    def set_tenant_policy(self, p: Principal, *, phone_regions: Sequence[str], idempotency_key: str | None = None) -> dict:
        """Journal the tenant's classifier policy (``tenant.policy_set``; role admin; docs/personal-data.md).

        ``phone_regions``: ISO 3166-1 alpha-2 codes whose national phone formats admission reads
        (upper-cased, de-duplicated, at most ``pii.MAX_PHONE_REGIONS``; empty: ``+`` numbers only).
        Returns ``{"phone_regions", "seq"}``. Raises ``access.denied``, ``admission.invalid``.
        """
        import oml.domain.pii as pii

        rules.require_act(p.role, "admin")
        try:
            regions = list(pii.phone_regions(phone_regions))
        except ValueError as exc:
            raise invalid(str(exc), field="phone_regions") from None

        def act(head):
            ev = self._append(head, "tenant.policy_set", self._actor(p), {"phone_regions": regions})
            return {"phone_regions": regions, "seq": ev.seq}

        return self._run(p, idempotency_key, {"act": "tenant.policy", "regions": regions}, act)

    def tenant_policy(self, p: Principal) -> dict:
        """``{"phone_regions": [...], "default": bool}``: what admission classifies with now (any role)."""
        import oml.domain.pii as pii

        with self._tx(p.tenant) as conn:
            regions = self.phone_regions(conn, p.tenant)
        return {"phone_regions": list(pii.DEFAULT_PHONE_REGIONS if regions is None else regions), "default": regions is None}

    @staticmethod
    def _phone_regions_lookup(tenant: str) -> pipelined.Query:
        return pipelined.Query("SELECT phone_regions FROM tenant_policies WHERE tenant_id = %(t)s", {"t": tenant}, prepare=True)

    @staticmethod
    def phone_regions(conn, tenant: str, rows: list | None = None) -> tuple[str, ...] | None:
        """The tenant's journalled phone regions (``tenant_policies``); ``None`` when none were set (the defaults apply).
        ``rows``: the lookup's result when already fetched (:meth:`_run`)."""
        if rows is None:
            (rows,) = pipelined.fetch(conn, [Admission._phone_regions_lookup(tenant)])
        return tuple(rows[0].phone_regions) if rows else None

    # ------------------------------------------------------------------ claims
    @staticmethod
    def _encryption_key_lookup(tenant: str) -> pipelined.Query:
        return pipelined.Query("SELECT version, public_key FROM tenant_keys WHERE tenant_id = %(t)s AND purpose = 'encryption'"
                               " AND retired_seq IS NULL", {"t": tenant}, prepare=True)

    def _head_regions(self, head: journal.Head) -> tuple[str, ...] | None:
        """:meth:`phone_regions` for ``head``'s transaction, read once (from its opening round trip when fetched there)."""
        return _memo(head, "phone_regions", lambda: self.phone_regions(head.conn, head.tenant, head.fetched.get("phone_regions")))

    def _head_key(self, head: journal.Head) -> tuple[int, bytes]:
        """:meth:`_encryption_key` for ``head``'s transaction, read once (from its opening round trip when fetched there)."""
        return _memo(head, "encryption_key", lambda: self._encryption_key(head.conn, head.tenant, head.fetched.get("encryption_key")))

    def _encryption_key(self, conn, tenant: str, rows: list | None = None) -> tuple[int, bytes]:
        """The tenant's current encryption key ``(version, X25519 public key)``; ``rows``: the lookup's result when
        already fetched. Raises ``LookupError`` when the tenant has none (a database not written by admission)."""
        if rows is None:
            (rows,) = pipelined.fetch(conn, [self._encryption_key_lookup(tenant)])
        if len(rows) != 1:
            raise LookupError("tenant has no current encryption key")
        return rows[0].version, bytes(rows[0].public_key)

    def seal_artifact(self, conn, tenant: str, body: dict, *, kind: str, claim_id: str | None, version_id: str | None, seq_hint: int,
                      key: tuple[int, bytes] | None = None, pending: batching.Batch | None = None,
                      plaintext: bytes | None = None, artifact_id: str | None = None,
                      item: int | None = None) -> tuple[str, bytes]:
        """Encrypt ``body`` as a new artifact; stores ciphertext and wrapped DEK; returns (artifact id, digest).

        ``key`` is the tenant's current ``(version, public key)`` for encryption when the caller already has it;
        with ``pending`` the rows are written when that group commit flushes (item ``item`` of it: sealed
        ahead by its worker when it was given this artifact's id, ``artifact_id``); ``plaintext`` is
        ``canonical(body)`` when the caller has computed it.
        """
        artifact_id = artifact_id or new_id()
        version, pub = key or self._encryption_key(conn, tenant)
        aad = envelope.body_aad(tenant, claim_id or "", version_id or "", artifact_id)
        info = envelope.dek_info(tenant, artifact_id, version)
        row = batching.Artifact(artifact_id, kind, claim_id, version_id, b"", b"", seq_hint, version, b"")
        if pending is not None:
            return artifact_id, pending.seal(body, row, aad=aad, info=info, public_key=pub, plaintext=plaintext, item=item).digest
        sealed = envelope.seal(body, aad=aad, info=info, public_key=pub, key_version=version, plaintext=plaintext)
        batching.write_artifacts(conn, tenant, [row._replace(ciphertext=sealed.ciphertext, digest=sealed.digest,
                                                             wrapped_dek=sealed.wrapped_dek)])
        return artifact_id, sealed.digest

    def subject_hmac(self, tenant: str, kind: str, normalised: str) -> bytes:
        key = self.keystore.get(tenant, "subject-hmac")
        return hmac.new(key, f"{kind}:{normalised}".encode(), hashlib.sha256).digest()

    def _check_personal_data(self, wa, body: dict, field: str = "body",
                             regions: Sequence[str] | None = None,
                             classify: Callable[[], list] | None = None) -> list[tuple[str, str]]:
        """Run the classifier under the workarea's policy; returns normalised declared subjects.

        ``regions``: the tenant's phone regions (:meth:`phone_regions`; ``None``: ``pii.DEFAULT_PHONE_REGIONS``).
        ``classify``: returns the body's findings (a group commit's, classified ahead in its worker) instead of
        ``pii.classify_body(body, phone_regions=regions)``; called at the same point.
        Raises ``admission.personal_data`` (422) or, for a credential under any policy,
        ``admission.credential`` (422), naming ``field`` (the body's place in the request) and
        each finding's kind, path and offsets, never its text; ``admission.invalid`` for bad ``data_subjects``.
        """
        import oml.domain.pii as pii  # at first use (phonenumbers is slow to import); not `from … import`, whose per-call lookup runs Python code

        declared_raw = body.get("data_subjects") or []
        subjects: list[tuple[str, str]] = []
        for i, s in enumerate(declared_raw):
            if not isinstance(s, dict) or not isinstance(s.get("kind"), str) or not isinstance(s.get("value"), str):
                raise invalid("each data subject needs string kind and value", field=f"{field}.data_subjects[{i}]")
            try:
                subjects.append((s["kind"], pii.normalise_subject(s["kind"], s["value"])))
            except ValueError:
                raise invalid("data subject value cannot be normalised for its kind", field=f"{field}.data_subjects[{i}].value") from None
        findings = pii.classify_body(body, phone_regions=regions) if classify is None else classify()
        try:
            pii.decide(wa.pii_policy, findings, subjects)
        except pii.ContentRefused as exc:
            detail = ("the body contains a credential or secret, refused under every policy"
                      if isinstance(exc, pii.CredentialRefused) else
                      f"the body contains personal data not allowed by the workarea policy ({wa.pii_policy})")
            raise OMLError(
                exc.code,
                detail,
                422,
                {"field": field, "reason": exc.reason,
                 "findings": [{"kind": f.kind, "path": f.path, "start": f.start, "end": f.end, "in_key": getattr(f, "in_key", False)}
                              for f in exc.findings]},
            ) from None
        return subjects

    @traced("admission.submit")
    def submit(self, p: Principal, items: Sequence[Submission], *, idempotency_key: str | None = None) -> dict:
        """Admit one or more claim versions as ``held`` in one transaction (group commit), all or nothing.

        Returns ``{"items": [{"claim_id", "version_id", "version_no"}…]}``. No journal ``seq``: it
        counts every act of the tenant, simulated ones included, so a writer outside an audience
        must not see it (docs/simulations.md, "Sequence numbers").
        Raises ``access.denied``, ``workarea.not_found``, ``claim.not_found``,
        ``admission.invalid``, ``admission.personal_data``; for simulation
        material (docs/simulations.md) ``simulation.not_found`` (404, a key
        outside the audience), ``simulation.closed`` (409), ``simulation.mixed`` (422).
        """
        rules.require_act(p.role, "submit")
        if not items:
            raise invalid("at least one claim is required", field="claims")
        # A workarea id is journalled as given: an upper-case one is the same workarea, written in lower case.
        items = [dataclasses.replace(s, workarea_id=s.workarea_id.lower())
                 if _is_uuid(s.workarea_id) and s.workarea_id.lower() != s.workarea_id else s
                 for s in items]
        plaintexts: list[bytes] = []
        for i, s in enumerate(items):
            # Before the request digest, which canonicalises every body: a float is a refusal, not a 500.
            try:
                plaintexts.append(canonical(s.body))
            except CanonicalError:
                raise invalid(f"body must be JSON without floats, integers beyond 2^53 or nesting deeper than {MAX_DEPTH}",
                              field=f"claims[{i}].body") from None
        request = _SubmitRequest(items, plaintexts)

        named = _NamedClaims.of(items)

        def act(head):
            out = []
            named.read(head.fetched)
            head.memo["named claims"] = named
            b = batching.attach(head, len(items))
            ok = False
            try:
                if b.worker is not None:  # classified and sealed in the worker ahead of the loop, under this lock
                    b.ahead(self._head_regions(head), self._head_key(head),
                            [(s.body, plaintexts[i], s.claim_id is None) for i, s in enumerate(items)])
                for i, s in enumerate(items):
                    try:
                        out.append(self._submit_one(head, p, s, i, plaintexts[i]))
                    except OMLError as exc:
                        if "field" in exc.extra:
                            raise
                        # All or nothing: the refusal names the item that caused it (a copy: some refusals are shared constants).
                        raise OMLError(exc.code, exc.detail, exc.status, {**exc.extra, "field": f"claims[{i}]"}) from None
                ok = True
            finally:
                batching.detach(head, ok=ok)
            return {"items": out}

        # Read under the lock in the opening round trip (_run): the workareas named, the phone regions, the key.
        lookups: dict[Any, pipelined.Query] = {
            ("workarea", w): self._workarea_lookup(p.tenant, w) for w in dict.fromkeys(s.workarea_id for s in items) if _is_uuid(w)}
        lookups["phone_regions"] = self._phone_regions_lookup(p.tenant)
        lookups["encryption_key"] = self._encryption_key_lookup(p.tenant)
        lookups.update(named.lookups(p.tenant))
        return self._run(p, idempotency_key, request, act, lookups)

    def _submit_one(self, head: journal.Head, p: Principal, s: Submission, i: int, plaintext: bytes | None = None) -> dict:
        """Admit item ``i`` of a submit under ``head`` (``plaintext``: ``canonical(s.body)``, computed by :meth:`submit`)."""
        conn = head.conn
        if s.kind not in rules.KINDS:
            raise invalid("kind must be fact or steering", field=f"claims[{i}].kind")
        if s.provenance not in rules.PROVENANCES:
            raise invalid("provenance must be observed, reported, inferred or simulation", field=f"claims[{i}].provenance")
        if s.provenance == "simulation" and s.simulation_id is None:
            raise invalid("provenance simulation requires a simulation", field=f"claims[{i}].provenance")
        if s.confidence is not None and not (0 <= s.confidence <= 1000):
            raise invalid("confidence must be an integer 0-1000", field=f"claims[{i}].confidence")
        if not isinstance(s.body.get("statement"), str) or not s.body["statement"].strip():
            raise invalid("body.statement must be a non-empty string", field=f"claims[{i}].body.statement")
        wa = _memo(head, ("workarea", s.workarea_id),
                   lambda: self._scoped_workarea(conn, p, s.workarea_id, head.fetched.get(("workarea", s.workarea_id))))
        regions = self._head_regions(head)
        b = head.batch
        subjects = self._check_personal_data(wa, s.body, f"claims[{i}].body", regions,
                                             None if b is None else lambda: b.findings(i, s.body, regions))
        # Simulation taint (docs/simulations.md): material a key outside the audience cannot see is,
        # to that key, material that does not exist -- the same refusal as for a missing id.
        explicit_sim = claim_sim = sup_sim = None
        if s.simulation_id is not None:
            explicit_sim = _uuid(s.simulation_id, f"claims[{i}].simulation_id")
            if self._simulation_state(head, p, explicit_sim) is None:
                raise simrules.simulation_not_found()
        existing_versions: list = []
        ids = b.prepared.get(i) if b is not None else None  # drawn ahead for the worker to seal with (batch.Batch.ahead)
        if s.claim_id is None:
            claim_id, version_no, kind = ids.claim_id if ids else new_id(), 1, s.kind
            if s.supersedes is not None:
                raise invalid("supersedes needs claim_id", field=f"claims[{i}].supersedes")
        else:
            claim, existing_versions = head.memo["named claims"].claim_and_versions(head, _uuid(s.claim_id, f"claims[{i}].claim_id"))
            if claim is None or claim.erased_seq is not None:
                raise not_found("claim")
            if claim.simulation_id is not None:
                claim_sim = str(claim.simulation_id)
                if self._simulation_state(head, p, claim_sim) is None:
                    raise not_found("claim")
            if not p.can_access(claim.path):
                raise not_found("claim")
            if str(claim.workarea_id) != s.workarea_id:
                raise invalid("a new version stays in its claim's workarea", field=f"claims[{i}].workarea_id")
            claim_id, kind = str(claim.claim_id), claim.kind
            if s.supersedes is not None:
                sup_id = _uuid(s.supersedes, f"claims[{i}].supersedes")
                sup = next((v for v in existing_versions if str(v.version_id) == sup_id), None)
                if sup is not None and sup.tainted:
                    sup_sim = str(sup.simulation_id)
                    if self._simulation_state(head, p, sup_sim) is None:
                        sup = None
                if sup is None:
                    raise invalid("supersedes must name a version of the same claim", field=f"claims[{i}].supersedes")
        derived = []
        derived_sims: list[str | None] = []
        for j, d in enumerate(s.derived_from):
            d = _uuid(d, f"claims[{i}].derived_from[{j}]")
            if d in derived:  # one lineage edge per pair of claims (claim_edges' key): a repeat is the client's slip
                raise invalid("derived_from names a claim twice", field=f"claims[{i}].derived_from[{j}]")
            ok = head.memo["named claims"].claim(head, d)
            if ok is not None and ok.simulation_id is not None and self._simulation_state(head, p, str(ok.simulation_id)) is None:
                ok = None
            if ok is None or not p.can_access(ok.path):
                raise invalid("derived_from names an unknown claim", field=f"claims[{i}].derived_from[{j}]")
            derived.append(str(ok.claim_id))
            derived_sims.append(str(ok.simulation_id) if ok.simulation_id else None)
        sim = simrules.taint_of(explicit=explicit_sim, claim_simulation=claim_sim, supersedes_simulation=sup_sim,
                                derived_simulations=derived_sims)
        if sim is not None and self._simulation_state(head, p, sim) != "open":
            raise OMLError("simulation.closed", "the simulation is closed: nothing more can be written inside it", 409)
        if s.claim_id is not None:
            version_no = simrules.next_version_no(
                [(v.version_no, v.tainted, str(v.simulation_id) if v.simulation_id else None) for v in existing_versions], sim)
        provenance = "simulation" if explicit_sim is not None else s.provenance
        version_id = ids.version_id if ids else new_id()
        enc = self._head_key(head)
        artifact_id, digest = self.seal_artifact(conn, p.tenant, s.body, kind="body", claim_id=claim_id,
                                                 version_id=version_id, seq_hint=head.seq + 1, key=enc, pending=head.batch,
                                                 plaintext=plaintext, artifact_id=ids.artifact_id if ids else None, item=i)
        valid_from, valid_to = _norm_time(s.valid_from, f"claims[{i}].valid_from"), _norm_time(s.valid_to, f"claims[{i}].valid_to")
        if valid_from is not None and valid_to is not None and valid_to <= valid_from:  # one text format: text order is time order
            raise invalid("valid_to must be after valid_from (valid time is [valid_from, valid_to))", field=f"claims[{i}].valid_to")
        data = {
            "claim_id": claim_id, "version_id": version_id, "version_no": version_no, "workarea_id": s.workarea_id,
            "kind": kind, "provenance": provenance, "supersedes": s.supersedes, "derived_from": derived,
            "valid_from": valid_from, "valid_to": valid_to,
            "confidence": s.confidence, "artifact_id": artifact_id, "ciphertext_sha256": digest.hex(),
            "key_version": enc[0],
        }
        if sim is not None:
            data["simulation_id"] = sim
            data["tainted"] = True
        self._append(head, "claim.submitted", self._actor(p), data)
        rows = [(claim_id, self.subject_hmac(p.tenant, kind_, value)) for kind_, value in subjects]
        if head.batch is not None:
            head.batch.subjects += rows
        else:
            batching.write_subjects(conn, p.tenant, rows)
        return {"claim_id": claim_id, "version_id": version_id, "version_no": version_no}

    @traced("admission.review")
    def review(self, p: Principal, version_id: str, decision: str, reason: str, *, note: str | None = None,
               idempotency_key: str | None = None) -> dict:
        """Promote, reject or demote a version (reviewer role; not the author's identity).

        Raises ``access.separation_of_duties``, ``claim.stale_supersession``,
        ``claim.invalid_transition``, ``claim.not_found``, ``claim.erased``.
        A tainted version is reviewed by its simulation's audience only
        (``claim.not_found`` for anyone else) and is promoted as a simulation
        tip (``"overlay": true``), or refused with ``simulation.tip_refused``
        when its simulation is closed (docs/simulations.md).
        """
        rules.require_act(p.role, "review")
        if reason not in REASON_CODES:
            raise invalid("reason must be a code from the closed list", field="reason", allowed=sorted(REASON_CODES))
        if note is not None and (len(note) > 4000 or "\x00" in note):
            raise invalid("note must be at most 4000 characters without NUL", field="note")
        vid = _uuid(version_id, "version_id")

        def act(head):
            conn = head.conn
            v = conn.execute(sa.text(
                "SELECT v.version_id, v.claim_id, v.status, v.author_identity, v.supersedes, v.tainted, v.simulation_id, w.path, w.development, c.erased_seq"
                " FROM claim_versions v JOIN workareas w ON w.tenant_id = v.tenant_id AND w.node_id = v.workarea_id"
                " JOIN claims c ON c.tenant_id = v.tenant_id AND c.claim_id = v.claim_id"
                " WHERE v.tenant_id = :t AND v.version_id = CAST(:v AS uuid)"), {"t": p.tenant, "v": vid}).one_or_none()
            if v is None or not p.can_access(v.path):
                raise not_found("claim version")
            sim_state = self.simulation_state(conn, p, str(v.simulation_id)) if v.tainted else None
            if v.tainted and sim_state is None:
                # Reviewers come from the audience; to anyone else the version does not exist.
                raise not_found("claim version")
            if v.erased_seq is not None:
                raise OMLError("claim.erased", "the claim was erased", 410)
            self_signed = rules.check_review(author_identity=str(v.author_identity), reviewer_identity=p.identity_id,
                                             development=v.development, status=v.status, decision=decision)
            claim_id = str(v.claim_id)
            data: dict[str, Any] = {"claim_id": claim_id, "version_id": vid, "reason": reason}
            if decision == "promote":
                current = projector.current_tip(conn, p.tenant, claim_id)
                if v.tainted:
                    # A tainted version is promoted as a simulation tip (the audience's overlay), never a default tip.
                    simrules.check_overlay_promotion(simulation_open=sim_state == "open")
                    sim_tip = conn.execute(sa.text(
                        "SELECT version_id FROM sim_tip_intervals WHERE tenant_id = :t AND simulation_id = :s AND claim_id = :c AND to_seq IS NULL"),
                        {"t": p.tenant, "s": v.simulation_id, "c": claim_id}).scalar()
                    current = str(sim_tip) if sim_tip else current
                rules.check_supersession(str(v.supersedes) if v.supersedes else None, current)
                data["self_signed"] = self_signed
                if v.tainted:
                    data["overlay"] = True
                    data["simulation_id"] = str(v.simulation_id)
            if note is not None:
                art, dig = self.seal_artifact(conn, p.tenant, {"note": note}, kind="note", claim_id=claim_id, version_id=vid, seq_hint=head.seq + 1)
                data["note"] = {"artifact_id": art, "sha256": dig.hex()}
            self._append(head, {"promote": "claim.promoted", "reject": "claim.rejected", "demote": "claim.demoted"}[decision],
                         self._actor(p), data)
            # No journal seq in the answer, for the reason given in submit().
            return {"claim_id": claim_id, "version_id": vid, "status": {"promote": "promoted", "reject": "rejected", "demote": "demoted"}[decision],
                    "self_signed": self_signed}

        return self._run(p, idempotency_key, {"act": "claim.review", "v": vid, "d": decision, "r": reason, "n": note}, act)

    def _simulation_state(self, head: journal.Head, p: Principal, simulation_id: str) -> str | None:
        """:meth:`simulation_state` read once per transaction and simulation (no act of a submit opens or closes one)."""
        return _memo(head, ("simulation", simulation_id), lambda: self.simulation_state(head.conn, p, simulation_id))

    def simulation_state(self, conn, p: Principal, simulation_id: str) -> str | None:
        """``"open"`` or ``"closed"`` when ``p`` is in the simulation's audience; ``None`` when it is not (or no such simulation)."""
        row = conn.execute(sa.text("SELECT closed_seq FROM simulations WHERE tenant_id = :t AND simulation_id = CAST(:s AS uuid)"
                                   " AND :p = ANY(audience)"), {"t": p.tenant, "s": simulation_id, "p": p.principal_id}).one_or_none()
        if row is None:
            return None
        return "open" if row.closed_seq is None else "closed"

    # ------------------------------------------------------------------ keys
    def rotate_signing_key(self, tenant: str, *, actor: Actor = SYSTEM, recovery_private_key: str | None = None,
                           pop_override: bytes | None = None, principal: Principal | None = None,
                           idempotency_key: str | None = None) -> dict:
        """Rotate the tenant's signing key.

        The event carries the new key and its proof of possession
        (DESIGN.md, Formats). With ``recovery_private_key`` (hex, the key
        printed at creation) the rotation is authorised by the recovery key
        and signed by it, for a compromised or lost signing key. The recovery
        key is used in memory and never stored.
        """
        new = Ed25519PrivateKey.generate()
        new_pub = signing.raw_public(new)
        digest = request_digest({"act": "keys.rotate"})
        with self._tx(tenant) as conn:
            head = journal.Head(conn, tenant)
            authority.require("signing_key.rotated", self._role_of(head, self._actor(principal) if principal is not None else actor))
            if principal is not None:
                first = self._idempotent(principal, idempotency_key, digest, conn)
                if first is not None:
                    return first
            old_pub = bytes(conn.execute(sa.text("SELECT public_key FROM tenant_keys WHERE tenant_id = :t AND purpose = 'signing' AND retired_seq IS NULL"),
                                         {"t": tenant}).scalar())
            pop = pop_override if pop_override is not None else new.sign(signing.pop_message(tenant, old_pub, new_pub))
            data = {"new_key": new_pub.hex(), "pop": pop.hex(), "authorised_by": "recovery" if recovery_private_key else "current"}
            if not signing.verify(new_pub, pop, signing.pop_message(tenant, old_pub, new_pub)):
                raise OMLError("keys.invalid_proof", "the new key's proof of possession does not verify", 422)
            new_kid = signing.kid(new_pub)
            self.keystore.put(tenant, f"signing/{new_kid}", signing.raw_private(new))
            if recovery_private_key:
                try:
                    rk = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(recovery_private_key.strip()))
                except ValueError:
                    raise OMLError("keys.not_recovery_key", "the recovery key must be 64 hex characters", 403) from None
                rk_pub = signing.raw_public(rk)
                registered = bytes(conn.execute(sa.text("SELECT public_key FROM tenant_keys WHERE tenant_id = :t AND purpose = 'recovery'"), {"t": tenant}).scalar())
                if rk_pub != registered:
                    raise OMLError("keys.not_recovery_key", "this is not the tenant's registered recovery key", 403)
                rkid = signing.kid(rk_pub)
                ev = journal.append(head, _OneKeySigner(rk), "signing_key.rotated", actor, data, kid=rkid)
            else:
                ev = journal.append(head, self.signer, "signing_key.rotated", actor, data)
            projector.apply(conn, tenant, ev.seq, ev.at, ev.event["actor"], "signing_key.rotated", data)
            response = {"kid": new_kid, "fingerprint": signing.fingerprint(new_pub), "seq": ev.seq}
            if principal is not None:
                self._remember(principal, idempotency_key, digest, response, conn)
        return response

    def system_event(self, tenant: str, type: str, data: dict[str, Any] | Callable[[sa.Connection], dict[str, Any] | None],
                     actor: Actor = SYSTEM, *, effect: Callable[[sa.Connection, journal.Appended], None] | None = None
                     ) -> journal.Appended | None:
        """Journal a worker's report (``reconciliation.completed``, ``readlog.anchored``, …) through admission.

        ``data`` may be a callable ``(conn) -> dict | None`` run after the
        chain-head lock is taken, so what it reads cannot race another
        append; ``None`` appends nothing and returns ``None``. ``effect(conn,
        appended)`` runs in the same transaction after the append (e.g.
        marking the read-log rows a ``readlog.anchored`` seals): the event and
        its effect commit together or not at all.
        """
        with self._tx(tenant) as conn:
            head = journal.Head(conn, tenant)
            if callable(data):
                data = data(conn)
                if data is None:
                    return None
            ev = self._append(head, type, actor, data)
            if effect is not None:
                effect(conn, ev)
            return ev


class _OneKeySigner:
    """Signs with a key held in memory for one act (the recovery key)."""

    def __init__(self, key: Ed25519PrivateKey) -> None:
        self.key = key

    def sign_event(self, tenant: str, kid: str, chain_hash: bytes) -> bytes:
        return self.key.sign(signing.event_message(chain_hash))


_CANONICAL_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def _claims_query(tenant: str, claim_ids: list[str]) -> pipelined.Query:
    """Claims ``claim_ids`` with their workarea's path: claim_id, workarea_id, kind, erased_seq, simulation_id, path."""
    return pipelined.Query(
        "SELECT c.claim_id, c.workarea_id, c.kind, c.erased_seq, c.simulation_id, w.path FROM claims c"
        " JOIN workareas w ON w.tenant_id = c.tenant_id AND w.node_id = c.workarea_id"
        " WHERE c.tenant_id = %(t)s AND c.claim_id = ANY(CAST(%(c)s AS uuid[]))", {"t": tenant, "c": claim_ids})


def _versions_query(tenant: str, claim_ids: list[str]) -> pipelined.Query:
    """The versions of claims ``claim_ids``: claim_id, version_id, version_no, tainted, simulation_id."""
    return pipelined.Query(
        "SELECT claim_id, version_id, version_no, tainted, simulation_id FROM claim_versions"
        " WHERE tenant_id = %(t)s AND claim_id = ANY(CAST(%(c)s AS uuid[]))", {"t": tenant, "c": claim_ids})


@dataclass
class _NamedClaims:
    """The claims a submit names -- ``ids`` (new versions' claims and lineage, lowercase), of which ``versioned``
    get new versions -- as its opening round trip read them (``claims`` and ``versions`` by claim id), so a batch of
    new versions or of derived claims costs the statements of a batch of new claims (issue 14). ``changed``: the
    claims an item of the submit has added a version to so far, whose versions are read again."""

    ids: frozenset[str]
    versioned: frozenset[str]
    claims: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, list] = field(default_factory=dict)
    changed: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, items: Sequence["Submission"]) -> "_NamedClaims":
        """The ids ``items`` name; one that is not a UUID is left out (its item is refused on its own)."""
        ids: set[str] = set()
        versioned: set[str] = set()
        for s in items:
            if _is_uuid(s.claim_id):
                versioned.add(s.claim_id.lower())
            ids.update(d.lower() for d in s.derived_from or () if _is_uuid(d))
        return cls(frozenset(ids | versioned), frozenset(versioned))

    def lookups(self, tenant: str) -> dict[Any, pipelined.Query]:
        if not self.ids:
            return {}
        return {"named claims": _claims_query(tenant, sorted(self.ids)),
                "named versions": _versions_query(tenant, sorted(self.versioned))}

    def read(self, fetched: dict[Any, list]) -> None:
        """Keep the rows of :meth:`lookups` from the opening round trip's ``fetched`` (a transaction's own)."""
        self.claims = {str(r.claim_id): r for r in fetched.get("named claims", ())}
        self.versions, self.changed = {}, set()
        for r in fetched.get("named versions", ()):
            self.versions.setdefault(str(r.claim_id), []).append(r)

    def claim(self, head: journal.Head, claim_id: str):
        """The claim ``claim_id`` (lowercase) as :func:`_claims_query` reads it, or ``None``: as the opening round trip
        read it when it read that id (a submit changes no claim row it reads, and cannot name a claim it creates),
        else read now (an id in another spelling)."""
        if claim_id in self.ids:
            return self.claims.get(claim_id)
        batching.settle(head)
        (rows,) = pipelined.fetch(head.conn, [_claims_query(head.tenant, [claim_id])])
        return rows[0] if rows else None

    def claim_and_versions(self, head: journal.Head, claim_id: str) -> tuple[Any, list]:
        """:meth:`claim` and, when it exists, its versions (version_id, version_no, tainted, simulation_id): as the
        opening round trip read them unless an earlier item of this submit added a version to the claim, else read
        now, after the batch's rows so far."""
        claim = self.claim(head, claim_id)
        if claim is None:
            return None, []
        if claim_id in self.versioned and claim_id not in self.changed:
            versions = self.versions.get(claim_id, [])
        else:
            batching.settle(head)
            (versions,) = pipelined.fetch(head.conn, [_versions_query(head.tenant, [claim_id])])
        self.changed.add(claim_id)  # this item adds a version: a later item of the submit reads them again
        return claim, versions


def _is_uuid(value: Any) -> bool:
    """A uuid in the hyphenated form PostgreSQL reads (anything else is looked up alone: a refusal there
    would otherwise abort the opening round trip)."""
    return isinstance(value, str) and _CANONICAL_UUID.fullmatch(value) is not None


def _uuid(value: str, field: str) -> str:
    import uuid

    try:
        return str(uuid.UUID(str(value)))
    except (ValueError, AttributeError, TypeError):
        raise invalid("must be a UUID", field=field) from None


def _norm_time(value: str | None, field: str) -> str | None:
    if value is None:
        return None
    import datetime as dt

    try:
        t = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except (ValueError, AttributeError):
        raise invalid("must be an ISO 8601 time with a zone", field=field) from None
    if t.tzinfo is None:
        raise invalid("must be an ISO 8601 time with a zone", field=field)
    # The journal writes times as YYYY-MM-DDTHH:MM:SS.ffffffZ: a four-digit UTC year (an offset can also carry
    # 0001-01-01 or 9999-12-31 out of the calendar, which Python refuses as an OverflowError).
    try:
        utc = t.astimezone(dt.timezone.utc)
    except OverflowError:
        utc = None
    if utc is None or utc.year < 1000:
        raise invalid("must be a time from the year 1000 to 9999 in UTC", field=field)
    return format_time(utc)


def _submission_request(s: Submission) -> dict:
    return {"w": s.workarea_id, "b": s.body, "k": s.kind, "p": s.provenance, "c": s.claim_id, "s": s.supersedes,
            "d": list(s.derived_from), "vf": s.valid_from, "vt": s.valid_to, "conf": s.confidence, "sim": s.simulation_id}
