"""Signing-key rotation: a new Ed25519 key with its proof of possession, authorised by the current key or by the
tenant's recovery key (docs/key-management.md).

Credentials: the KeyStore (the new private key goes there before the commit) and ``oml_admission``.
"""
from __future__ import annotations

import sqlalchemy as sa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from oml.domain import authority, signing
from oml.domain.access import Principal
from oml.domain.errors import OMLError
from oml.domain.events import SYSTEM, Actor
from oml.services.journal import journal, projector
from oml.services.journal.acts import ActRunner, request_digest
from oml.services.keys.keystore import KeyStore


def rotate_signing_key(acts: ActRunner, keystore: KeyStore, tenant: str, *, actor: Actor = SYSTEM, recovery_private_key: str | None = None,
                       pop_override: bytes | None = None, principal: Principal | None = None,
                       idempotency_key: str | None = None) -> dict:
    """Rotate the tenant's signing key.

    The event carries the new key and its proof of possession
    (docs/journal-format.md). With ``recovery_private_key`` (hex, the key
    printed at creation) the rotation is authorised by the recovery key
    and signed by it, for a compromised or lost signing key. The recovery
    key is used in memory and never stored.
    """
    new = Ed25519PrivateKey.generate()
    new_pub = signing.raw_public(new)
    digest = request_digest({"act": "keys.rotate"})
    with acts.tx(tenant) as conn:
        head = journal.Head(conn, tenant)
        authority.require("signing_key.rotated", acts.role_of(head, acts.actor(principal) if principal is not None else actor))
        if principal is not None:
            first = acts.first_response(principal, idempotency_key, digest, conn)
            if first is not None:
                return first
        old_pub = bytes(conn.execute(sa.text("SELECT public_key FROM tenant_keys WHERE tenant_id = :t AND purpose = 'signing' AND retired_seq IS NULL"),
                                     {"t": tenant}).scalar())
        pop = pop_override if pop_override is not None else new.sign(signing.pop_message(tenant, old_pub, new_pub))
        data = {"new_key": new_pub.hex(), "pop": pop.hex(), "authorised_by": "recovery" if recovery_private_key else "current"}
        if not signing.verify(new_pub, pop, signing.pop_message(tenant, old_pub, new_pub)):
            raise OMLError("keys.invalid_proof", "the new key's proof of possession does not verify", 422)
        new_kid = signing.kid(new_pub)
        keystore.put(tenant, f"signing/{new_kid}", signing.raw_private(new))
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
            ev = journal.append(head, acts.signer, "signing_key.rotated", actor, data)
        projector.apply(conn, tenant, ev.seq, ev.at, ev.event["actor"], "signing_key.rotated", data)
        response = {"kid": new_kid, "fingerprint": signing.fingerprint(new_pub), "seq": ev.seq}
        if principal is not None:
            acts.remember(principal, idempotency_key, digest, response, conn)
    return response


class _OneKeySigner:
    """Signs with a key held in memory for one act (the recovery key)."""

    def __init__(self, key: Ed25519PrivateKey) -> None:
        self.key = key

    def sign_event(self, tenant: str, kid: str, chain_hash: bytes) -> bytes:
        return self.key.sign(signing.event_message(chain_hash))
