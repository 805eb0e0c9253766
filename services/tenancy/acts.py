"""Tenancy acts: tenants, identities, principals (API keys), workareas and the tenant's policies.

Each act runs through :class:`oml.services.journal.acts.ActRunner` (one transaction, signed events, the
projector). Creating a tenant also puts its private keys in the KeyStore (docs/key-management.md).
"""
from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field

import sqlalchemy as sa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from oml.domain import claims as rules
from oml.domain import envelope, signing
from oml.domain.access import Principal, new_api_key
from oml.domain.canonical import new_id
from oml.domain.errors import OMLError, invalid, not_found
from oml.domain.events import SYSTEM
from oml.services.journal import journal
from oml.services.journal.acts import ActRunner
from oml.services.keys.keystore import KeyStore
from oml.services.storage import pipelined
from oml.services.tenancy import workareas


@dataclass(frozen=True)
class TenantCreated:
    tenant: str
    fingerprint: str          # trust anchor: SHA-256 of the signing public key
    verifier_key: str         # C2SP note verifier key for checkpoints
    # The two secrets stay out of repr(): a logged or traceback-printed result must not carry them.
    recovery_private_key: str = field(repr=False)  # hex; shown once, never stored
    admin_key: str = field(repr=False)             # oml_<id>_<secret>; shown once
    admin_principal: str
    admin_identity: str
    root_workarea: str


class Tenancy:
    """The tenancy acts of one process: ``acts`` runs them, ``keystore`` receives a new tenant's private keys."""

    def __init__(self, acts: ActRunner, keystore: KeyStore) -> None:
        self.acts = acts
        self.keystore = keystore

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
        with self.acts.tx(tenant) as conn:
            exists = conn.execute(sa.text("SELECT 1 FROM tenants WHERE tenant_id = :t"), {"t": tenant}).scalar()
            if exists:
                raise OMLError("tenant.exists", "a tenant with this id exists", 409)
            # Keys go to the KeyStore before the commit; an orphaned key of a tenant
            # that never committed is harmless, a committed tenant without keys is not.
            self.keystore.put(tenant, f"signing/{kid}", signing.raw_private(sk))
            self.keystore.put(tenant, "encryption/1", ek.private_bytes_raw())
            for name in ("subject-hmac", "query-hmac"):
                if not self.keystore.exists(tenant, name):
                    self.keystore.put(tenant, name, secrets.token_bytes(32))
            conn.execute(sa.text("INSERT INTO tenants (tenant_id) VALUES (:t)"), {"t": tenant})
            head = journal.create_head(conn, tenant)
            self.acts.append(head, "tenant.created", SYSTEM,
                         {"signing_key": sk_pub.hex(), "encryption_key": ek_pub.hex(), "recovery_key": rk_pub.hex()}, kid=kid)
            conn.execute(sa.text("SELECT oml_create_tenant_partitions()"))
            root = new_id()
            self.acts.append(head, "workarea.created", SYSTEM,
                         {"node_id": root, "parent_id": None, "label": root_label, "development": False, "pii_policy": "deny"})
            ident = new_id()
            self.acts.append(head, "identity.created", SYSTEM, {"identity_id": ident, "kind": "person"})
            conn.execute(sa.text("UPDATE identities SET display_name = 'bootstrap admin' WHERE tenant_id = :t AND identity_id = :i"),
                         {"t": tenant, "i": ident})
            key_id, key, secret_hash = new_api_key()
            self.acts.append(head, "principal.created", SYSTEM,
                         {"principal_id": key_id, "identity_id": ident, "role": "admin", "roots": [root], "secret_sha256": secret_hash.hex()})
            conn.execute(sa.text("INSERT INTO principal_directory (principal_id, tenant_id) VALUES (:p, :t)"), {"p": key_id, "t": tenant})
        from oml.domain.checkpoint import verifier_key

        return TenantCreated(tenant, signing.fingerprint(sk_pub), verifier_key(f"oml/{tenant}", sk_pub),
                             signing.raw_private(rk).hex(), key, key_id, ident, root)

    def create_identity(self, p: Principal, kind: str, display_name: str | None = None, *, idempotency_key: str | None = None) -> dict:
        rules.require_act(p.role, "admin")
        if kind not in ("person", "service"):
            raise invalid("kind must be person or service", field="kind")
        if display_name is not None and (len(display_name) > 200 or "\x00" in display_name):
            raise invalid("display_name must be at most 200 characters without NUL", field="display_name")

        def act(head):
            ident = new_id()
            ev = self.acts.append(head, "identity.created", self.acts.actor(p), {"identity_id": ident, "kind": kind})
            head.conn.execute(sa.text("UPDATE identities SET display_name = :d WHERE tenant_id = :t AND identity_id = :i"),
                              {"d": display_name, "t": p.tenant, "i": ident})
            return {"identity_id": ident, "seq": ev.seq}

        return self.acts.run(p, idempotency_key, {"act": "identity.create", "kind": kind, "name": display_name}, act)

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
                workareas.get(conn, p.tenant, r)
            key_id, key, secret_hash = new_api_key()
            ev = self.acts.append(head, "principal.created", self.acts.actor(p),
                              {"principal_id": key_id, "identity_id": identity_id, "role": role,
                               "roots": list(roots), "secret_sha256": secret_hash.hex()})
            conn.execute(sa.text("INSERT INTO principal_directory (principal_id, tenant_id) VALUES (:p, :t)"), {"p": key_id, "t": p.tenant})
            key_holder["key"] = key
            return {"principal_id": key_id, "seq": ev.seq}

        resp = self.acts.run(p, idempotency_key, {"act": "principal.create", "identity": identity_id, "role": role, "roots": list(roots)}, act)
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
            ev = self.acts.append(head, "principal.revoked", self.acts.actor(p), {"principal_id": principal_id})
            return {"principal_id": principal_id, "seq": ev.seq}

        return self.acts.run(p, idempotency_key, {"act": "principal.revoke", "principal": principal_id}, act)

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
                parent = workareas.get(conn, p.tenant, parent_id)
                path = f"{parent.path}.{label}"
            else:
                path = label
            if conn.execute(sa.text("SELECT 1 FROM workareas WHERE tenant_id = :t AND path = :p"), {"t": p.tenant, "p": path}).scalar():
                raise OMLError("workarea.exists", "a workarea with this path exists", 409)
            node = new_id()
            ev = self.acts.append(head, "workarea.created", self.acts.actor(p),
                              {"node_id": node, "parent_id": parent_id, "label": label, "development": development, "pii_policy": pii_policy})
            return {"node_id": node, "path": path, "seq": ev.seq}

        return self.acts.run(p, idempotency_key, {"act": "workarea.create", "label": label, "parent": parent_id,
                                              "dev": development, "pol": pii_policy}, act)

    def reparent_workarea(self, p: Principal, node_id: str, new_parent_id: str | None, *, idempotency_key: str | None = None) -> dict:
        """Move a subtree; every derived path (projections and index rows) is rewritten in the same transaction."""
        rules.require_act(p.role, "admin")

        def act(head):
            conn = head.conn
            wa = workareas.get(conn, p.tenant, node_id)
            if new_parent_id is not None:
                parent = workareas.get(conn, p.tenant, new_parent_id)
                if rules.is_within(parent.path, wa.path):
                    raise invalid("a workarea cannot move below itself", field="new_parent_id")
                new_path = f"{parent.path}.{wa.path.rsplit('.', 1)[-1]}"
            else:
                new_path = wa.path.rsplit(".", 1)[-1]
            if conn.execute(sa.text("SELECT 1 FROM workareas WHERE tenant_id = :t AND path = :p"), {"t": p.tenant, "p": new_path}).scalar():
                raise OMLError("workarea.exists", "a workarea with the target path exists", 409)
            ev = self.acts.append(head, "workarea.reparented", self.acts.actor(p), {"node_id": node_id, "new_parent_id": new_parent_id})
            for table in ("memories_fts", "memory_embeddings", "sim_memories_fts", "sim_memory_embeddings"):
                conn.execute(sa.text(f"UPDATE {table} SET path = :new || substr(path, length(:old) + 1)"
                                     " WHERE tenant_id = :t AND (path = :old OR starts_with(path, :old || '.'))"),
                             {"t": p.tenant, "new": new_path, "old": wa.path})
            return {"node_id": node_id, "path": new_path, "seq": ev.seq}

        return self.acts.run(p, idempotency_key, {"act": "workarea.reparent", "node": node_id, "parent": new_parent_id}, act)

    def set_workarea_policy(self, p: Principal, node_id: str, *, development: bool | None = None, pii_policy: str | None = None,
                            idempotency_key: str | None = None) -> dict:
        rules.require_act(p.role, "admin")
        if pii_policy is not None and pii_policy not in rules.PII_POLICIES:
            raise invalid("pii_policy must be deny, declare or allow", field="pii_policy")

        def act(head):
            wa = workareas.get(head.conn, p.tenant, node_id)
            dev = wa.development if development is None else development
            pol = wa.pii_policy if pii_policy is None else pii_policy
            ev = self.acts.append(head, "workarea.policy_set", self.acts.actor(p), {"node_id": node_id, "development": dev, "pii_policy": pol})
            return {"node_id": node_id, "development": dev, "pii_policy": pol, "seq": ev.seq}

        return self.acts.run(p, idempotency_key, {"act": "workarea.policy", "node": node_id, "dev": development, "pol": pii_policy}, act)

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
            ev = self.acts.append(head, "tenant.policy_set", self.acts.actor(p), {"phone_regions": regions})
            return {"phone_regions": regions, "seq": ev.seq}

        return self.acts.run(p, idempotency_key, {"act": "tenant.policy", "regions": regions}, act)

    def tenant_policy(self, p: Principal) -> dict:
        """``{"phone_regions": [...], "default": bool}``: what admission classifies with now (any role)."""
        import oml.domain.pii as pii

        with self.acts.tx(p.tenant) as conn:
            regions = phone_regions(conn, p.tenant)
        return {"phone_regions": list(pii.DEFAULT_PHONE_REGIONS if regions is None else regions), "default": regions is None}


def phone_regions_lookup(tenant: str) -> pipelined.Query:
    return pipelined.Query("SELECT phone_regions FROM tenant_policies WHERE tenant_id = %(t)s", {"t": tenant}, prepare=True)

def phone_regions(conn, tenant: str, rows: list | None = None) -> tuple[str, ...] | None:
    """The tenant's journalled phone regions (``tenant_policies``); ``None`` when none were set (the defaults apply).
    ``rows``: the lookup's result when already fetched (:meth:`ActRunner.run`)."""
    if rows is None:
        (rows,) = pipelined.fetch(conn, [phone_regions_lookup(tenant)])
    return tuple(rows[0].phone_regions) if rows else None

